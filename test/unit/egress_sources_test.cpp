// Table tests of the egress sources file (core/egress_sources.hpp): what a
// good file gives, what each bad file says (line and field named), and how
// names expand inside network.allow, including the 400 for unknown names.
#include <catch2/catch.hpp>

#include <string>

#include "core/allow_list.hpp"
#include "core/egress_sources.hpp"
#include "core/validate.hpp"

using namespace dsec;

namespace {

const char* good = R"({
  "pypi": ["pypi.mirror.test:443", "10.8.0.0/16:443"],
  "npm": ["registry.npm.test:443"],
  "go_proxy-2": ["[2001:db8::/32]:*"]
})";

struct bad_row {
  const char* text;
  const char* want; // substring of the message
};

const bad_row bad_rows[] = {
  {"", "line 1: not JSON"},
  {"{\n  \"pypi\": [\"a.test:443\",\n}", "line 3: not JSON"},
  {"[\"pypi\"]", "must be a JSON object"},
  {"{\n\"Pypi\": [\"a.test:443\"]}", "line 2: \"Pypi\": a name is 1-32 of [a-z0-9_-]"},
  {"{\"a:b\": [\"a.test:443\"]}", "\"a:b\": a name is"},
  {"{\n\n\"pypi\": \"a.test:443\"}", "line 3: \"pypi\": must be a non-empty list"},
  {"{\"pypi\": []}", "\"pypi\": must be a non-empty list"},
  {"{\"pypi\": [443]}", "\"pypi\"[0]: must be a string"},
  {"{\"pypi\": [\"a.test:443\",\n \"b.test:99999\"]}",
   "line 2: \"pypi\"[1]: network.allow entry \"b.test:99999\""},
  {"{\"pypi\": [\"10.0.0.1/8:443\"]}", "\"pypi\"[0]: network.allow entry \"10.0.0.1/8:443\""},
  {"{\"pypi\": [\"pypi\"]}", "\"pypi\"[0]: network.allow entry \"pypi\""},
};

} // namespace

TEST_CASE("a good sources file parses, with a stable digest", "[egress]") {
  auto s = net::parse_egress_sources(good, "f.json");
  REQUIRE(s);
  CHECK(s->by_name.size() == 3);
  CHECK(s->by_name.at("pypi").size() == 2);
  CHECK(s->digest.size() == 16);
  auto again = net::parse_egress_sources(
    R"({"go_proxy-2": ["[2001:db8::/32]:*"], "npm": ["registry.npm.test:443"],
        "pypi": ["pypi.mirror.test:443", "10.8.0.0/16:443"]})", "g.json");
  REQUIRE(again);
  CHECK(again->digest == s->digest); // order and spacing do not matter
  auto other = net::parse_egress_sources(R"({"pypi": ["pypi.mirror.test:443"]})", "h.json");
  REQUIRE(other);
  CHECK(other->digest != s->digest);
}

TEST_CASE("a bad sources file names its line and field", "[egress]") {
  for (auto& r : bad_rows) {
    CAPTURE(r.text);
    auto s = net::parse_egress_sources(r.text, "f.json");
    REQUIRE_FALSE(s);
    CHECK(s.err().code == errc::invalid_argument);
    CHECK_THAT(s.err().message, Catch::Contains("egress sources f.json"));
    CHECK_THAT(s.err().message, Catch::Contains(r.want));
  }
}

TEST_CASE("a missing sources file is an error naming it", "[egress]") {
  auto s = net::load_egress_sources("/nonexistent/sources.json");
  REQUIRE_FALSE(s);
  CHECK_THAT(s.err().message, Catch::Contains("/nonexistent/sources.json"));
}

TEST_CASE("source names expand in network.allow; unknown ones list the known", "[egress]") {
  net::install_egress_sources({});
  auto none = net::parse_allow_list({"pypi"});
  REQUIRE_FALSE(none);
  CHECK_THAT(none.err().message, Catch::Contains("unknown egress source \"pypi\""));
  CHECK_THAT(none.err().message, Catch::Contains("--egress-sources"));

  auto s = net::parse_egress_sources(good, "f.json");
  REQUIRE(s);
  // One parse: the load keeps each entry as parse_allow_entry made it, and
  // a name expands into those.
  for (auto& [name, written] : s->by_name) {
    REQUIRE(s->parsed.at(name).size() == written.size());
    for (size_t i = 0; i < written.size(); ++i) {
      auto again = net::parse_allow_entry(written[i]);
      REQUIRE(again);
      CHECK(s->parsed.at(name)[i].domain == again->domain);
      CHECK(s->parsed.at(name)[i].addr == again->addr);
      CHECK(s->parsed.at(name)[i].port == again->port);
    }
  }
  net::install_egress_sources(*s);
  auto list = net::parse_allow_list({"pypi", "10.0.0.5:443"});
  REQUIRE(list);
  REQUIRE(list->size() == 3);
  CHECK((*list)[0].domain == "pypi.mirror.test");
  CHECK((*list)[1].prefix == 96 + 16);
  auto sourced = net::parse_allow_list_sourced({"pypi", "10.0.0.5:443"});
  REQUIRE(sourced);
  REQUIRE(sourced->size() == 3);
  CHECK((*sourced)[0].source == "pypi");
  CHECK((*sourced)[1].source == "pypi");
  CHECK((*sourced)[2].source.empty());
  CHECK((*sourced)[2].entry.port == 443);

  auto unknown = net::parse_allow_list({"pypi", "apt"});
  REQUIRE_FALSE(unknown);
  CHECK(unknown.err().code == errc::invalid_argument);
  CHECK_THAT(unknown.err().message,
             Catch::Contains("unknown egress source \"apt\"; known: go_proxy-2, npm, pypi"));

  // The gateway's check says the same.
  network_policy p{{"npm", "apt"}};
  auto st = validate(p);
  REQUIRE_FALSE(st);
  CHECK_THAT(st.err().message, Catch::Contains("known: go_proxy-2, npm, pypi"));
  CHECK(validate(network_policy{{"npm", "1.2.3.4:80"}}));
  net::install_egress_sources({});
}
