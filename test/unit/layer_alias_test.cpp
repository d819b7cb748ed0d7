// Layer aliases (layers/aliases.hpp): the name grammar and the file's refusals.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <string>

#include "layers/aliases.hpp"
#include "sys/fs.hpp"

using namespace dsec;

TEST_CASE("alias names are [a-z0-9._-], never a ref or a path", "[layer_alias]") {
  for (auto ok : {"base", "swe-env", "py3.11", "a", "0x_1"})
    CHECK(layers::check_alias_name(ok));
  for (auto bad : {"", "Base", "-x", ".x", "a/b", "base/python@3.11", "a b", "é"})
    CHECK(layers::check_alias_name(bad).err().code == errc::invalid_argument);
  CHECK_FALSE(layers::check_alias_name(std::string(65, 'a')));
}

TEST_CASE("a store's aliases file: missing, set, removed, corrupt", "[layer_alias]") {
  char tmpl[] = "/tmp/dsec-alias-XXXXXX";
  REQUIRE(::mkdtemp(tmpl));
  std::string root = tmpl;
  auto s = layers::store::open(root);
  REQUIRE(s);
  auto none = layers::read_aliases(root);
  REQUIRE(none);
  CHECK(none->empty());
  // Only a layer of this store can be named.
  auto missing = layers::set_alias(*s, "env", "nosuch/layer@1");
  CHECK(missing.err().code == errc::not_found);
  CHECK(missing.err().message.find("env -> nosuch/layer@1") != std::string::npos);
  CHECK(layers::remove_alias(*s, "env").err().code == errc::not_found);
  REQUIRE(sys::write_file_atomic(root + "/aliases.json", "{\"env\": \"base/busybox@1\"}"));
  auto one = layers::read_aliases(root);
  REQUIRE(one);
  CHECK(one->at("env") == "base/busybox@1");
  CHECK(layers::remove_alias(*s, "env"));
  CHECK(layers::read_aliases(root)->empty());
  for (auto bad : {"[]", "{\"Bad\": \"x@1\"}", "{\"env\": 3}", "not json"}) {
    REQUIRE(sys::write_file_atomic(root + "/aliases.json", bad));
    CHECK(layers::read_aliases(root).err().code == errc::internal);
  }
  std::string cmd = "rm -rf " + root;
  CHECK(::system(cmd.c_str()) == 0);
}
