// The one field list (core/spec_fields.hpp): same_request() tells specs apart
// by every field of it, and the JSON codecs carry every field they show.
#include <catch2/catch.hpp>

#include "core/json_codec.hpp"
#include "core/spec_fields.hpp"
#include "full_spec.hpp"

using namespace dsec;
namespace codec = dsec::json_codec;

namespace {

// Another value of the same type.
void change(std::string& s) { s += "x"; }
void change(int64_t& n) { n += 1; }
void change(double& d) { d += 0.5; }
void change(std::vector<std::string>& v) { v.push_back("x"); }
void change(std::map<std::string, std::string>& m) { m["x"] = "y"; }
void change(sandbox_state& s) {
  s = s == sandbox_state::running ? sandbox_state::paused : sandbox_state::running;
}

/// Calls `f(name, member)` for each field of `x`, nested lists flattened.
template <class T, class F>
void for_each_leaf(T& x, F&& f) {
  for_each_field<T>([&](const auto& fd) {
    if constexpr (has_field_list_v<typename std::decay_t<decltype(fd)>::type>)
      for_each_leaf(x.*(fd.member), f);
    else
      f(fd.name, x.*(fd.member));
  });
}

} // namespace

TEST_CASE("same_request tells specs apart by each field of the list", "[fields]") {
  sandbox_spec base;
  base.layers = {"base/busybox@1"};
  CHECK(same_request(base, base));
  size_t leaves = 0;
  for_each_leaf(base, [&](const char*, auto&) { ++leaves; });
  CHECK(leaves >= 16);
  for (size_t i = 0; i < leaves; ++i) {
    auto other = base;
    size_t k = 0;
    std::string changed;
    for_each_leaf(other, [&](const char* name, auto& v) {
      if (k++ == i) {
        change(v);
        changed = name;
      }
    });
    INFO("changed " << changed);
    CHECK_FALSE(same_request(base, other));
  }
}

TEST_CASE("a spec with no default field survives encode and parse", "[fields]") {
  // full_spec() leaves these at their defaults.
  auto s = test::full_spec();
  s.backend = "microvm";
  s.network.allow = {"pypi.org:443"};
  s.paused_ttl_s = 600;
  auto back = codec::parse_spec(codec::encode(s));
  REQUIRE(back.ok());
  CHECK(same_request(s, *back));
  // A record's spec, read back leniently, too.
  codec::sandbox_record rec{"n-1.abc", s, 1700000000123, 0, {"sha256:a", "sha256:b"}, ""};
  auto r = codec::decode_record(codec::encode(rec));
  REQUIRE(r.ok());
  CHECK(same_request(s, r->spec));
}

TEST_CASE("a sandbox info's shown fields survive encode and decode", "[fields]") {
  sandbox_info s;
  for_each_leaf(s, [](const char*, auto& v) { change(v); });
  s.created_at_ms = 1700000000123;
  s.expires_at_ms = 1700000900123;
  s.paused_expires_at_ms = 1700000500123;
  auto back = codec::decode_sandbox(codec::encode(s));
  REQUIRE(back.ok());
  for_each_field<sandbox_info>([&](const auto& fd) {
    if constexpr (std::decay_t<decltype(fd)>::form != shown::internal) {
      INFO("field " << fd.name);
      sandbox_info a, b;
      a.*(fd.member) = s.*(fd.member);
      b.*(fd.member) = (*back).*(fd.member);
      CHECK(equal_fields(a, b));
    }
  });
}
