// The REST route table and the small vocabulary helpers (ids, error names).
#include <catch2/catch.hpp>

#include <set>

#include "api/gateway_routes.hpp"
#include "core/ids.hpp"

using namespace dsec;

TEST_CASE("routes map methods and paths to actions", "[routes]") {
  struct row {
    const char* method;
    const char* target;
    route::kind_t kind;
  };
  row rows[] = {
    {"GET", "/healthz", route::healthz},
    {"GET", "/metrics", route::metrics},
    {"GET", "/v1/layers", route::list_layers},
    {"GET", "/v1/nodes", route::list_nodes},
    {"POST", "/v1/sandboxes", route::create},
    {"POST", "/v1/sandboxes:batch", route::create_batch},
    {"POST", "/v1/sandboxes:pause", route::pause_job},
    {"POST", "/v1/sandboxes:resume", route::resume_job},
    {"GET", "/v1/sandboxes", route::list_sandboxes},
    {"GET", "/v1/sandboxes/n-1.abc", route::get_sandbox},
    {"DELETE", "/v1/sandboxes/n-1.abc", route::delete_sandbox},
    {"POST", "/v1/sandboxes/n-1.abc/exec", route::exec},
    {"PUT", "/v1/sandboxes/n-1.abc/files?path=/a", route::put_file},
    {"GET", "/v1/sandboxes/n-1.abc/files?path=/a", route::get_file},
    {"PATCH", "/v1/sandboxes/n-1.abc", route::update_sandbox},
    {"POST", "/v1/fncall", route::fncall},
    {"POST", "/v1/sandboxes/n-1.abc/pause", route::pause},
    {"POST", "/v1/sandboxes/n-1.abc/resume", route::resume},
    {"POST", "/v1/sandboxes/n-1.abc/snapshot", route::snapshot},
    {"PUT", "/v1/sandboxes/n-1.abc/network", route::set_network},
    {"GET", "/v1/sandboxes/n-1.abc/trajectory?since=3", route::trajectory},
    {"POST", "/v1/sandboxes/n-1.abc/replay", route::replay},
    {"GET", "/v1/sandboxes/n-1.abc/processes", route::list_processes},
    {"GET", "/v1/sandboxes/n-1.abc/processes/42", route::get_process},
    {"DELETE", "/v1/sandboxes/n-1.abc/processes/42", route::kill_process},
    {"POST", "/v1/sandboxes/n-1.abc/processes/42/kill", route::kill_process},
    {"GET", "/v1/sandboxes/n-1.abc/metrics", route::sandbox_metrics},
  };
  for (auto& r : rows) {
    INFO(r.method << " " << r.target);
    bool na = false;
    auto got = parse_route(r.method, r.target, na);
    REQUIRE(got.ok());
    CHECK(got->kind == r.kind);
  }
}

TEST_CASE("route errors: unknown path 404, wrong method 405", "[routes]") {
  bool na = false;
  auto a = parse_route("GET", "/v2/sandboxes", na);
  REQUIRE_FALSE(a.ok());
  CHECK(a.err().code == errc::not_found);
  CHECK_FALSE(na);
  auto b = parse_route("PUT", "/v1/sandboxes/x", na);
  REQUIRE_FALSE(b.ok());
  CHECK(na);
  auto m = parse_route("POST", "/v1/sandboxes/x/metrics", na);
  REQUIRE_FALSE(m.ok());
  CHECK(na);
  auto c = parse_route("GET", "/v1/sandboxes/x/files?path=%zz", na);
  REQUIRE_FALSE(c.ok());
  CHECK(c.err().code == errc::invalid_argument);
}

TEST_CASE("a background process: get, wait, follow, kill", "[routes]") {
  struct row {
    const char* method;
    const char* target;
    route::kind_t kind;
  };
  row rows[] = {
    {"GET", "/v1/sandboxes/n-1.abc/processes", route::list_processes},
    {"GET", "/v1/sandboxes/n-1.abc/processes/42", route::get_process},
    {"GET", "/v1/sandboxes/n-1.abc/processes/42?wait=1&timeout_s=5", route::get_process},
    {"GET", "/v1/sandboxes/n-1.abc/processes/42?follow=1", route::follow_process},
    {"GET", "/v1/sandboxes/n-1.abc/processes/42?follow=true", route::follow_process},
    {"GET", "/v1/sandboxes/n-1.abc/processes/42?follow=0", route::get_process},
    {"DELETE", "/v1/sandboxes/n-1.abc/processes/42?follow=1", route::kill_process},
    {"POST", "/v1/sandboxes/n-1.abc/processes/42/kill", route::kill_process},
  };
  for (auto& r : rows) {
    INFO(r.method << " " << r.target);
    bool na = false;
    auto got = parse_route(r.method, r.target, na);
    REQUIRE(got.ok());
    CHECK(got->kind == r.kind);
    if (r.kind != route::list_processes)
      CHECK(got->pid == 42);
    CHECK(got->id == "n-1.abc");
  }
  bool na = false;
  auto bad = parse_route("POST", "/v1/sandboxes/n-1.abc/processes/42?follow=1", na);
  REQUIRE_FALSE(bad.ok());
  CHECK(na);
  auto pid = parse_route("GET", "/v1/sandboxes/n-1.abc/processes/x1?follow=1", na);
  REQUIRE_FALSE(pid.ok());
  CHECK(pid.err().code == errc::invalid_argument);
}

TEST_CASE("route placeholders: ids decoded, pids digits, both checked before the method",
          "[routes]") {
  bool na = false;
  auto p = parse_route("DELETE", "/v1/sandboxes/n-1.a%62c/processes/42", na);
  REQUIRE(p.ok());
  CHECK(p->id == "n-1.abc");
  CHECK(p->pid == 42);
  for (auto bad : {"/v1/sandboxes/n-1.abc/processes/x1", "/v1/sandboxes/n-1.abc/processes/-1",
                   "/v1/sandboxes/n-1.abc/processes/1234567890"}) {
    INFO(bad);
    auto r = parse_route("GET", bad, na);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().code == errc::invalid_argument);
    CHECK_FALSE(na);
  }
  auto wrong = parse_route("PATCH", "/v1/sandboxes/n-1.abc/processes/zz", na);
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.err().message.find("pid") != std::string::npos);
  auto esc = parse_route("GET", "/v1/sandboxes/%zz/exec", na);
  REQUIRE_FALSE(esc.ok());
  CHECK(esc.err().code == errc::invalid_argument);
  CHECK_FALSE(na); // exec is POST only, but a bad id is answered first
  CHECK(esc.err().message.find("sandbox id") != std::string::npos);
  auto unknown = parse_route("GET", "/v1/sandboxes/n-1.abc/nope", na);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.err().code == errc::not_found);
}

TEST_CASE("queries are decoded; labels collect", "[routes]") {
  bool na = false;
  auto r = parse_route("GET", "/v1/sandboxes?label=job%3Dgrpo&label=step=3&x=1", na);
  REQUIRE(r.ok());
  CHECK(r->labels.at("job") == "grpo");
  CHECK(r->labels.at("step") == "3");
  CHECK(r->query.at("x") == "1");
  auto f = parse_route("GET", "/v1/sandboxes/n-1.a/files?path=%2Fwork%2Fa%20b.py", na);
  REQUIRE(f.ok());
  CHECK(f->query.at("path") == "/work/a b.py");
  CHECK_FALSE(parse_route("GET", "/v1/sandboxes?label=novalue", na).ok());
}

TEST_CASE("error codes map to HTTP statuses", "[routes]") {
  CHECK(http_status_of(errc::invalid_argument) == 400);
  CHECK(http_status_of(errc::not_found) == 404);
  CHECK(http_status_of(errc::conflict) == 409);
  CHECK(http_status_of(errc::too_large) == 413);
  CHECK(http_status_of(errc::resource_exhausted) == 429);
  CHECK(http_status_of(errc::unavailable) == 503);
  CHECK(to_string(errc::resource_exhausted) == "resource_exhausted");
  CHECK(errc_from_string("conflict") == errc::conflict);
}

TEST_CASE("sandbox ids name their owner and are never reused", "[ids]") {
  auto node = make_node_id();
  REQUIRE(valid_node_id(node));
  std::set<std::string> seen;
  for (int i = 0; i < 2000; ++i) {
    auto id = make_sandbox_id(node);
    REQUIRE(valid_sandbox_id(id));
    CHECK(owner_of(id) == node);
    CHECK(seen.insert(id).second);
  }
  for (auto bad : {"", "x", ".abc", "n-1.", "n-1.ABC", "n-1.a/b", "n-1.../x", "N.abc"})
    CHECK_FALSE(valid_sandbox_id(bad));
  CHECK_FALSE(valid_node_id("Bad_Node"));
}

TEST_CASE("shell session routes: open, list, run, close", "[routes]") {
  // Issue 26 part 2 (actors/gateway_session.hpp).
  struct row {
    const char* method;
    const char* target;
    route::kind_t kind;
    const char* session;
  };
  row rows[] = {
    {"POST", "/v1/sandboxes/n-1.abc/sessions", route::session_open, ""},
    {"GET", "/v1/sandboxes/n-1.abc/sessions", route::session_list, ""},
    {"POST", "/v1/sandboxes/n-1.abc/sessions/s1/run", route::session_run, "s1"},
    {"DELETE", "/v1/sandboxes/n-1.abc/sessions/s%32", route::session_close, "s2"},
  };
  for (auto& r : rows) {
    INFO(r.method << " " << r.target);
    bool na = false;
    auto got = parse_route(r.method, r.target, na);
    REQUIRE(got.ok());
    CHECK(got->kind == r.kind);
    CHECK(got->id == "n-1.abc");
    CHECK(got->session == r.session);
  }
  bool na = false;
  auto wrong = parse_route("GET", "/v1/sandboxes/n-1.abc/sessions/s1/run", na);
  REQUIRE_FALSE(wrong.ok());
  CHECK(na);
  auto bad = parse_route("POST", "/v1/sandboxes/n-1.abc/sessions/%zz/run", na);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().code == errc::invalid_argument);
}
