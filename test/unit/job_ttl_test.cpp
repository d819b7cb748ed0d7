// Pure parts of job-level pause/resume, the TTL over pauses and the infra
// verdict of errors: label selectors, the job codecs, TTL math, the TTL
// file, and the error table of core/error_kind.hpp.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/error_kind.hpp"
#include "core/job.hpp"
#include "core/json_codec.hpp"
#include "core/ttl.hpp"

using namespace dsec;

TEST_CASE("job selectors: at least one label, match by inclusion", "[job]") {
  CHECK_FALSE(validate_job_labels({}, "pause job").ok());
  CHECK(validate_job_labels({}, "pause job").err().code == errc::invalid_argument);
  CHECK(validate_job_labels({{"job", "g"}}, "pause job").ok());
  CHECK(labels_match({{"job", "g"}, {"step", "3"}}, {{"job", "g"}}));
  CHECK_FALSE(labels_match({{"job", "g"}}, {{"job", "h"}}));
  CHECK_FALSE(labels_match({{"step", "3"}}, {{"job", "g"}}));
  CHECK_FALSE(labels_match({{"job", "g"}}, {{"job", "g"}, {"x", "1"}}));
}

TEST_CASE("job bodies: labels required, strict", "[job]") {
  struct row {
    const char* body;
    bool ok;
  };
  row rows[] = {
    {R"({"labels":{"job":"grpo-7"}})", true},
    {R"({"labels":{"job":"a","team":"b"}})", true},
    {R"({"labels":{}})", false},
    {R"({})", false},
    {R"({"labels":null})", false},
    {"", false},
    {"[]", false},
    {R"({"labels":{"job":1}})", false},
    {R"({"labels":["job"]})", false},
    {R"({"labels":{"job":"a"},"all":true})", false},
  };
  for (auto& r : rows) {
    INFO(r.body);
    auto got = json_codec::parse_job(r.body, "pause job");
    CHECK(got.ok() == r.ok);
    if (!got.ok()) {
      CHECK(got.err().code == errc::invalid_argument);
      CHECK(got.err().message.rfind("pause job", 0) == 0);
    }
  }
}

TEST_CASE("job answers round-trip; merge keeps done sorted", "[job]") {
  job_result a{{"n2.b", "n2.a"}, {}};
  std::sort(a.done.begin(), a.done.end());
  merge(a, job_result{{"n1.z"}, {{"n1.y", "n1", errc::unavailable, "pause n1.y: gone"}}});
  merge(a, job_result{{}, {{"", "n3", errc::timeout, "pause job on node n3: timed out"}}});
  CHECK(a.done == std::vector<std::string>{"n1.z", "n2.a", "n2.b"});
  REQUIRE(a.errors.size() == 2);
  auto text = json_codec::encode_job("pause", {{"job", "g"}}, a);
  CHECK(text.find(R"("count":3)") != std::string::npos);
  CHECK(text.find(R"("id":null)") != std::string::npos); // the node-level item
  auto back = json_codec::decode_job(text);
  REQUIRE(back.ok());
  CHECK(back->done == a.done);
  REQUIRE(back->errors.size() == 2);
  CHECK(back->errors[0].id == "n1.y");
  CHECK(back->errors[0].code == errc::unavailable);
  CHECK(back->errors[1].node == "n3");
  CHECK(back->errors[1].id.empty());
}

TEST_CASE("ttl counts running time only", "[ttl]") {
  CHECK(ttl::left_at(0, 5000) == 0);
  CHECK(ttl::left_at(10'000, 4'000) == 6'000);
  CHECK(ttl::left_at(10'000, 12'000) == 0);
  CHECK(ttl::expires_after_resume(6'000, 100'000) == 106'000);
  CHECK(ttl::expires_after_resume(-5, 100'000) == 100'000);
  CHECK(ttl::paused_deadline(1'000, 86400) == 1'000 + 86'400'000);

  sandbox_info s;
  s.ttl_s = 0;
  CHECK(ttl::remaining_ms(s, 1) == -1); // no TTL
  s.ttl_s = 60;
  s.state = sandbox_state::creating;
  CHECK(ttl::remaining_ms(s, 1) == 60'000);
  s.state = sandbox_state::running;
  s.expires_at_ms = 50'000;
  CHECK(ttl::remaining_ms(s, 20'000) == 30'000);
  CHECK(ttl::remaining_ms(s, 90'000) == 0);
  s.state = sandbox_state::paused; // the clock stands still
  s.expires_at_ms = 0;
  s.ttl_left_ms = 12'345;
  CHECK(ttl::remaining_ms(s, 20'000) == 12'345);
  CHECK(ttl::remaining_ms(s, 9'000'000) == 12'345);
}

TEST_CASE("the ttl file round-trips and refuses garbage", "[ttl]") {
  ttl::file_state f;
  f.paused_at_ms = 1'700'000'000'000;
  f.left_ms = 4'200;
  auto back = ttl::decode(ttl::encode(f));
  REQUIRE(back.ok());
  CHECK(back->paused_at_ms == f.paused_at_ms);
  CHECK(back->left_ms == 4'200);
  CHECK(back->expires_at_ms == 0);
  for (const char* bad : {"", "{}", "[1]", R"({"paused_at_ms":1,"left_ms":"x","expires_at_ms":0})",
                          R"({"paused_at_ms":-1,"left_ms":0,"expires_at_ms":0})"}) {
    INFO(bad);
    CHECK_FALSE(ttl::decode(bad).ok());
  }
}

TEST_CASE("paused_ttl_s is a spec field: positive, bounded, defaults to a day", "[ttl]") {
  auto base = std::string{R"({"layers":["base/busybox@1"])"};
  auto ok = json_codec::parse_spec(base + "}");
  REQUIRE(ok.ok());
  CHECK(ok->paused_ttl_s == 86400);
  auto set = json_codec::parse_spec(base + R"(,"paused_ttl_s":30})");
  REQUIRE(set.ok());
  CHECK(set->paused_ttl_s == 30);
  for (const char* v : {"0", "-1", "1.5", "\"60\"", "2592001", "true"}) {
    INFO(v);
    auto bad = json_codec::parse_spec(base + R"(,"paused_ttl_s":)" + v + "}");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.err().code == errc::invalid_argument);
    CHECK(bad.err().message.find("paused_ttl_s") != std::string::npos);
  }
  // It survives the record a restarted node reads.
  json_codec::sandbox_record rec;
  rec.id = "n1.a";
  rec.spec = *set;
  rec.created_at_ms = 1;
  rec.digests = {"sha256:x"};
  auto r = json_codec::decode_record(json_codec::encode(rec));
  REQUIRE(r.ok());
  CHECK(r->spec.paused_ttl_s == 30);
}

TEST_CASE("infra or model: the error table", "[errors]") {
  struct row {
    errc code;
    const char* message;
    bool infra;
  };
  row rows[] = {
    {errc::invalid_argument, "spec: memory_mb must be between 8 and 1048576", false},
    {errc::too_large, "write /a: over the node's limit", false},
    {errc::not_found, "sandbox n1.x not found", false},
    {errc::conflict, "request_id reused with another spec", false},
    {errc::resource_exhausted, "create: node n1 holds 4096 sandboxes, its limit", true},
    {errc::unavailable, "sandbox n1.x is lost: its node n1 is dead", true},
    {errc::unavailable, "exec in sandbox n1.x: the connection to the node closed", true},
    {errc::unavailable, "create: node n1 is shutting down", true},
    {errc::unavailable, "sandbox n1.x is failed (init exited: killed by signal 9)", true},
    {errc::unavailable, "sandbox n1.x is failed (oom)", false},
    {errc::unavailable, "sandbox n1.x is stopped (ttl expired)", false},
    {errc::unavailable, "sandbox n1.x is stopped (paused ttl expired: paused_ttl_s 3)", false},
    {errc::timeout, "request timed out", true},
    {errc::internal, "mount overlay: EIO", true},
    {errc::none, "", false},
  };
  for (auto& r : rows) {
    INFO(to_string(r.code) << ": " << r.message);
    CHECK(is_infra(error{r.code, r.message}) == r.infra);
  }
  // REST errors carry the verdict.
  auto text = json_codec::encode(error{errc::unavailable, "sandbox n1.x is failed (oom)"});
  CHECK(text.find(R"("infra":false)") != std::string::npos);
}
