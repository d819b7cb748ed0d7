// A built-in E2B template whose layers are missing names the command that
// builds them (api/e2b_default_templates.hpp).
#include <catch2/catch.hpp>

#include "api/e2b_codec.hpp"
#include "api/e2b_default_templates.hpp"

using namespace dsec;

TEST_CASE("a missing base layer names dsec layer defaults --e2b", "[unit][e2b]") {
  auto e = e2b::with_default_layers_hint(
    not_found("layer base/e2b@1 not found in store /s"), "base");
  CHECK(e.code == errc::not_found);
  CHECK(e.message.find("`dsec layer defaults --e2b`") != std::string::npos);
  CHECK(e.message.find("template base") == 0);
  auto p = e2b::with_default_layers_hint(not_found("layer base/python@3.11 not found"), "python");
  CHECK(p.message.find("`dsec layer defaults`") != std::string::npos);
}

TEST_CASE("other failures and other templates keep their message", "[unit][e2b]") {
  auto un = e2b::with_default_layers_hint(unavailable("node busy"), "base");
  CHECK(un.message == "node busy");
  auto mine = e2b::with_default_layers_hint(not_found("layer ws/x@1 not found"), "ws/x@1");
  CHECK(mine.message == "layer ws/x@1 not found");
}

TEST_CASE("E2B's templates stack their user and sudo layers", "[unit][e2b]") {
  CHECK(*e2b::template_layers("code-interpreter-v1")
        == std::vector<std::string>{"base/code-interpreter@1", "toolkit/code-interpreter-user@1",
                                    "toolkit/e2b-sudo@1"});
  CHECK(*e2b::template_layers("code-interpreter") == *e2b::template_layers("code-interpreter-v1"));
}
