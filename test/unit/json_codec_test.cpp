// The REST codecs: every malformed spec or exec body is an invalid_argument
// (or too_large) naming the field, never an exception or a crash; answers
// encode and decode back.
#include <catch2/catch.hpp>

#include "core/json_codec.hpp"
#include "core/ttl.hpp"

#include <nlohmann/json.hpp>

#include "full_spec.hpp"

using namespace dsec;
using dsec::test::full_spec;
namespace codec = dsec::json_codec;

TEST_CASE("a minimal spec gets the documented defaults", "[codec]") {
  auto s = codec::parse_spec(R"({"layers":["base/busybox@1"]})");
  REQUIRE(s.ok());
  CHECK(s->backend == "container");
  CHECK(s->layers == std::vector<std::string>{"base/busybox@1"});
  CHECK(s->memory_mb == 512);
  CHECK(s->ttl_s == 3600);
  CHECK(s->cpu_class == "latency");
}

TEST_CASE("a full spec parses every field", "[codec]") {
  auto s = codec::parse_spec(R"({"backend":"container","layers":["a@1","b/c@2"],"cpu":0.5,
    "memory_mb":64,"disk_mb":100,"pids":64,"ttl_s":10,"network":{"mode":"none"},
    "protect":{"readonly":["/grader"],"hidden":["/answers"]},"env":{"A":"1"},
    "labels":{"job":"grpo"},"cpu_class":"batch","node":"n-1","request_id":"r1"})");
  REQUIRE(s.ok());
  CHECK(s->cpu == 0.5);
  CHECK(s->memory_mb == 64);
  CHECK(s->protect.hidden == std::vector<std::string>{"/answers"});
  CHECK(s->env.at("A") == "1");
  CHECK(s->labels.at("job") == "grpo");
  CHECK(s->request_id == "r1");
}

TEST_CASE("bad specs are invalid_argument naming the field", "[codec]") {
  struct row {
    const char* body;
    errc code;
    const char* mentions;
  };
  row rows[] = {
    {"{", errc::invalid_argument, "not valid JSON"},
    {"[]", errc::invalid_argument, "JSON object"},
    {"{}", errc::invalid_argument, "layers"},
    {R"({"layers":[]})", errc::invalid_argument, "layers"},
    {R"({"layers":"base@1"})", errc::invalid_argument, "layers"},
    {R"({"layers":[1]})", errc::invalid_argument, "layers"},
    {R"({"layers":["nover"]})", errc::invalid_argument, "name@version"},
    {R"({"layers":["a@1"],"memory_mb":-5})", errc::invalid_argument, "memory_mb"},
    {R"({"layers":["a@1"],"memory_mb":"512"})", errc::invalid_argument, "memory_mb"},
    {R"({"layers":["a@1"],"memory_mb":1.5})", errc::invalid_argument, "whole number"},
    {R"({"layers":["a@1"],"memory_mb":1e300})", errc::invalid_argument, "memory_mb"},
    {R"({"layers":["a@1"],"cpu":-1})", errc::invalid_argument, "cpu"},
    {R"({"layers":["a@1"],"cpu":100000})", errc::invalid_argument, "cpu"},
    {R"({"layers":["a@1"],"ttl_s":-1})", errc::invalid_argument, "ttl_s"},
    {R"({"layers":["a@1"],"pids":1})", errc::invalid_argument, "pids"},
    {R"({"layers":["a@1"],"backend":"docker"})", errc::invalid_argument, "backend"},
    {R"({"layers":["a@1"],"cpu_class":"fast"})", errc::invalid_argument, "cpu_class"},
    {R"({"layers":["a@1"],"labels":{"a":1}})", errc::invalid_argument, "labels"},
    {R"({"layers":["a@1"],"env":[]})", errc::invalid_argument, "env"},
    {R"({"layers":["a@1"],"network":"open"})", errc::invalid_argument, "network"},
    {R"({"layers":["a@1"],"network":{"mode":"all"}})", errc::invalid_argument, "network.mode"},
    {R"({"layers":["a@1"],"memroy_mb":5})", errc::invalid_argument, "memroy_mb"},
  };
  for (auto& r : rows) {
    INFO(r.body);
    auto s = codec::parse_spec(r.body);
    REQUIRE_FALSE(s.ok());
    CHECK(s.err().code == r.code);
    CHECK(s.err().message.find(r.mentions) != std::string::npos);
  }
}

TEST_CASE("oversized strings are too_large", "[codec]") {
  std::string big(5000, 'x');
  auto s = codec::parse_spec(R"({"layers":["a@1"],"request_id":")" + big + "\"}");
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().code == errc::too_large);
}

TEST_CASE("exec bodies: string and argv forms, bad shapes", "[codec]") {
  auto a = codec::parse_exec(R"({"cmd":"echo hi"})");
  REQUIRE(a.ok());
  CHECK(a->argv == std::vector<std::string>{"/bin/sh", "-c", "echo hi"});
  auto b = codec::parse_exec(R"({"cmd":["ls","-l"],"cwd":"/tmp","env":{"X":"y"},
    "stdin":"data","timeout_s":2.5})");
  REQUIRE(b.ok());
  CHECK(b->argv == std::vector<std::string>{"ls", "-l"});
  CHECK(b->cwd == "/tmp");
  CHECK(b->stdin_data == "data");
  CHECK(b->timeout_s == 2.5);
  for (auto body : {R"({})", R"({"cmd":""})", R"({"cmd":[]})", R"({"cmd":5})",
                    R"({"cmd":["a",1]})", R"({"cmd":"x","cwd":"rel"})",
                    R"({"cmd":"x","timeout_s":-1})", R"({"cmd":"x","timeout_s":"1"})",
                    R"({"cmd":"x","env":{"A=B":"c"}})", R"({"cmd":"x","stdin":5})",
                    R"({"cmd":"x","bogus":1})", "nope"}) {
    INFO(body);
    auto r = codec::parse_exec(body);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().code == errc::invalid_argument);
  }
}

TEST_CASE("batch bodies", "[codec]") {
  auto b = codec::parse_batch(R"({"spec":{"layers":["a@1"]},"count":3})");
  REQUIRE(b.ok());
  CHECK(b->second == 3);
  CHECK_FALSE(codec::parse_batch(R"({"spec":{"layers":["a@1"]},"count":0})").ok());
  CHECK_FALSE(codec::parse_batch(R"({"spec":{"layers":["a@1"]},"count":5000})").ok());
  CHECK_FALSE(codec::parse_batch(R"({"count":2})").ok());
}

TEST_CASE("answers round-trip through the client decoders", "[codec]") {
  sandbox_info s;
  s.id = "n-1.abc";
  s.node = "n-1";
  s.state = sandbox_state::running;
  s.backend = "container";
  s.layers = {"base/busybox@1"};
  s.labels = {{"job", "x"}};
  s.created_at_ms = 1700000000123;
  auto back = codec::decode_sandbox(codec::encode(s));
  REQUIRE(back.ok());
  CHECK(back->id == s.id);
  CHECK(back->state == sandbox_state::running);
  CHECK(back->labels == s.labels);
  CHECK(back->created_at_ms == s.created_at_ms);

  exec_result r;
  r.exit_code = 3;
  r.stdout_data = std::string("bin\xff\x00ary", 7);
  r.stderr_data = "err";
  r.timed_out = true;
  auto rb = codec::decode_exec_result(codec::encode(r));
  REQUIRE(rb.ok()); // invalid UTF-8 is replaced, never an exception
  CHECK(rb->exit_code == 3);
  CHECK(rb->stderr_data == "err");
  CHECK(rb->timed_out);

  auto e = codec::decode_error(codec::encode(error{errc::not_found, "sandbox x not found"}), 404);
  CHECK(e.code == errc::not_found);
  CHECK(e.message == "sandbox x not found");
  CHECK(codec::decode_error("<html>", 502).code == errc::internal);
}

namespace {

void check_same_spec(const sandbox_spec& a, const sandbox_spec& b) {
  CHECK(a.backend == b.backend);
  CHECK(a.layers == b.layers);
  CHECK(a.cpu == b.cpu);
  CHECK(a.memory_mb == b.memory_mb);
  CHECK(a.disk_mb == b.disk_mb);
  CHECK(a.pids == b.pids);
  CHECK(a.ttl_s == b.ttl_s);
  CHECK(a.network.allow == b.network.allow);
  CHECK(a.protect.readonly == b.protect.readonly);
  CHECK(a.protect.hidden == b.protect.hidden);
  CHECK(a.env == b.env);
  CHECK(a.labels == b.labels);
  CHECK(a.cpu_class == b.cpu_class);
  CHECK(a.node == b.node);
  CHECK(a.request_id == b.request_id);
  CHECK(a.image == b.image);
}

} // namespace

TEST_CASE("a spec encodes to JSON that parses back to the same spec", "[codec]") {
  auto s = full_spec();
  auto back = codec::parse_spec(codec::encode(s));
  REQUIRE(back.ok());
  check_same_spec(s, *back);
  s.network.allow = {"pypi.org:443", "10.0.0.0/8:80"};
  back = codec::parse_spec(codec::encode(s));
  REQUIRE(back.ok());
  CHECK(back->network.allow == s.network.allow);
  sandbox_spec minimal;
  minimal.layers = {"base/busybox@1"};
  back = codec::parse_spec(codec::encode(minimal));
  REQUIRE(back.ok());
  check_same_spec(minimal, *back);
}

TEST_CASE("sandbox records round-trip", "[codec][record]") {
  codec::sandbox_record r;
  r.id = "n-1.abc";
  r.spec = full_spec();
  r.created_at_ms = 1700000000123;
  r.expires_at_ms = 1700000900123;
  r.digests = {"sha256:" + std::string(64, 'a'), "sha256:" + std::string(64, 'b')};
  auto back = codec::decode_record(codec::encode(r));
  REQUIRE(back.ok());
  CHECK(back->id == r.id);
  check_same_spec(r.spec, back->spec);
  CHECK(back->created_at_ms == r.created_at_ms);
  CHECK(back->expires_at_ms == r.expires_at_ms);
  CHECK(back->digests == r.digests);
}

TEST_CASE("record decoding tolerates new fields and rejects broken records", "[codec][record]") {
  // A newer node may add fields, to the record and to its spec.
  auto ok = codec::decode_record(
    R"({"version":2,"id":"n-1.x","future":[1,2],"created_at_ms":5,
        "spec":{"layers":["a@1"],"gpu":1,"labels":{"k":"v"}},"digests":["sha256:aa"]})");
  REQUIRE(ok.ok());
  CHECK(ok->spec.labels.at("k") == "v");
  CHECK(ok->expires_at_ms == 0); // missing: no TTL
  CHECK(ok->spec.ttl_s == 3600);  // missing spec fields take the defaults

  struct row {
    const char* body;
    const char* mentions;
  };
  row rows[] = {
    {"", "not a JSON object"},
    {"{\"id\":\"n-1.x\",", "not a JSON object"}, // torn write
    {"[]", "not a JSON object"},
    {R"({"spec":{"layers":["a@1"]},"created_at_ms":5,"digests":["d"]})", "id"},
    {R"({"id":7,"spec":{"layers":["a@1"]},"created_at_ms":5,"digests":["d"]})", "id"},
    {R"({"id":"n-1.x","created_at_ms":5,"digests":["d"]})", "spec"},
    {R"({"id":"n-1.x","spec":[],"created_at_ms":5,"digests":["d"]})", "spec"},
    {R"({"id":"n-1.x","spec":{"layers":[]},"created_at_ms":5,"digests":[]})", "layers"},
    {R"({"id":"n-1.x","spec":{"layers":["a@1"],"memory_mb":"x"},"created_at_ms":5,
        "digests":["d"]})", "memory_mb"},
    {R"({"id":"n-1.x","spec":{"layers":["a@1"]},"digests":["d"]})", "created_at_ms"},
    {R"({"id":"n-1.x","spec":{"layers":["a@1"]},"created_at_ms":"5","digests":["d"]})",
     "created_at_ms"},
    {R"({"id":"n-1.x","spec":{"layers":["a@1"]},"created_at_ms":5})", "digests"},
    {R"({"id":"n-1.x","spec":{"layers":["a@1"]},"created_at_ms":5,"digests":[1]})", "digests"},
    {R"({"id":"n-1.x","spec":{"layers":["a@1","b@1"]},"created_at_ms":5,"digests":["d"]})",
     "digests"},
  };
  for (auto& r : rows) {
    INFO(r.body);
    auto rec = codec::decode_record(r.body);
    REQUIRE_FALSE(rec.ok());
    CHECK(rec.err().code == errc::invalid_argument);
    CHECK(rec.err().message.find(r.mentions) != std::string::npos);
  }
}

TEST_CASE("protected paths: absolute, normalised, outside /proc /sys /dev", "[codec]") {
  auto with = [](const std::string& protect) {
    return json_codec::parse_spec(R"({"layers":["base/busybox@1"],"protect":)" + protect + "}");
  };
  CHECK(with(R"({"readonly":["/etc","/opt/tools"],"hidden":["/answers","/etc/shadow"]})").ok());
  CHECK(with(R"({"readonly":["/"]})").ok());
  for (auto bad : {R"({"readonly":["etc"]})", R"({"readonly":["/etc/"]})",
                   R"({"readonly":["/a//b"]})", R"({"hidden":["/a/../etc"]})",
                   R"({"hidden":["/a/.."]})", R"({"hidden":["/a/."]})", R"({"hidden":["/"]})",
                   R"({"readonly":["/proc/1"]})", R"({"hidden":["/sys"]})",
                   R"({"readonly":["/dev/shm"]})"}) {
    INFO(bad);
    auto s = with(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(s.err().code == errc::invalid_argument);
    CHECK(s.err().message.find("protect.") != std::string::npos);
  }
}

TEST_CASE("healthz shows each backend, why one is not available and the VMs' accelerator",
          "[codec]") {
  node_status st;
  st.node_id = "n1";
  st.backends = {{"container", true, "", "", ""},
                 {"microvm", true, "", "tcg", "no /dev/kvm"},
                 {"vm", false, "DSEC_VM_ACCEL=kvm but KVM does not run guests here: x", "kvm",
                  "x"}};
  auto j = nlohmann::json::parse(json_codec::encode(st));
  CHECK(j["status"] == "ok");
  CHECK(j["backends"]["container"] == nlohmann::json{{"available", true}});
  CHECK(j["backends"]["microvm"]["accel"] == "tcg");
  CHECK(j["backends"]["microvm"]["accel_reason"] == "no /dev/kvm");
  CHECK_FALSE(j["backends"]["microvm"].contains("reason"));
  CHECK(j["backends"]["vm"]["available"] == false);
  CHECK(j["backends"]["vm"]["reason"].get<std::string>().find("DSEC_VM_ACCEL=kvm") == 0);
}

TEST_CASE("one record holds the TTL state; a version 1 pair still reads", "[codec][record]") {
  codec::sandbox_record r;
  r.id = "n-1.p";
  r.spec.layers = {"a@1"};
  r.spec.ttl_s = 60;
  r.created_at_ms = 1700000000000;
  r.digests = {"sha256:aa"};
  r.paused_at_ms = 1700000030000;
  r.ttl_left_ms = 30000;
  auto back = codec::decode_record(codec::encode(r));
  REQUIRE(back.ok());
  CHECK(back->paused_at_ms == r.paused_at_ms);
  CHECK(back->ttl_left_ms == r.ttl_left_ms);
  CHECK(back->expires_at_ms == 0);
  CHECK(codec::encode(r).find("\"version\":2") != std::string::npos);

  // What a node before version 2 wrote: the record without TTL state, and
  // ttl.json beside it.
  auto v1 = codec::decode_record(
    R"({"version":1,"id":"n-1.p","spec":{"layers":["a@1"],"ttl_s":60},
        "created_at_ms":1700000000000,"expires_at_ms":1700000060000,"digests":["sha256:aa"]})");
  REQUIRE(v1.ok());
  CHECK(v1->paused_at_ms == 0); // running, as created
  CHECK(v1->expires_at_ms == 1700000060000);
  struct row {
    const char* name;
    ttl::file_state file;
    int64_t paused_at_ms, ttl_left_ms, expires_at_ms;
  };
  row rows[] = {
    {"paused", {1700000030000, 30000, 0}, 1700000030000, 30000, 0},
    {"resumed: the expiry a resume moved", {0, 0, 1700000090000}, 0, 0, 1700000090000},
  };
  for (auto& x : rows) {
    INFO(x.name);
    auto rec = *v1;
    std::string why;
    codec::merge_ttl_file(rec, ttl::encode(x.file), &why);
    CHECK(why.empty());
    CHECK(rec.paused_at_ms == x.paused_at_ms);
    CHECK(rec.ttl_left_ms == x.ttl_left_ms);
    CHECK(rec.expires_at_ms == x.expires_at_ms);
    // Written back as one record, it reads the same.
    auto again = codec::decode_record(codec::encode(rec));
    REQUIRE(again.ok());
    CHECK(again->paused_at_ms == x.paused_at_ms);
    CHECK(again->expires_at_ms == x.expires_at_ms);
  }
  // A corrupt TTL file changes nothing and says why.
  auto rec = *v1;
  std::string why;
  codec::merge_ttl_file(rec, "{torn", &why);
  CHECK_FALSE(why.empty());
  CHECK(rec.expires_at_ms == 1700000060000);
  CHECK(rec.paused_at_ms == 0);
}

TEST_CASE("a spec may start from an image, with layers stacked on it or none", "[codec][image]") {
  auto s = codec::parse_spec(R"({"image":"127.0.0.1:5000/team/py:3.11"})");
  REQUIRE(s.ok());
  CHECK(s->image == "127.0.0.1:5000/team/py:3.11");
  CHECK(s->layers.empty());
  auto stacked = codec::parse_spec(
    R"({"image":"127.0.0.1:5000/team/py@sha256:)" + std::string(64, 'a')
    + R"(","layers":["ws/django@1"]})");
  REQUIRE(stacked.ok());
  CHECK(stacked->layers == std::vector<std::string>{"ws/django@1"});
  // Written and read back (the record holds it, with the resolved layer).
  sandbox_spec rec = *s;
  rec.layers = {"img/127.0.0.1-5000/team/py@sha256-" + std::string(32, 'b')};
  auto back = codec::parse_spec(codec::encode(rec));
  REQUIRE(back.ok());
  CHECK(back->image == rec.image);
  CHECK(back->layers == rec.layers);

  struct row {
    const char* body;
    errc code;
    const char* mentions;
  };
  row rows[] = {
    {R"({"image":""})", errc::invalid_argument, "layers"},
    {R"({"image":5,"layers":["a@1"]})", errc::invalid_argument, "image"},
    {R"({"image":"Not A Ref!"})", errc::invalid_argument, "image: "},
    {R"({"image":"localhost:5000/py:3.11","backend":"fncall"})", errc::invalid_argument,
     "fncall backend"},
    {R"({"image":"localhost:5000/py:3.11","backend":"microvm"})", errc::invalid_argument,
     "microvm backend cannot start from an image"},
    {R"({"image":"localhost:5000/py:3.11","backend":"vm"})", errc::invalid_argument,
     "vm backend"},
  };
  for (auto& r : rows) {
    INFO(r.body);
    auto bad = codec::parse_spec(r.body);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.err().code == r.code);
    CHECK(bad.err().message.find(r.mentions) != std::string::npos);
  }
  auto big = codec::parse_spec(R"({"image":"localhost:5000/)" + std::string(5000, 'a') + "\"}");
  REQUIRE_FALSE(big.ok());
  CHECK(big.err().code == errc::too_large);
}

TEST_CASE("a sandbox info shows its image; lists decode it too", "[codec][image]") {
  sandbox_info s;
  s.id = "n-1.img";
  s.state = sandbox_state::running;
  s.image = "127.0.0.1:5000/team/py:3.11";
  s.layers = {"img/127.0.0.1-5000/team/py@sha256-" + std::string(32, 'c'), "ws@1"};
  auto j = nlohmann::json::parse(codec::encode(s));
  CHECK(j["image"] == s.image);
  CHECK(j["layers"][0] == s.layers[0]);
  auto back = codec::decode_sandbox(codec::encode(s));
  REQUIRE(back.ok());
  CHECK(back->image == s.image);
  CHECK(back->layers == s.layers);
  auto list = codec::decode_sandboxes(codec::encode(std::vector<sandbox_info>{s}));
  REQUIRE(list.ok());
  REQUIRE(list->size() == 1);
  CHECK(list->front().image == s.image);
  // A sandbox without one shows "".
  sandbox_info plain;
  CHECK(nlohmann::json::parse(codec::encode(plain))["image"] == "");
}

TEST_CASE("a record of a sandbox made from an image round-trips", "[codec][record][image]") {
  codec::sandbox_record r;
  r.id = "n-1.img";
  r.spec.image = "127.0.0.1:5000/team/py:3.11";
  r.spec.layers = {"img/127.0.0.1-5000/team/py@sha256-" + std::string(32, 'd'), "ws@1"};
  r.created_at_ms = 1700000000000;
  r.digests = {"sha256:" + std::string(64, 'a'), "sha256:" + std::string(64, 'b')};
  auto back = codec::decode_record(codec::encode(r));
  REQUIRE(back.ok());
  CHECK(back->spec.image == r.spec.image);
  CHECK(back->spec.layers == r.spec.layers);
  CHECK(back->digests == r.digests);
}
