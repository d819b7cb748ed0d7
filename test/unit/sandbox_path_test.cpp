// The one grammar of sandbox paths (core/sandbox_path.hpp): which paths each
// form takes, their components, and the rule a refusal names.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/sandbox_path.hpp"

using namespace dsec;

TEST_CASE("sandbox paths: each form's accepted paths and their components", "[path]") {
  using v = std::vector<std::string>;
  struct row {
    const char* path;
    path_form form;
    v parts;
  };
  row rows[] = {
    {"/a", path_form::entry, {"a"}},
    {"/a/b/c.txt", path_form::entry, {"a", "b", "c.txt"}},
    {"//a/./b/", path_form::entry, {"a", "b"}}, // empty and "." components drop out
    {"/a..b/...", path_form::entry, {"a..b", "..."}},
    {"/", path_form::entry_or_root, {}},
    {"/tmp/wd", path_form::entry_or_root, {"tmp", "wd"}},
    {"/", path_form::normalised, {}},
    {"/etc/shadow", path_form::normalised, {"etc", "shadow"}},
    {"main.py", path_form::relative, {"main.py"}},
    {"./pkg/mod.py", path_form::relative, {"pkg", "mod.py"}},
  };
  for (auto& r : rows) {
    INFO(r.path);
    auto got = parse_sandbox_path(r.path, r.form);
    REQUIRE(got.ok());
    CHECK(*got == r.parts);
  }
}

TEST_CASE("sandbox paths: refusals name the path and the rule", "[path]") {
  struct row {
    std::string path;
    path_form form;
    const char* rule;
  };
  std::vector<row> rows = {
    {"", path_form::entry, "must be absolute"},
    {"a/b", path_form::entry, "must be absolute"},
    {"/", path_form::entry, "names the root directory"},
    {"//.", path_form::entry, "names the root directory"},
    {"/a/../b", path_form::entry, "\"..\" is not allowed"},
    {"/..", path_form::entry_or_root, "\"..\" is not allowed"},
    {std::string("/a\0b", 4), path_form::entry, "contains a NUL byte"},
    {"/" + std::string(4096, 'a'), path_form::entry, "longer than 4096 bytes"},
    {"/etc/", path_form::normalised, "must be normalised"},
    {"/a//b", path_form::normalised, "must be normalised"},
    {"/a/./b", path_form::normalised, "must be normalised"},
    {"/a/..", path_form::normalised, "\"..\" is not allowed"},
    {"etc", path_form::normalised, "must be absolute"},
    {"/abs", path_form::relative, "must be a relative path"},
    {"", path_form::relative, "must be a relative path"},
    {"../x", path_form::relative, "\"..\" is not allowed"},
    {"a/../../x", path_form::relative, "\"..\" is not allowed"},
    {".", path_form::relative, "names no file"},
  };
  for (auto& r : rows) {
    INFO(r.path.substr(0, 40));
    auto got = parse_sandbox_path(r.path, r.form);
    REQUIRE_FALSE(got.ok());
    CHECK(got.err().code == errc::invalid_argument);
    CHECK(got.err().message.rfind("path \"", 0) == 0);
    CHECK(got.err().message.find(r.rule) != std::string::npos);
  }
}
