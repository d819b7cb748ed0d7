// E2B control-plane parts (issue 27), the pure halves: snapshot and fork
// shapes and the store's record, updateNetwork's mapping, the metrics
// history, and signed file URLs checked against signatures that E2B's own
// SDK computed (node's crypto, as src/sandbox/signature.ts does).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "api/e2b_create.hpp"
#include "api/e2b_metrics.hpp"
#include "api/e2b_signature.hpp"
#include "api/e2b_snapshots.hpp"
#include "temp_dir.hpp"

#include <cstdio>

namespace dsec::e2b {

using nlohmann::json;

TEST_CASE("e2b snapshot names, ids and requests", "[unit][e2b]") {
  CHECK(*parse_snapshot_request("") == "");
  CHECK(*parse_snapshot_request(R"({"name":"snap-test-1"})") == "snap-test-1");
  for (auto bad : {R"({"name":"Team/x"})", R"({"name":"x:v1"})", R"({"name":"UPPER"})",
                   R"({"name":""})", R"({"name":7})", R"({"name":"base"})", R"({"tags":["a"]})", "[1]"}) {
    auto r = parse_snapshot_request(bad);
    REQUIRE(!r);
    CHECK(r.err().code == errc::invalid_argument);
  }
  CHECK(snapshot_id_of("mine", 1, 2) == "mine");
  CHECK(snapshot_id_of("", 1700000000123, 0xabcdef) == "snap-1700000000123-00abcdef");
}

TEST_CASE("e2b snapshots: the store's record, listed, filtered, paged and removed",
          "[unit][e2b]") {
  test::temp_dir dir;
  auto root = dir.path;
  REQUIRE(read_snapshots(root)->empty());
  for (int i = 0; i < 3; ++i) {
    snapshot_record r;
    r.id = "snap-" + std::to_string(i);
    r.sandbox_id = i == 2 ? "n1.b" : "n1.a";
    r.layers = {"base/python@3.11", "snapshot/n1.a@" + std::to_string(i)};
    r.created_at_ms = 1000 + i;
    if (i == 1)
      r.names = {"named"};
    REQUIRE(put_snapshot(root, r));
  }
  auto all = read_snapshots(root);
  REQUIRE(all);
  REQUIRE(all->size() == 3);
  CHECK(all->at("snap-1").layers.back() == "snapshot/n1.a@1");
  std::string next;
  auto page = json::parse(encode_snapshot_page(*all, *parse_snapshot_query({{"limit", "2"}}), next));
  REQUIRE(page.size() == 2);
  CHECK(page[0]["snapshotID"] == "snap-2"); // newest first
  CHECK(next == "2");
  page = json::parse(encode_snapshot_page(*all, *parse_snapshot_query({{"nextToken", next}}), next));
  CHECK(page.size() == 1);
  CHECK(next.empty());
  page = json::parse(encode_snapshot_page(*all, *parse_snapshot_query({{"sandboxID", "n1.b"}}), next));
  REQUIRE(page.size() == 1);
  CHECK(page[0]["snapshotID"] == "snap-2");
  page = json::parse(encode_snapshot_page(*all, *parse_snapshot_query({{"name", "named"}}), next));
  REQUIRE(page.size() == 1);
  CHECK(page[0]["names"] == json::array({"named"}));
  CHECK(!parse_snapshot_query({{"teamID", "x"}}));
  CHECK(*remove_snapshot(root, "snap-1"));
  CHECK(!*remove_snapshot(root, "snap-1"));
  CHECK(read_snapshots(root)->size() == 2);
}

TEST_CASE("e2b fork requests and results", "[unit][e2b]") {
  auto f = parse_fork("{}");
  REQUIRE(f);
  CHECK(f->count == 1);
  CHECK(f->timeout_s == 15);
  f = parse_fork(R"({"count":100,"timeout":60})");
  REQUIRE(f);
  CHECK(f->count == 100);
  for (auto bad : {R"({"count":0})", R"({"count":101})", R"({"count":"2"})",
                   R"({"timeout":-1})", R"({"memory":true})"})
    CHECK(!parse_fork(bad));
  auto out = json::parse(encode_fork_results({{R"({"sandboxID":"n1.x"})", 0, ""},
                                              {"", 429, "node busy"}}));
  CHECK(out[0]["sandbox"]["sandboxID"] == "n1.x");
  CHECK(out[1]["error"]["code"] == 429);
  CHECK(out[1]["error"]["message"] == "node busy");
}

TEST_CASE("e2b updateNetwork maps onto the allow-list or refuses by name", "[unit][e2b]") {
  auto p = parse_network_update(R"({"allowOut":["1.1.1.1","pypi.org"],"denyOut":["0.0.0.0/0"]})",
                                "n1.a");
  REQUIRE(p);
  CHECK(p->allow == std::vector<std::string>{"1.1.1.1:*", "pypi.org:*"});
  // The SDK's create sends allow_internet_access true with every body:
  // denyOut all still leaves only allowOut.
  sandbox_spec s;
  REQUIRE(apply_create_options(R"({"allow_internet_access":true,"network":{
                                   "allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}})", s, true));
  CHECK(s.network.allow == std::vector<std::string>{"1.1.1.1:*"});
  p = parse_network_update("{}", "n1.a");
  REQUIRE(p);
  CHECK(p->allow.empty());
  p = parse_network_update(R"({"allow_internet_access":true})", "n1.a");
  REQUIRE(p);
  CHECK(p->allow.size() == 2);
  for (auto [body, named] : std::vector<std::pair<const char*, const char*>>{
         {R"({"egressProxy":{"address":"x:1"}})", "egressProxy"},
         {R"({"rules":{}})", "rules"},
         {R"({"denyOut":["example.com"]})", "denyOut"}}) {
    auto r = parse_network_update(body, "n1.a");
    REQUIRE(!r);
    CHECK(r.err().message.find(named) != std::string::npos);
    CHECK(r.err().message.find("n1.a") != std::string::npos);
  }
}

TEST_CASE("e2b metrics history is bounded, ordered and ranged", "[unit][e2b]") {
  metrics_history h;
  CHECK(h.claim("a"));
  CHECK(!h.claim("a"));
  auto at = [](int64_t ms) {
    metric_sample s;
    s.m.timestamp_ms = ms;
    return s;
  };
  for (int64_t i = 0; i < static_cast<int64_t>(max_samples) + 10; ++i)
    h.add("a", at(1000 * (i + 1)));
  h.add("a", at(20500)); // an on-demand sample between two ticks
  auto all = h.range("a", std::nullopt, std::nullopt);
  REQUIRE(all.size() == max_samples);
  for (size_t i = 1; i < all.size(); ++i)
    CHECK(all[i - 1].m.timestamp_ms <= all[i].m.timestamp_ms);
  CHECK(h.range("a", 30000, 32000).size() == 3);
  CHECK(h.range("a", 0, 1).empty());
  CHECK(h.latest("a")->m.timestamp_ms == 1000 * static_cast<int64_t>(max_samples + 10));
  h.forget("a");
  CHECK(!h.latest("a"));
  CHECK(h.claim("a"));
  metric_sample m;
  m.disk_used = 4096;
  m.disk_total = 1 << 30;
  auto j = json::parse(encode_metric_list({m}));
  CHECK(j[0]["diskUsed"] == 4096);
  CHECK(j[0]["diskTotal"] == 1 << 30);
  CHECK(*parse_metric_ids({{"sandbox_ids", "n1.a,n1.b"}}) == std::vector<std::string>{"n1.a", "n1.b"});
  CHECK(!parse_metric_ids({}));
  CHECK(!parse_metric_ids({{"sandbox_ids", "a"}, {"x", "1"}}));
}

TEST_CASE("e2b disk use counts a tree's blocks, not other filesystems", "[unit][e2b]") {
  test::temp_dir dir;
  CHECK(disk_bytes(dir.path + "/absent") == 0);
  auto empty = disk_bytes(dir.path);
  {
    FILE* f = std::fopen((dir.path + "/data").c_str(), "w");
    REQUIRE(f);
    std::string block(1 << 20, 'x');
    std::fwrite(block.data(), 1, block.size(), f);
    std::fclose(f);
  }
  CHECK(disk_bytes(dir.path) >= empty + (1 << 20));
}

TEST_CASE("e2b signed file URLs as E2B's SDK signs them", "[unit][e2b]") {
  // Computed by node: 'v1_' + sha256(raw).base64 without padding.
  CHECK(file_signature("/home/user/hello.txt", "read", "root", "tok", std::nullopt)
        == "v1_TRlHfiNgpf44c8IeZCoou7xiz+m60QkIJ1Pm8NXrjXk");
  CHECK(file_signature("hello.txt", "write", "", "tok", 1700000000)
        == "v1_X5VuPiiEy8qKk/edz0QLo+ML+7gSRoLmKWr2EpBfwg8");
  auto r = parse_signed_request("POST", {{"path", "hello.txt"},
                                         {"signature", "v1_X5VuPiiEy8qKk/edz0QLo+ML+7gSRoLmKWr2EpBfwg8"},
                                         {"signature_expiration", "1700000000"}});
  REQUIRE(r);
  CHECK(r->operation == "write");
  CHECK(signature_matches(*r, "tok"));
  CHECK(!signature_matches(*r, "other"));
  r->operation = "read"; // a write URL does not read
  CHECK(!signature_matches(*r, "tok"));
  CHECK(parse_signed_request("GET", {{"signature_expiration", "-5"}})->expiration == -5);
  CHECK(!parse_signed_request("GET", {{"signature_expiration", "soon"}}));
  CHECK(!parse_signed_request("DELETE", {}));
  CHECK(envd_host_sandbox("49983-n1.abc.sb.example:443", "sb.example") == "n1.abc");
  CHECK(envd_host_sandbox("49983-n1.abc.sb.example", "sb.example") == "n1.abc");
  CHECK(envd_host_sandbox("8080-n1.abc.sb.example", "sb.example").empty());
  CHECK(envd_host_sandbox("49983-n1.abc.other", "sb.example").empty());
  CHECK(envd_host_sandbox("49983-n1.abc.sb.example", "").empty());
}

} // namespace dsec::e2b
