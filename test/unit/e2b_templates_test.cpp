// E2B's template build API, the pure half (api/e2b_templates.hpp): names and
// tags, the build request, the SDK's steps refused by name or written as a
// Dockerfile the builder runs, COPY's layout, the status answer.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/e2b_templates.hpp"

namespace dsec::e2b {

namespace {

std::string h64(char c) { return std::string(64, c); }

} // namespace

TEST_CASE("template names take an optional tag, checked", "[unit][e2b][templates]") {
  auto t = parse_template_name("my-env:v1.0", "name");
  REQUIRE(t);
  CHECK(t->name == "my-env");
  CHECK(t->tag == "v1.0");
  CHECK(parse_template_name("my-env", "name")->tag.empty());
  for (auto bad : {"", "My-Env", "team/env", "env:", ":tag", "env:a:b", "-env"})
    CHECK_FALSE(parse_template_name(bad, "name"));
}

TEST_CASE("a build request names the template and its tags", "[unit][e2b][templates]") {
  auto r = parse_build_request(R"({"name":"app:v1","tags":["stable"],"cpuCount":1,"memoryMB":1024})");
  REQUIRE(r);
  CHECK(r->name == "app");
  CHECK(r->tags == std::vector<std::string>{"v1", "stable"});
  CHECK(r->cpu == 1);
  CHECK(r->memory_mb == 1024);
  CHECK(parse_build_request(R"({"alias":"app"})")->tags == std::vector<std::string>{"default"});
  auto team = parse_build_request(R"({"name":"app","teamID":"t"})");
  REQUIRE_FALSE(team);
  CHECK(team.err().message.find("teamID") != std::string::npos);
  CHECK_FALSE(parse_build_request(R"({"tags":["x"]})"));
  CHECK_FALSE(parse_build_request(R"({"name":"app","tags":["a:b"]})"));
}

TEST_CASE("steps dsec does not build are refused by name", "[unit][e2b][templates]") {
  auto msg = [](const std::string& body) {
    auto r = parse_build_start(body);
    REQUIRE_FALSE(r);
    CHECK(r.err().code == errc::invalid_argument);
    return r.err().message;
  };
  CHECK(msg(R"({"fromTemplate":"base","startCmd":["x"]})").find("startCmd")
        != std::string::npos);
  CHECK(msg(R"({"fromTemplate":"base","steps":[{"type":"HEALTHCHECK","args":[]}]})")
          .find("HEALTHCHECK") != std::string::npos);
  CHECK(msg(R"({"fromImage":"ubuntu:22.04"})").find("ubuntu:22.04") != std::string::npos);
  CHECK(msg(R"({"fromImage":"127.0.0.1:5000/x:1","fromImageRegistry":{"type":"registry"}})")
          .find("fromImageRegistry") != std::string::npos);
  CHECK(msg(R"({"fromTemplate":"base","steps":[{"type":"COPY","args":["a","/b","user",""],"filesHash":")"
            + h64('a') + R"("}]})").find("user") != std::string::npos);
  CHECK(msg(R"({"fromTemplate":"base","steps":[{"type":"COPY","args":["../a","/b"],"filesHash":")"
            + h64('a') + R"("}]})").find("../a") != std::string::npos);
  CHECK(msg(R"({"steps":[]})").find("fromImage") != std::string::npos);
  auto ok = parse_build_start(R"({"fromImage":"127.0.0.1:5000/team/py:3","force":false})");
  REQUIRE(ok);
  CHECK(ok->from_image == "127.0.0.1:5000/team/py:3");
  // E2B's default base image is its base template.
  CHECK(parse_build_start(R"({"fromImage":"e2bdev/base"})")->from_template == "base");
}

TEST_CASE("the steps become a Dockerfile, a RUN's user only for it", "[unit][e2b][templates]") {
  auto b = parse_build_start(
    R"({"fromTemplate":"base","steps":[
      {"type":"ENV","args":["A","x \"$HOME\"","B","2"],"force":false},
      {"type":"RUN","args":["apt-get update\necho $A","root"],"force":true},
      {"type":"WORKDIR","args":["/app"]},
      {"type":"COPY","args":["folder/*","folder"],"filesHash":")" + h64('b') + R"("},
      {"type":"USER","args":["app"]},
      {"type":"RUN","args":["id"]}]})");
  REQUIRE(b);
  CHECK(b->force); // a step's force rebuilds the whole build
  std::vector<int> step_of;
  auto df = make_dockerfile(*b, "base/e2b@1", "user", {{3, {"s3", "folder/"}}}, step_of);
  REQUIRE(df);
  CHECK(*df == "FROM base/e2b@1\n"
               "ENV A=\"x \\\"\\$HOME\\\"\" B=\"2\"\n"
               "USER \"root\"\n"
               "RUN [\"/bin/sh\",\"-c\",\"apt-get update\\necho $A\"]\n"
               "USER \"user\"\n"
               "WORKDIR \"/app\"\n"
               "COPY [\"s3/\", \"folder/\"]\n"
               "USER \"app\"\n"
               "RUN [\"/bin/sh\",\"-c\",\"id\"]\n");
  CHECK(step_of == std::vector<int>{1, 2, 2, 2, 3, 4, 5, 6});
  // A COPY whose files were not laid out is an internal error, not a skip.
  CHECK_FALSE(make_dockerfile(*b, "base/e2b@1", "", {}, step_of));
}

TEST_CASE("COPY lands as E2B's does", "[unit][e2b][templates]") {
  auto f = copy_target_of("a.txt", "/etc/b.txt", true);
  CHECK(f.rename);
  CHECK(f.entry_name == "b.txt");
  CHECK(f.dest_dir == "/etc/");
  auto rel = copy_target_of("a.txt", "b.txt", true);
  CHECK(rel.dest_dir == "./");
  CHECK_FALSE(copy_target_of("a.txt", "/app/", true).rename);
  auto glob = copy_target_of("folder/*", "folder", true);
  CHECK_FALSE(glob.rename);
  CHECK(glob.dest_dir == "folder/");
  CHECK(copy_target_of("dir", "/app", false).dest_dir == "/app/");
}

TEST_CASE("build status pages its log entries", "[unit][e2b][templates]") {
  std::vector<build_log> logs;
  for (int i = 0; i < 150; ++i)
    logs.push_back({1796343073357, "info", "line " + std::to_string(i)});
  auto j = nlohmann::json::parse(encode_build_status("t", "b", "error", logs, 120, "boom", "3"));
  CHECK(j["status"] == "error");
  CHECK(j["logEntries"].size() == 30);
  CHECK(j["logEntries"][0]["message"] == "line 120");
  CHECK(j["logEntries"][0]["timestamp"] == "2026-12-04T00:11:13.357Z");
  CHECK(j["reason"]["message"] == "boom");
  CHECK(j["reason"]["step"] == "3");
  auto first = nlohmann::json::parse(encode_build_status("t", "b", "building", logs, 0, "", ""));
  CHECK(first["logEntries"].size() == 100);
  CHECK_FALSE(first.contains("reason"));
}

TEST_CASE("a child template takes its parent's start and ready commands when it sets none",
          "[unit][e2b][templates]") {
  build_start none;
  CHECK(inherit_start(none, "exec server", "curl -f localhost:8000"));
  CHECK(none.start_cmd == "exec server");
  CHECK(none.ready_cmd == "curl -f localhost:8000");
  // Its own ready command waits on the parent's start command.
  build_start ready;
  ready.ready_cmd = "test -f /tmp/ok";
  CHECK(inherit_start(ready, "exec server", "curl -f localhost:8000"));
  CHECK(ready.start_cmd == "exec server");
  CHECK(ready.ready_cmd == "test -f /tmp/ok");
  // Its own start command replaces both.
  build_start own;
  own.start_cmd = "exec other";
  own.ready_cmd = "true";
  CHECK_FALSE(inherit_start(own, "exec server", "curl -f localhost:8000"));
  CHECK(own.start_cmd == "exec other");
  CHECK(own.ready_cmd == "true");
  // A parent without commands (an image, an alias) leaves the child as it is.
  build_start plain;
  CHECK_FALSE(inherit_start(plain, "", ""));
  CHECK(plain.start_cmd.empty());
  CHECK(plain.ready_cmd.empty());
}

} // namespace dsec::e2b
