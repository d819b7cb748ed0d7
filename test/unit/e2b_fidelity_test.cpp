// E2B fidelity (issue 27), the pure parts: create options mapped onto a spec
// or refused by name, the list's order and time filter, envd's ListDir order
// and symlink targets, and a failed command's error.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/e2b_codec.hpp"
#include "api/e2b_create.hpp"

namespace dsec::e2b {

using nlohmann::json;

TEST_CASE("e2b pause takes memory and nothing else", "[unit][e2b]") {
  CHECK(*parse_pause("") == true);
  CHECK(*parse_pause(R"({"memory":true})") == true);
  CHECK(*parse_pause(R"({"memory":false})") == false);
  CHECK(*parse_pause(R"({"memory":null})") == true);
  for (auto [body, named] : std::vector<std::pair<const char*, const char*>>{
         {R"({"memory":"no"})", "memory must be a boolean"},
         {R"({"snapshot":true})", "snapshot"},
         {R"([1])", "not a JSON object"}}) {
    auto res = parse_pause(body);
    REQUIRE(!res);
    CHECK(res.err().code == errc::invalid_argument);
    CHECK(res.err().message.find(named) != std::string::npos);
  }
}

TEST_CASE("e2b create options map onto the spec or are refused by name", "[unit][e2b]") {
  sandbox_spec s;
  REQUIRE(apply_create_options(R"({"templateID":"base","timeout":30})", s, true));
  CHECK(s.on_timeout == "destroy");
  CHECK(!s.auto_resume);
  CHECK(s.network.allow.empty());
  REQUIRE(apply_create_options(R"({"autoPause":true,"autoResume":{"enabled":true},
                                   "autoPauseMemory":true})", s, true));
  CHECK(s.on_timeout == "pause");
  CHECK(s.auto_resume);
  // keepMemory false: the timeout keeps the files only; no autoResume with it.
  REQUIRE(apply_create_options(R"({"autoPause":true,"autoPauseMemory":false})", s, true));
  CHECK(s.on_timeout == "pause_files");
  REQUIRE(apply_create_options(R"({"autoPause":true,"autoPauseMemory":true})", s, true));
  CHECK(s.on_timeout == "pause");
  REQUIRE(apply_create_options(R"({"allow_internet_access":true})", s, true));
  CHECK(s.network.allow.size() == 2);
  REQUIRE(apply_create_options(R"({"network":{"allowOut":["10.0.0.0/8","pypi.org","::1"],
                                   "denyOut":["0.0.0.0/0"]}})", s, true));
  CHECK(s.network.allow == std::vector<std::string>{"10.0.0.0/8:*", "pypi.org:*", "[::1]:*"});
  REQUIRE(apply_create_options(R"({"secure":true})", s, true));
  REQUIRE(apply_create_options(R"({"secure":false})", s, false));
  for (auto [body, named] : std::vector<std::pair<const char*, const char*>>{
         {R"({"mcp":{}})", "mcp"},
         {R"({"volumeMounts":[]})", "volumeMounts"},
         {R"({"iam":{"tokens":{}}})", "iam"},
         {R"({"whatever":1})", "whatever"},
         {R"({"autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}})",
          "autoResume true is not valid with autoPauseMemory false"},
         {R"({"autoPause":true,"autoPauseMemory":"no"})", "autoPauseMemory must be a boolean"},
         {R"({"network":{"rules":{}}})", "network.rules"},
         {R"({"network":{"denyOut":["example.com"]}})", "network.denyOut"},
         {R"({"network":{"allowOut":["a b"]}})", "network.allowOut"},
         {R"({"secure":false})", "secure false"},
         {R"({"autoResume":true})", "autoResume"}}) {
    auto st = apply_create_options(body, s, true);
    REQUIRE(!st);
    CHECK(st.err().code == errc::invalid_argument);
    CHECK(st.err().message.find(named) != std::string::npos);
  }
  CHECK(!apply_create_options(R"({"secure":true})", s, false));
}

TEST_CASE("e2b answers carry the lifecycle; lists order and filter by start", "[unit][e2b]") {
  sandbox_info i;
  i.id = "n.1";
  i.on_timeout = "pause";
  i.auto_resume = false;
  auto j = json::parse(encode_sandbox(i, ""));
  CHECK(j["lifecycle"] == json{{"onTimeout", "pause"}, {"autoResume", false}});
  CHECK(*parse_rfc3339_ms("1970-01-01T00:00:01.5Z", "t") == 1500);
  CHECK(*parse_rfc3339_ms("1970-01-01T01:00:00+01:00", "t") == 0);
  for (auto bad : {"yesterday", "1970-01-01T00:00:00", "1970-01-01T00:00:00Zx"})
    CHECK(!parse_rfc3339_ms(bad, "t"));
  std::vector<sandbox_info> all(3);
  for (int k = 0; k < 3; ++k) {
    all[k].id = "n." + std::to_string(k);
    all[k].state = sandbox_state::running;
    all[k].created_at_ms = 1000 * k;
    all[k].labels = {{template_label, k == 2 ? "busybox" : "base"}};
  }
  auto q = parse_list_query({{"order", "asc"}, {"startedAfter", "1970-01-01T00:00:01Z"}});
  REQUIRE(q);
  std::string next;
  auto page = select_page(all, *q, next);
  REQUIRE(page.size() == 2);
  CHECK(page[0].id == "n.1");
  q = parse_list_query({{"template", "busybox"}});
  REQUIRE(q);
  page = select_page(all, *q, next);
  REQUIRE(page.size() == 1);
  CHECK(page[0].id == "n.2");
  auto bad = parse_list_query({{"sort", "x"}});
  REQUIRE(!bad);
  CHECK(bad.err().message.find("sort") != std::string::npos);
  CHECK(!parse_list_query({{"order", "up"}}));
}

TEST_CASE("envd lists in walk order and resolves symlink targets", "[unit][e2b]") {
  std::vector<fs_entry> v;
  for (auto p : {"/w/c.txt", "/w/b/y", "/w/b", "/w/a", "/w/B", "/w/b-x", "/w/b/x"}) {
    v.emplace_back();
    v.back().path = p;
  }
  sort_walk_order(v);
  std::vector<std::string> got;
  for (auto& e : v)
    got.push_back(e.path);
  CHECK(got == std::vector<std::string>{"/w/B", "/w/a", "/w/b", "/w/b/x", "/w/b/y", "/w/b-x",
                                        "/w/c.txt"});
  CHECK(resolved_link("/tmp/w/rel", "../w/b") == "/tmp/w/b");
  CHECK(resolved_link("/tmp/l", "/a/./b/../c") == "/a/c");
  CHECK(resolved_link("/l", "../../x") == "/x");
  exec_result r;
  r.exit_code = 3;
  CHECK(json::parse(end_event(r))["event"]["end"]["error"] == "exit status 3");
  r.exit_code = 0;
  CHECK(!json::parse(end_event(r))["event"]["end"].contains("error"));
}

} // namespace dsec::e2b
