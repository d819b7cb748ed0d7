// E2B templates across node restarts and their start commands (issue 27),
// the pure halves: the builds record (api/e2b_template_builds.hpp), the
// templates record's start and ready commands, startCmd/readyCmd in a build,
// and the commands and messages of a create from such a template
// (api/e2b_start_cmd.hpp); and a directory's size in envd's entry info.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "api/e2b_codec.hpp"
#include "api/e2b_start_cmd.hpp"
#include "api/e2b_template_builds.hpp"
#include "api/e2b_templates.hpp"

namespace dsec::e2b {

TEST_CASE("builds come back from their record; a running one as interrupted",
          "[unit][e2b][templates]") {
  build_map all;
  template_build ready;
  ready.id = "b1";
  ready.template_name = "app";
  ready.tags = {"v1", "prod"};
  ready.cpu = 1;
  ready.memory_mb = 256;
  ready.status = "ready";
  ready.created_at_ms = 1000;
  ready.logs = {{1000, "info", "Step 1/2 : RUN \"quoted\" \x01"}, {1001, "info", "done"}};
  all["b1"] = ready;
  template_build running = ready;
  running.id = "b2";
  running.status = "building";
  running.created_at_ms = 2000;
  all["b2"] = running;
  template_build waiting = ready;
  waiting.id = "b3";
  waiting.status = "waiting";
  waiting.logs.clear();
  all["b3"] = waiting;

  auto back = decode_builds(encode_builds(all), "/x");
  REQUIRE(back);
  REQUIRE(back->size() == 3);
  auto& b1 = back->at("b1");
  CHECK(b1.status == "ready");
  CHECK(b1.tags == ready.tags);
  CHECK(b1.cpu == 1);
  CHECK(b1.memory_mb == 256);
  CHECK(b1.logs.size() == 2);
  CHECK(b1.logs[0].message == ready.logs[0].message);
  auto& b2 = back->at("b2");
  CHECK(b2.status == "error");
  CHECK(b2.reason == interrupted_reason);
  CHECK(b2.logs.back().message == interrupted_reason);
  CHECK(b2.interrupted_at_load);
  CHECK_FALSE(b1.interrupted_at_load);
  CHECK(back->at("b3").status == "waiting");
}

TEST_CASE("the builds record is bounded", "[unit][e2b][templates]") {
  build_map all;
  for (size_t i = 0; i < max_recorded_builds + 10; ++i) {
    template_build b;
    b.id = "b" + std::to_string(i);
    b.template_name = "app";
    b.tags = {"default"};
    b.status = "ready";
    b.created_at_ms = static_cast<int64_t>(i);
    all[b.id] = b;
  }
  all["b0"].logs.assign(max_recorded_log_lines + 5, {1, "info", "x"});
  all["b0"].created_at_ms = 1 << 30; // the newest
  auto back = decode_builds(encode_builds(all), "/x");
  REQUIRE(back);
  CHECK(back->size() == max_recorded_builds);
  CHECK(back->count("b0"));
  CHECK_FALSE(back->count("b1")); // the oldest are dropped
  CHECK(back->at("b0").logs.size() == max_recorded_log_lines);
}

TEST_CASE("a corrupt builds record is an error naming it", "[unit][e2b][templates]") {
  for (auto text : {"", "[]", "{\"version\":2,\"builds\":{}}", "{\"version\":1}",
                    "{\"version\":1,\"builds\":{\"b\":{\"templateID\":\"a\"}}}",
                    "{\"version\":1,\"builds\":{\"b\":{\"templateID\":\"a\",\"tags\":[\"t\"],"
                    "\"status\":\"odd\",\"logs\":[]}}}"}) {
    auto r = decode_builds(text, "/state/e2b_template_builds.json");
    REQUIRE_FALSE(r);
    CHECK(r.err().message.find("/state/e2b_template_builds.json") != std::string::npos);
  }
}

TEST_CASE("startCmd and readyCmd are kept by a build", "[unit][e2b][templates]") {
  auto b = parse_build_start(
    R"({"fromTemplate":"base","startCmd":"python3 -m http.server 8000","readyCmd":"curl -s localhost:8000"})");
  REQUIRE(b);
  CHECK(b->start_cmd == "python3 -m http.server 8000");
  CHECK(b->ready_cmd == "curl -s localhost:8000");
  auto only_ready = parse_build_start(R"({"fromTemplate":"base","readyCmd":"test -f /x"})");
  REQUIRE(only_ready);
  CHECK(only_ready->start_cmd.empty());
  auto bad = parse_build_start(R"({"fromTemplate":"base","startCmd":5})");
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message.find("startCmd") != std::string::npos);
}

TEST_CASE("a template's commands are in the store's record", "[unit][e2b][templates]") {
  char dir[] = "/tmp/dsec-e2b-tpl-XXXXXX";
  REQUIRE(::mkdtemp(dir));
  std::string root = dir;
  template_map all;
  all["app"]["v1"] = template_tag{"b1", "e2b/app@v1.x", 5, 1, 256, "srv", "curl -s x"};
  all["app"]["plain"] = template_tag{"b2", "e2b/app@plain.x", 6, 0, 0, "", ""};
  REQUIRE(write_templates(root, all));
  auto back = read_templates(root);
  REQUIRE(back);
  CHECK(back->at("app").at("v1").start_cmd == "srv");
  CHECK(back->at("app").at("v1").ready_cmd == "curl -s x");
  CHECK(back->at("app").at("plain").start_cmd.empty());
  std::remove((root + "/e2b_templates.json").c_str());
  ::rmdir(dir);
}

TEST_CASE("a template's start and ready commands as execs", "[unit][e2b][templates]") {
  template_start t{"app:v1", "httpd -f -p 8000", "wget -q -O- http://127.0.0.1:8000/"};
  auto s = start_command_request(t);
  CHECK(s.argv == std::vector<std::string>{"/bin/sh", "-c", "httpd -f -p 8000"});
  CHECK(s.user.empty()); // the template's user, workdir and env
  CHECK(s.cwd.empty());
  CHECK(s.timeout_s == 0);
  auto r = ready_check_request(t, 30);
  REQUIRE(r.argv.size() == 5);
  CHECK(r.argv.back() == t.ready_cmd); // passed as $1, never quoted into the script
  CHECK(r.timeout_s == 30);
  CHECK(ready_budget_s(10) == 9);
  CHECK(ready_budget_s(1) == min_ready_wait_s);
  CHECK(ready_budget_s(0) == max_ready_wait_s);
  CHECK(ready_budget_s(86400) == max_ready_wait_s);

  exec_result timed_out;
  timed_out.timed_out = true;
  timed_out.exit_code = 137;
  timed_out.stderr_data = "\x1e" "connection refused\n\x1e" "not yet\n";
  background_process gone;
  gone.running = false;
  gone.result.exit_code = 127;
  gone.result.stderr_data = "sh: httpd: not found\n";
  auto msg = ready_failure(t, timed_out, 30, start_state_of(gone));
  CHECK(msg.find("app:v1") != std::string::npos);
  CHECK(msg.find(t.ready_cmd) != std::string::npos);
  CHECK(msg.find("within 30 s") != std::string::npos);
  CHECK(msg.find("last output: not yet") != std::string::npos);
  CHECK(msg.find("exited with code 127 (sh: httpd: not found)") != std::string::npos);
  CHECK(msg.find("destroyed") != std::string::npos);
}

TEST_CASE("a directory's size is ext4's, a file's its own", "[unit][e2b]") {
  auto size_of = [](const char* type, int64_t size) {
    fs_entry e;
    e.name = "d";
    e.path = "/d";
    e.type = type;
    e.size = size;
    e.mode = 040755;
    return nlohmann::json::parse(encode_entry(e))["size"].get<std::string>();
  };
  CHECK(size_of("dir", 0) == "4096"); // an empty directory on btrfs
  CHECK(size_of("dir", 27) == "4096"); // a small one inlined by EROFS
  CHECK(size_of("dir", 4096) == "4096");
  CHECK(size_of("dir", 9000) == "12288");
  CHECK(size_of("file", 0) == "0");
  CHECK(size_of("file", 5) == "5");
}

} // namespace dsec::e2b
