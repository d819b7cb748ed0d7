// fs_entry (core/fs_entry.hpp) crosses nodes in the answer of a forwarded E2B
// filesystem call: registered, it survives serialization with every field.
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "actors/wire_types.hpp"
#include "core/fs_entry_inspect.hpp"

namespace dsec {

TEST_CASE("fs_entry survives a message round trip", "[actor][wire]") {
  caf::actor_system_config cfg;
  add_wire_types(cfg);
  caf::actor_system sys{cfg};
  fs_entry e;
  e.name = "b";
  e.path = "/a/b";
  e.type = "symlink";
  e.size = 12;
  e.mode = 0120777;
  e.uid = 1000;
  e.gid = 1001;
  e.mtime_ns = 1'700'000'000'000'000'007;
  e.symlink_target = "../c";
  e.metadata = {{"author", "ada"}, {"stage", "b"}};
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(caf::make_message(std::vector<fs_entry>{e, e})));
  caf::message out;
  caf::binary_deserializer source{sys, buf};
  REQUIRE_FALSE(source(out));
  REQUIRE(out.match_elements<std::vector<fs_entry>>());
  auto& v = out.get_as<std::vector<fs_entry>>(0);
  REQUIRE(v.size() == 2);
  CHECK(v[1].name == "b");
  CHECK(v[1].path == "/a/b");
  CHECK(v[1].type == "symlink");
  CHECK(v[1].size == 12);
  CHECK(v[1].mode == 0120777);
  CHECK(v[1].uid == 1000);
  CHECK(v[1].gid == 1001);
  CHECK(v[1].mtime_ns == e.mtime_ns);
  CHECK(v[1].symlink_target == "../c");
  CHECK(v[1].metadata == e.metadata);
}

} // namespace dsec
