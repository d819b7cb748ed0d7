// The E2B wire formats (api/e2b_codec.hpp) and API keys
// (api/api_keys.hpp): what the e2b SDK sends parses, what we answer has
// the fields it reads, and hostile input is an invalid_argument, never a crash.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/api_keys.hpp"
#include "api/e2b_codec.hpp"

namespace dsec::e2b {

using nlohmann::json;

TEST_CASE("e2b create requests parse as the SDK sends them", "[unit][e2b]") {
  auto r = parse_create(R"({"templateID":"base","metadata":{"job":"7"},"envVars":{"A":"1"},
                           "timeout":120,"allow_internet_access":true,"autoPause":false})");
  REQUIRE(r);
  CHECK(r->template_id == "base");
  CHECK(r->timeout_s == 120);
  CHECK(r->metadata.at("job") == "7");
  CHECK(r->env.at("A") == "1");
  CHECK(parse_create(R"({"templateID":"base"})")->timeout_s == default_timeout_s);
  for (auto bad : {"", "[]", "{", R"({"templateID":""})", R"({"templateID":3})",
                   R"({"templateID":"b","timeout":-1})", R"({"templateID":"b","timeout":"9"})",
                   R"({"templateID":"b","metadata":{"k":1}})",
                   R"({"templateID":"b","metadata":{"e2b.template":"x"}})"})
    CHECK(parse_create(bad).err().code == errc::invalid_argument);
}

TEST_CASE("templates are layer refs or aliases", "[unit][e2b]") {
  CHECK(*template_layers("base") == std::vector<std::string>{"base/e2b@1", "toolkit/e2b-sudo@1"});
  CHECK(*template_layers("python") == std::vector<std::string>{"base/python@3.11"});
  CHECK(*template_layers("busybox") == std::vector<std::string>{"base/busybox@1"});
  CHECK(*template_layers("ws/x@2") == std::vector<std::string>{"ws/x@2"});
  CHECK(template_layers("unknown").err().code == errc::not_found);
}

TEST_CASE("a sandbox answer has what the SDK reads", "[unit][e2b]") {
  sandbox_info i;
  i.id = "n1.abc";
  i.node = "n1";
  i.state = sandbox_state::paused;
  i.layers = {"base/python@3.11"};
  i.labels = {{"job", "7"}, {template_label, "base"}};
  i.created_at_ms = 1'700'000'000'123;
  i.expires_at_ms = 1'700'000'300'123;
  i.cpu = 0.5;
  i.memory_mb = 512;
  auto j = json::parse(encode_sandbox(i, "tok"));
  CHECK(j["sandboxID"] == "n1.abc");
  CHECK(j["templateID"] == "base");
  CHECK(j["envdVersion"] == envd_version);
  CHECK(j["envdAccessToken"] == "tok");
  CHECK(j["state"] == "paused");
  CHECK(j["metadata"] == json{{"job", "7"}});
  CHECK(j["startedAt"] == "2023-11-14T22:13:20.123Z");
  CHECK(j["endAt"] == "2023-11-14T22:18:20.123Z");
  CHECK(j["cpuCount"] == 1);
  CHECK(json::parse(error_body(404, "gone")) == json{{"code", 404}, {"message", "gone"}});
}

TEST_CASE("a metrics answer is E2B's SandboxMetric array", "[unit][e2b]") {
  sandbox_metric m;
  m.timestamp_ms = 1'700'000'000'123;
  m.cpu_count = 2;
  m.cpu_used_pct = 12.5;
  m.mem_used = 64 << 20;
  m.mem_total = 512 << 20;
  auto j = json::parse(encode_metrics(m));
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 1);
  CHECK(j[0]["timestamp"] == "2023-11-14T22:13:20.123Z");
  CHECK(j[0]["cpuCount"] == 2);
  CHECK(j[0]["cpuUsedPct"] == 12.5);
  CHECK(j[0]["memUsed"] == 64 << 20);
  CHECK(j[0]["memTotal"] == 512 << 20);
}

TEST_CASE("list queries filter by metadata and state and page", "[unit][e2b]") {
  // The SDK encodes metadata twice: one parameter holding k=v&k2=v2.
  auto q = parse_list_query({{"metadata", "job=7&name=a+b%26c"}, {"state", "running,paused"},
                             {"limit", "2"}});
  REQUIRE(q);
  CHECK(q->metadata.at("job") == "7");
  CHECK(q->metadata.at("name") == "a b&c");
  CHECK(q->states.size() == 2);
  std::vector<sandbox_info> all(5);
  for (int k = 0; k < 5; ++k) {
    all[k].id = "n." + std::to_string(k);
    all[k].state = k == 4 ? sandbox_state::stopped : sandbox_state::running;
    all[k].created_at_ms = k;
    all[k].labels = {{"job", k == 0 ? "8" : "7"}, {"name", "a b&c"}};
  }
  std::string next;
  auto page = select_page(all, *q, next);
  REQUIRE(page.size() == 2);
  CHECK(page[0].id == "n.3"); // newest first; n.4 is stopped, n.0 another job
  CHECK(next == "2");
  q->offset = 2;
  page = select_page(all, *q, next);
  REQUIRE(page.size() == 1);
  CHECK(page[0].id == "n.1");
  CHECK(next.empty());
  for (auto bad : std::vector<std::map<std::string, std::string>>{
         {{"state", "gone"}}, {{"limit", "-1"}}, {{"limit", "1e9"}}, {{"nextToken", "x"}},
         {{"metadata", "novalue"}}, {{"metadata", "k=%zz"}}})
    CHECK(parse_list_query(bad).err().code == errc::invalid_argument);
}

TEST_CASE("connect envelopes frame and unframe", "[unit][e2b]") {
  auto e = envelope(0, R"({"a":1})");
  CHECK(e.size() == 5 + 7);
  CHECK(e[4] == 7);
  CHECK(*unwrap_request(e) == R"({"a":1})");
  auto eos = end_of_stream("not_found", "x");
  CHECK(static_cast<uint8_t>(eos[0]) == 2);
  CHECK(json::parse(eos.substr(5))["error"]["code"] == "not_found");
  CHECK(end_of_stream().substr(5) == "{}");
  std::string huge = std::string("\x00\xff\xff\xff\xff", 5) + "{}";
  for (auto& bad : {std::string{}, std::string("\x00\x00", 2), e.substr(0, e.size() - 1),
                    e + "x", std::string(1, '\x01') + e.substr(1), huge})
    CHECK(unwrap_request(bad).err().code == errc::invalid_argument);
  CHECK(std::string{connect_code(errc::conflict)} == "already_exists");
  CHECK(connect_status("not_found") == 404);
  CHECK(connect_status("resource_exhausted") == 429);
}

TEST_CASE("process start wraps the SDK's bash for layers without bash", "[unit][e2b]") {
  bool pty = true;
  auto r = parse_start(R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],
                          "envs":{"A":"1"},"cwd":"tmp"},"stdin":false})", pty);
  REQUIRE(r);
  CHECK_FALSE(pty);
  REQUIRE(r->argv.size() == 7);
  CHECK(r->argv[0] == "/bin/sh");
  CHECK(r->argv.back() == "echo hi");
  CHECK(r->cwd == "/tmp");
  CHECK(r->env.at("A") == "1");
  auto plain = parse_start(R"({"process":{"cmd":"/usr/bin/env"}})", pty);
  CHECK(plain->argv == std::vector<std::string>{"/usr/bin/env"});
  for (auto bad : {"{}", R"({"process":{}})", R"({"process":{"cmd":"x","args":"y"}})",
                   R"({"process":{"cmd":"x","args":[1]}})", R"({"process":{"cmd":"x","envs":[]}})"})
    CHECK(parse_start(bad, pty).err().code == errc::invalid_argument);
  CHECK(parse_start(R"({"process":{"cmd":"x"},"pty":{"size":{"cols":80}}})", pty));
  CHECK(pty);
}

TEST_CASE("process selectors and signals", "[unit][e2b]") {
  CHECK(*parse_selector(R"({"process":{"pid":7}})") == 7);
  CHECK(parse_selector(R"({"process":{"tag":"x"}})").err().code == errc::not_found);
  for (auto bad : {"{}", R"({"process":{"pid":0}})", R"({"process":{"pid":"7"}})",
                   R"({"process":{"pid":99999999999}})"})
    CHECK(parse_selector(bad).err().code == errc::invalid_argument);
  CHECK(parse_signal(R"({"process":{"pid":7},"signal":"SIGNAL_SIGKILL"})")->second == 9);
  CHECK(parse_signal(R"({"process":{"pid":7},"signal":15})")->second == 15);
  CHECK(parse_signal(R"({"process":{"pid":7},"signal":"SIGNAL_UNSPECIFIED"})").err().code
        == errc::invalid_argument);
}

TEST_CASE("send input decodes base64 stdin", "[unit][e2b]") {
  auto in = parse_input(R"({"process":{"pid":7},"input":{"stdin":"aGkK"}})");
  REQUIRE(in);
  CHECK(in->first == 7);
  CHECK(in->second == "hi\n");
  CHECK(*unbase64("YQ==") == "a");
  CHECK(*unbase64("YWI") == "ab");
  CHECK(*unbase64("") == "");
  CHECK(*unbase64(base64(std::string("\x00\xff\x10\x80", 4))) == std::string("\x00\xff\x10\x80", 4));
  for (auto bad : {"Y", "YQ=a", "Y*==", "YQ==="})
    CHECK(unbase64(bad).err().code == errc::invalid_argument);
  for (auto bad : {R"({"process":{"pid":7}})", R"({"process":{"pid":7},"input":{"pty":"aA=="}})",
                   R"({"process":{"pid":7},"input":{"stdin":"%%"}})"})
    CHECK(parse_input(bad).err().code == errc::invalid_argument);
  bool pty = false, keep = false;
  REQUIRE(parse_start(R"({"process":{"cmd":"cat"},"stdin":true})", pty, &keep));
  CHECK(keep);
}

TEST_CASE("process events carry base64 output and the exit", "[unit][e2b]") {
  CHECK(json::parse(start_event(12))["event"]["start"]["pid"] == 12);
  CHECK(json::parse(data_event(2, "hi\n"))["event"]["data"]["stderr"] == "aGkK");
  exec_result r;
  r.exit_code = 137;
  auto end = json::parse(end_event(r))["event"]["end"];
  CHECK(end["exitCode"] == 137);
  CHECK(end["exited"] == false);
  CHECK(end["status"] == "signal: killed");
  CHECK(base64("") == "");
  CHECK(base64("a") == "YQ==");
  CHECK(base64("ab") == "YWI=");
  CHECK(base64(std::string("\x00\xff\x10", 3)) == "AP8Q");
}

TEST_CASE("filesystem requests and entries", "[unit][e2b]") {
  CHECK(parse_fs(R"({"path":"work/a"})", false)->path == "/work/a");
  auto mv = parse_fs(R"({"source":"/a","destination":"/b"})", true);
  CHECK(mv->to == "/b");
  CHECK(parse_fs(R"({"path":"/","depth":3})", false)->depth == 3);
  for (auto bad : {"{}", R"({"path":""})", R"({"path":"/","depth":65})", R"({"source":"/a"})"})
    CHECK(parse_fs(bad, std::string_view{bad}.find("source") != std::string_view::npos).err().code
          == errc::invalid_argument);
  fs_entry e;
  e.name = "a";
  e.path = "/a";
  e.type = "dir";
  e.size = 4096;
  e.mode = 040755;
  e.mtime_ns = 1'700'000'000'000'000'001;
  auto j = json::parse(encode_entry(e));
  CHECK(j["type"] == "FILE_TYPE_DIRECTORY");
  CHECK(j["size"] == "4096"); // int64 is a string in proto3 JSON
  CHECK(j["permissions"] == "drwxr-xr-x");
  CHECK(j["mode"] == 0755);
  CHECK(j["modifiedTime"] == "2023-11-14T22:13:20.000000001Z");
}

TEST_CASE("multipart uploads", "[unit][e2b]") {
  std::string body = "--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/w/a\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\nA\r\nB\r\n"
                     "--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"w/b\"\r\n"
                     "\r\n\r\n--XB--\r\n";
  auto files = parse_multipart("multipart/form-data; boundary=XB", body, "");
  REQUIRE(files);
  REQUIRE(files->size() == 2);
  CHECK((*files)[0].path == "/w/a");
  CHECK((*files)[0].data == "A\r\nB");
  CHECK((*files)[1].path == "/w/b");
  CHECK((*files)[1].data.empty());
  CHECK((*parse_multipart("multipart/form-data; boundary=\"XB\"", body, "/q"))[0].path == "/q");
  for (auto bad : {"", "--XB", "--XB\r\nno headers", "--XB\r\nA: b\r\n\r\nunterminated",
                   "--XB--\r\n"})
    CHECK(parse_multipart("multipart/form-data; boundary=XB", bad, "").err().code
          == errc::invalid_argument);
  CHECK(parse_multipart("multipart/form-data", body, "").err().code == errc::invalid_argument);
}

} // namespace dsec::e2b

namespace dsec {

TEST_CASE("api keys, bearer values and envd tokens", "[unit][e2b]") {
  std::vector<std::string> keys{"0123456789abcdef", "fedcba9876543210"};
  CHECK(key_matches(keys, "fedcba9876543210"));
  CHECK_FALSE(key_matches(keys, "0123456789abcde"));
  CHECK_FALSE(key_matches(keys, ""));
  CHECK(bearer_key("Bearer xyz") == "xyz");
  CHECK(bearer_key("Basic xyz").empty());
  auto t = envd_token(keys[0], "n1.a");
  CHECK(t.size() == 64);
  CHECK(envd_token_matches(keys, "n1.a", t));
  CHECK_FALSE(envd_token_matches(keys, "n1.b", t));
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));
  CHECK_FALSE(is_loopback_host("10.0.0.1"));
}

} // namespace dsec
