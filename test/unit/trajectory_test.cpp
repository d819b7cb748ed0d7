// The trajectory log's pure parts (core/trajectory.hpp: records as lines,
// step keys, step comparison, what is kept how) and its disk store
// (journal/trajectory_store.hpp: seq, blobs, reopen after a restart, torn
// lines, steps, since, prune), on a temp dir and a pool with no threads.
#include <algorithm>
#include <chrono>

#include <catch2/catch.hpp>

#include "journal/trajectory_store.hpp"
#include "core/json_codec.hpp"
#include "core/trajectory.hpp"
#include "core/validate.hpp"
#include "layers/digest.hpp"
#include "sys/fs.hpp"
#include "temp_dir.hpp"

using namespace dsec;
using namespace dsec::trajectory;

namespace {

record exec_record(const std::string& step, const std::string& cmd) {
  record r;
  r.kind = "exec";
  r.at_ms = 1700000000123;
  r.step = step;
  r.argv = {"/bin/sh", "-c", cmd};
  r.cwd = "/work";
  r.env = {{"A", "1"}};
  r.stdin_data.data = "in";
  r.exit_code = 3;
  r.stdout_data.data = "out\n";
  r.stderr_data.data = "err\n";
  r.duration_ms = 1.5;
  return r;
}

exec_request request_for(const record& r) {
  exec_request q;
  q.argv = r.argv;
  q.cwd = r.cwd;
  q.env = r.env;
  q.stdin_data = "in";
  q.step = r.step;
  return q;
}

sandbox_spec busybox_spec() {
  sandbox_spec s;
  s.layers = {"base/busybox@1"};
  s.labels = {{"job", "grpo-7"}};
  return s;
}

} // namespace

TEST_CASE("records round-trip through their JSON line", "[trajectory]") {
  auto r = exec_record("t3", "echo hi");
  r.seq = 7;
  r.stdin_data.digest = "sha256:" + std::string(64, 'a');
  r.stdin_data.size = 2;
  r.stdout_data.how = keep::blob;
  r.stdout_data.digest = "sha256:" + std::string(64, 'b');
  r.stdout_data.size = 9000;
  auto line = encode(r);
  CHECK(line.rfind("{\"seq\":7,\"kind\":\"exec\"", 0) == 0); // seq first: read_log's filter
  CHECK(line.find('\n') == std::string::npos);
  auto back = decode(line);
  REQUIRE(back);
  CHECK(back->seq == 7);
  CHECK(back->at_ms == r.at_ms);
  CHECK(back->step == "t3");
  CHECK(back->argv == r.argv);
  CHECK(back->env == r.env);
  CHECK(back->exit_code == 3);
  CHECK(back->stdout_data.how == keep::blob);
  CHECK(back->stdout_data.data.empty()); // a blob's bytes are not in the line
  CHECK(back->stderr_data.data == "err\n");

  record spec;
  spec.kind = "spec";
  spec.id = "n1.abc";
  spec.spec = busybox_spec();
  auto s = decode(encode(spec));
  REQUIRE(s);
  CHECK(s->spec.layers == spec.spec.layers);
  CHECK(s->spec.labels == spec.spec.labels);

  // A background command: its start (no result yet), then its exit.
  auto bg = exec_record("", "sleep 1");
  bg.background = true;
  bg.pid = 42;
  auto bg_line = encode(bg);
  CHECK(bg_line.find("\"exit_code\"") == std::string::npos);
  auto bg_back = decode(bg_line);
  REQUIRE(bg_back);
  CHECK(bg_back->background);
  CHECK(bg_back->pid == 42);
  CHECK(bg_back->argv == bg.argv);
  record exit_rec;
  exit_rec.kind = "exit";
  exit_rec.pid = 42;
  exit_rec.exit_code = 7;
  exit_rec.stdout_data.data = "out\n";
  auto exit_back = decode(encode(exit_rec));
  REQUIRE(exit_back);
  CHECK(exit_back->pid == 42);
  CHECK(exit_back->exit_code == 7);
  CHECK(exit_back->stdout_data.data == "out\n");
  CHECK_FALSE(decode("{\"seq\":3,\"kind\":\"exit\",\"pid\":1}")); // no result

  for (auto bad : {"", "[]", "{\"kind\":\"exec\"}", "{\"seq\":1,\"kind\":\"exec\"}",
                   "{\"seq\":-1,\"kind\":\"file\"}", "{\"seq\":0,\"kind\":\"spec\",\"spec\":1}"})
    CHECK_FALSE(decode(bad));
}

TEST_CASE("step keys: length and charset", "[trajectory]") {
  for (auto ok : {"t3", "rollout-7/turn:12", "a.b_c@d+e=f"})
    CHECK(validate_step(ok));
  CHECK(validate_step(std::string(128, 'x')));
  for (auto bad : {"", "a b", "semi;colon", "new\nline", "quote\"", "tab\t", "ü"})
    CHECK_FALSE(validate_step(bad));
  CHECK_FALSE(validate_step(std::string(129, 'x')));
  exec_request q;
  q.argv = {"true"};
  q.step = "has space";
  CHECK_FALSE(validate(q));
}

TEST_CASE("a step compares cmd, cwd, env and stdin", "[trajectory]") {
  auto logged = exec_record("s", "echo one");
  logged.stdin_data.digest = layers::sha256_string("in");
  auto q = request_for(logged);
  auto in = layers::sha256_string("in");
  CHECK(step_differences(logged, q, in).empty());
  q.timeout_s = 99; // not part of the request's identity
  CHECK(step_differences(logged, q, in).empty());
  using diffs = std::vector<std::string>;
  auto cmd = q;
  cmd.argv[2] = "echo two";
  CHECK(step_differences(logged, cmd, in) == diffs{"cmd"});
  auto cwd = q;
  cwd.cwd = "/";
  CHECK(step_differences(logged, cwd, in) == diffs{"cwd"});
  auto env = q;
  env.env["B"] = "2";
  CHECK(step_differences(logged, env, in) == diffs{"env"});
  CHECK(step_differences(logged, q, layers::sha256_string("other")) == diffs{"stdin"});
  auto err = step_conflict("n1.abc", logged, cmd, {"cmd"});
  CHECK(err.code == errc::conflict);
  CHECK(err.message.rfind("step \"s\"", 0) == 0); // the SDK's StepConflict marker
  CHECK(err.message.find("echo one") != std::string::npos);
  CHECK(err.message.find("echo two") != std::string::npos);
}

TEST_CASE("content is inline, a blob or a digest by size and encoding", "[trajectory]") {
  CHECK(keep_for("hello", 4096, 1 << 20) == keep::inline_text);
  CHECK(keep_for(std::string(4097, 'x'), 4096, 1 << 20) == keep::blob);
  CHECK(keep_for(std::string("\xff\xfe", 2), 4096, 1 << 20) == keep::blob); // not UTF-8
  CHECK(keep_for(std::string(2000, 'x'), 100, 1000) == keep::digest_only);
  CHECK(valid_utf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"));
  for (auto bad : {"\xc3", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80"})
    CHECK_FALSE(valid_utf8(bad));
}

TEST_CASE("since and replay bodies", "[trajectory]") {
  CHECK(*parse_seq("since", "0") == 0);
  CHECK(*parse_seq("since", "42") == 42);
  for (auto bad : {"", "-1", "1.5", "abc", "99999999999999999"})
    CHECK_FALSE(parse_seq("since", bad));
  CHECK(*parse_replay("") == -1);
  CHECK(*parse_replay("{\"upto_seq\": 3}") == 3);
  CHECK(*parse_replay("{}") == -1);
  for (auto bad : {"[", "{\"upto_seq\": -1}", "{\"upto_seq\": \"3\"}", "{\"x\": 1}"})
    CHECK_FALSE(parse_replay(bad));
}

TEST_CASE("the store: seq, blobs, steps, reopen, torn lines", "[trajectory]") {
  test::temp_dir tmp{"dsec-traj"};
  store_options o;
  o.dir = tmp.path;
  o.inline_max = 16;
  o.blob_max = 1024;
  {
    sandbox_log log{o, "n1.abc", "n1", busybox_spec()};
    REQUIRE(log.open());
    CHECK(log.next_seq() == 1); // the spec is seq 0
    auto e = exec_record("t1", "echo hi");
    e.stdout_data.data = std::string(100, 'o'); // over inline_max: a blob
    REQUIRE(*log.append(e) == 1);
    record f;
    f.kind = "file";
    f.path = "/work/big";
    f.file.data = std::string(2000, 'f'); // over blob_max: digest only
    REQUIRE(*log.append(f) == 2);
    REQUIRE(*log.append(e) == 3); // same blob: stored once
    auto blobs = sys::read_file(tmp.path + "/n1.abc/blobs/sha256-"
                                + layers::digest_hex(layers::sha256_string(std::string(100, 'o'))));
    CHECK(blobs);

    auto known = request_for(exec_record("t1", "echo hi"));
    auto v = log.check_step(known);
    REQUIRE(v.kind == step_verdict::replay);
    CHECK(v.result.replayed);
    CHECK(v.result.stdout_data == std::string(100, 'o')); // loaded back from the blob
    CHECK(v.result.exit_code == 3);
    auto changed = known;
    changed.cwd = "/tmp";
    CHECK(log.check_step(changed).kind == step_verdict::conflict);
    auto fresh = known;
    fresh.step = "t2";
    CHECK(log.check_step(fresh).kind == step_verdict::run);
  }
  // A torn last line (a host crash mid-write) is cut off when reopened.
  auto path = tmp.path + "/n1.abc/log.ndjson";
  auto text = *sys::read_file(path);
  REQUIRE(sys::write_file_atomic(path, text + "{\"seq\":4,\"ki", 0600));
  sandbox_log again{o, "n1.abc", "n1", busybox_spec()};
  REQUIRE(again.open());
  CHECK(again.next_seq() == 4);
  CHECK(again.check_step(request_for(exec_record("t1", "echo hi"))).kind
        == step_verdict::replay); // steps survive the restart
  record d;
  d.kind = "destroyed";
  REQUIRE(*again.append(d) == 4);

  auto all = read_records(o, "n1.abc");
  REQUIRE(all);
  REQUIRE(all->size() == 5);
  CHECK(all->front().kind == "spec");
  CHECK((*all)[2].file.how == keep::digest_only);
  auto c = (*all)[2].file;
  CHECK(load_content(o, "n1.abc", c).err().code == errc::conflict);
  auto tail = read_log(o, "n1.abc", 2);
  REQUIRE(tail);
  CHECK(std::count(tail->begin(), tail->end(), '\n') == 2);
  CHECK(read_log(o, "n1.nope", -1).err().code == errc::not_found);

  // Prune: a destroyed log past its keep goes, a young one stays.
  CHECK(prune(o, 0) == 0);
  o.keep_destroyed_ms = 0;
  o.keep_orphan_ms = int64_t{1} << 50;
  sandbox_log orphan{o, "n1.live", "n1", busybox_spec()};
  REQUIRE(orphan.open());
  using namespace std::chrono;
  auto now = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() + 1000;
  CHECK(prune(o, now) == 1); // n1.abc (destroyed), not n1.live
  CHECK_FALSE(sys::exists(tmp.path + "/n1.abc"));
  CHECK(sys::exists(tmp.path + "/n1.live/log.ndjson"));
}

TEST_CASE("the strand runs jobs in order, one at a time", "[trajectory]") {
  auto pool = std::make_shared<sys::worker_pool>(0);
  auto s = std::make_shared<strand>(pool);
  std::vector<int> order;
  for (int i = 0; i < 5; ++i)
    s->submit([&order, i] { order.push_back(i); });
  pool->run_pending();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
}

TEST_CASE("exec bodies carry a step; answers say replayed", "[trajectory][codec]") {
  auto a = json_codec::parse_exec(R"({"cmd":"echo hi","step":"rollout-1/turn:2"})");
  REQUIRE(a);
  CHECK(a->step == "rollout-1/turn:2");
  CHECK(json_codec::parse_exec(R"({"cmd":"echo hi","step":null})")->step.empty());
  for (auto body : {R"({"cmd":"x","step":""})", R"({"cmd":"x","step":"a b"})",
                    R"({"cmd":"x","step":7})"}) {
    INFO(body);
    auto r = json_codec::parse_exec(body);
    REQUIRE_FALSE(r);
    CHECK(r.err().code == errc::invalid_argument);
    CHECK(r.err().message.find("step") != std::string::npos);
  }
  exec_result res;
  res.replayed = true;
  auto text = json_codec::encode(res);
  CHECK(text.find("\"replayed\":true") != std::string::npos);
  CHECK(json_codec::decode_exec_result(text)->replayed);
}

TEST_CASE("trajectory: shell session records round-trip", "[trajectory]") {
  // Issue 26 part 2: session_open, session_run, session_close.
  trajectory::record open;
  open.seq = 3;
  open.kind = "session_open";
  open.session = "s1";
  open.argv = {"/bin/bash"};
  open.cwd = "/srv";
  open.env = {{"A", "1"}};
  auto o = trajectory::decode(trajectory::encode(open));
  REQUIRE(o);
  CHECK(o->session == "s1");
  CHECK(o->argv == std::vector<std::string>{"/bin/bash"});
  CHECK(o->cwd == "/srv");
  CHECK(o->env == open.env);

  trajectory::record run;
  run.seq = 4;
  run.kind = "session_run";
  run.session = "s1";
  run.argv = {"cd /tmp && echo hi"};
  run.timeout_s = 5;
  run.exit_code = 130;
  run.timed_out = true;
  run.stdout_data.data = "hi\n";
  run.stdout_data.size = 3;
  auto r = trajectory::decode(trajectory::encode(run));
  REQUIRE(r);
  CHECK(r->argv == run.argv);
  CHECK(r->exit_code == 130);
  CHECK(r->timed_out);
  CHECK(r->timeout_s == 5);

  trajectory::record close;
  close.seq = 5;
  close.kind = "session_close";
  close.session = "s1";
  auto c = trajectory::decode(trajectory::encode(close));
  REQUIRE(c);
  CHECK(c->session == "s1");
  CHECK_FALSE(trajectory::decode(R"({"seq":6,"kind":"session_run","cmd":"x"})"));
}
