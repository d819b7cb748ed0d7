// The init protocol (backends/channel/protocol.hpp), both ends' codec: every
// frame the node and dsec-init exchange survives encode -> peek_frame ->
// decode unchanged, and every truncated, padded or lying frame is refused
// without reading past its end. The ps_list and signal frames have their
// own cases in procs_codec_test.cpp. The version hello at connect is run
// against a fake init on a socketpair: agreement, a named mismatch, and an
// init from before hello that closes the channel at it.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <chrono>
#include <future>
#include <thread>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/channel/init_channel.hpp"
#include "backends/channel/io_loop.hpp"
#include "backends/channel/protocol.hpp"

using namespace dsec;
namespace proto = init_proto;

namespace {

/// The body of a whole frame, after checking its header.
std::string body_of(const std::string& frame, proto::msg type, uint32_t id) {
  proto::header h;
  REQUIRE(proto::peek_frame(frame, h) == proto::parse::complete);
  CHECK(h.type == type);
  CHECK(h.id == id);
  REQUIRE(h.length == frame.size() - proto::header_size);
  return frame.substr(proto::header_size);
}

/// Every strict prefix of `body` fails `decode`, and so does `body` with a
/// byte too many; every strict prefix of `frame` is an incomplete frame.
void check_refusals(const std::string& frame,
                    const std::function<bool(std::string_view)>& decode) {
  auto body = frame.substr(proto::header_size);
  for (size_t n = 0; n < body.size(); ++n) {
    INFO("body cut at " << n << " of " << body.size());
    CHECK_FALSE(decode(std::string_view(body).substr(0, n)));
  }
  CHECK_FALSE(decode(body + "x"));
  proto::header h;
  for (size_t n = 0; n < frame.size(); ++n) {
    INFO("frame cut at " << n << " of " << frame.size());
    CHECK(proto::peek_frame(std::string_view(frame).substr(0, n), h) ==
          proto::parse::incomplete);
  }
}

} // namespace

TEST_CASE("init protocol: config round trip, truncations refused", "[init][protocol]") {
  struct row {
    const char* name;
    proto::config_msg m;
  };
  proto::config_msg full;
  full.hostname = "n1.abc";
  full.rootfs = "/var/lib/dsec/s/abc/rootfs";
  full.seccomp_bpf = std::string(16, '\x15') + std::string("\0\0\0\0\0\0\0\0", 8);
  full.readonly = {"/proc/sys", "/sys"};
  full.hidden = {"/proc/kcore"};
  full.attach_root = true;
  full.in_template = true;
  full.shared_sysfs = true;
  std::vector<row> rows = {{"empty", proto::config_msg{}}, {"full", full}};
  for (auto& r : rows) {
    INFO(r.name);
    auto frame = proto::encode(r.m);
    auto body = body_of(frame, proto::msg::config, 0);
    proto::config_msg out;
    REQUIRE(proto::decode(body, out));
    CHECK(out.hostname == r.m.hostname);
    CHECK(out.rootfs == r.m.rootfs);
    CHECK(out.seccomp_bpf == r.m.seccomp_bpf);
    CHECK(out.readonly == r.m.readonly);
    CHECK(out.hidden == r.m.hidden);
    CHECK(out.attach_root == r.m.attach_root);
    CHECK(out.in_template == r.m.in_template);
    CHECK(out.shared_sysfs == r.m.shared_sysfs);
    check_refusals(frame, [](std::string_view b) {
      proto::config_msg m;
      return proto::decode(b, m);
    });
  }
  // At most 256 read-only paths: a longer list is refused, not truncated.
  proto::config_msg many;
  many.readonly.assign(257, "/x");
  proto::config_msg out;
  CHECK_FALSE(proto::decode(proto::encode(many).substr(proto::header_size), out));
}

TEST_CASE("init protocol: exec round trip, truncations refused", "[init][protocol]") {
  struct row {
    const char* name;
    proto::exec_msg m;
  };
  proto::exec_msg shell;
  shell.argv = {"/bin/sh", "-c", "echo hi"};
  proto::exec_msg full;
  full.argv = {"python3", "-"};
  full.env = {"PATH=/usr/bin", "HOME=/root", "EMPTY="};
  full.cwd = "/work";
  full.stdin_data = std::string("print(1)\n\0\xff", 11);
  full.timeout_ms = 30000;
  full.keep_stdin = 1;
  std::vector<row> rows = {{"argv only", shell}, {"every field", full}};
  for (auto& r : rows) {
    INFO(r.name);
    auto frame = proto::encode(41, r.m);
    auto body = body_of(frame, proto::msg::exec, 41);
    proto::exec_msg out;
    REQUIRE(proto::decode(body, out));
    CHECK(out.argv == r.m.argv);
    CHECK(out.env == r.m.env);
    CHECK(out.cwd == r.m.cwd);
    CHECK(out.stdin_data == r.m.stdin_data);
    CHECK(out.timeout_ms == r.m.timeout_ms);
    CHECK(out.keep_stdin == r.m.keep_stdin);
    check_refusals(frame, [](std::string_view b) {
      proto::exec_msg m;
      return proto::decode(b, m);
    });
  }
  // An exec without a command is refused even when well formed.
  proto::exec_msg out;
  CHECK_FALSE(proto::decode(proto::encode(1, proto::exec_msg{}).substr(proto::header_size), out));
}

TEST_CASE("init protocol: done round trip, truncations refused", "[init][protocol]") {
  struct row {
    int32_t code;
    bool timed_out, truncated;
    double ms;
  };
  for (auto r : std::vector<row>{{0, false, false, 0.0},
                                 {137, true, false, 30000.5},
                                 {-1, false, true, 1e-3}}) {
    INFO("exit code " << r.code);
    proto::done_msg m{r.code, r.timed_out, r.truncated, r.ms};
    auto frame = proto::encode(9, m);
    auto body = body_of(frame, proto::msg::done, 9);
    proto::done_msg out;
    REQUIRE(proto::decode(body, out));
    CHECK(out.exit_code == r.code);
    CHECK(out.timed_out == r.timed_out);
    CHECK(out.truncated == r.truncated);
    CHECK(out.duration_ms == r.ms);
    check_refusals(frame, [](std::string_view b) {
      proto::done_msg d;
      return proto::decode(b, d);
    });
  }
}

TEST_CASE("init protocol: frames built field by field", "[init][protocol]") {
  // The frames both ends write and read inline with writer and reader: one
  // row per frame type, its fields and how the reader takes them back.
  struct row {
    const char* name;
    proto::msg type;
    std::string frame;
    std::function<bool(proto::reader&)> read; ///< true if the fields match
  };
  std::string data("out\0put", 7);
  std::vector<row> rows = {
    {"kill", proto::msg::kill, proto::writer(proto::msg::kill, 5).finish(),
     [](proto::reader&) { return true; }},
    {"ready", proto::msg::ready, proto::writer(proto::msg::ready, 5).finish(),
     [](proto::reader&) { return true; }},
    {"ps", proto::msg::ps, proto::writer(proto::msg::ps, 5).finish(),
     [](proto::reader&) { return true; }},
    {"stdin_data", proto::msg::stdin_data,
     proto::writer(proto::msg::stdin_data, 5).str("abc").u8(1).finish(),
     [](proto::reader& r) { return r.str() == "abc" && r.u8() == 1; }},
    {"output", proto::msg::output, proto::writer(proto::msg::output, 5).u8(2).str(data).finish(),
     [data](proto::reader& r) { return r.u8() == 2 && r.str() == data; }},
    {"started", proto::msg::started, proto::writer(proto::msg::started, 5).i32(4242).finish(),
     [](proto::reader& r) { return r.i32() == 4242; }},
    {"exec_failed", proto::msg::exec_failed,
     proto::writer(proto::msg::exec_failed, 5).str("fork: EAGAIN").finish(),
     [](proto::reader& r) { return r.str() == "fork: EAGAIN"; }},
    {"failed", proto::msg::failed,
     proto::writer(proto::msg::failed, 5).str("mount overlay /x: EINVAL").finish(),
     [](proto::reader& r) { return r.str() == "mount overlay /x: EINVAL"; }},
    {"signal_done", proto::msg::signal_done,
     proto::writer(proto::msg::signal_done, 5).i32(3).finish(),
     [](proto::reader& r) { return r.i32() == 3; }},
    {"u64 and f64", proto::msg::done,
     proto::writer(proto::msg::done, 5).u64(~0ull).f64(-2.5).u32(7).finish(),
     [](proto::reader& r) { return r.u64() == ~0ull && r.f64() == -2.5 && r.u32() == 7; }},
  };
  for (auto& r : rows) {
    INFO(r.name);
    auto body = body_of(r.frame, r.type, 5);
    proto::reader rd(body);
    CHECK(r.read(rd));
    CHECK(rd.done());
    if (body.empty())
      continue;
    // Cut short: the same reads fail and say so, whatever they returned.
    proto::reader cut(std::string_view(body).substr(0, body.size() - 1));
    (void)r.read(cut);
    CHECK_FALSE(cut.ok());
  }
}

TEST_CASE("init protocol: headers and lying lengths", "[init][protocol]") {
  proto::header h;
  // A body larger than max_body is invalid as soon as the header is in.
  auto huge = proto::writer(proto::msg::exec, 1).finish();
  uint32_t len = proto::max_body + 1;
  std::memcpy(&huge[0], &len, 4);
  CHECK(proto::peek_frame(huge, h) == proto::parse::invalid);
  // Exactly max_body is allowed (and incomplete until it arrives).
  len = proto::max_body;
  std::memcpy(&huge[0], &len, 4);
  CHECK(proto::peek_frame(huge, h) == proto::parse::incomplete);
  // Two frames back to back: the first is found on its own.
  auto two = proto::writer(proto::msg::started, 1).i32(7).finish() +
             proto::writer(proto::msg::kill, 2).finish();
  REQUIRE(proto::peek_frame(two, h) == proto::parse::complete);
  CHECK(h.length == 4);
  CHECK(h.id == 1);

  // A string or list whose count exceeds what is left fails before it
  // allocates for it.
  struct lie {
    const char* name;
    std::string body;
    std::function<void(proto::reader&)> read;
  };
  std::vector<lie> lies = {
    {"string longer than the body", proto::writer(proto::msg::failed, 1).u32(100).finish(),
     [](proto::reader& r) { (void)r.str(); }},
    {"list of 2^30 strings", proto::writer(proto::msg::exec, 1).u32(1u << 30).finish(),
     [](proto::reader& r) { (void)r.strs(); }},
    {"list above its cap", proto::writer(proto::msg::exec, 1).strs({"a", "b", "c"}).finish(),
     [](proto::reader& r) { (void)r.strs(2); }},
  };
  for (auto& l : lies) {
    INFO(l.name);
    proto::reader r(std::string_view(l.body).substr(proto::header_size));
    l.read(r);
    CHECK_FALSE(r.ok());
    // Once failed, every later read yields zero values.
    CHECK(r.u32() == 0);
    CHECK(r.str().empty());
  }
}

TEST_CASE("init protocol: seccomp program shape", "[init][protocol]") {
  struct row {
    size_t bytes;
    bool ok;
  };
  for (auto r : std::vector<row>{{0, false},
                                 {7, false},
                                 {8, true},
                                 {8 * proto::max_filter_insns, true},
                                 {8 * proto::max_filter_insns + 4, false},
                                 {8 * (proto::max_filter_insns + 1), false}}) {
    INFO(r.bytes << " bytes");
    CHECK((proto::filter_shape_error(std::string(r.bytes, '\0')) == nullptr) == r.ok);
  }
}

// -- the version hello ---------------------------------------------------------------

TEST_CASE("init protocol: hello round trip and version agreement", "[init][protocol][hello]") {
  auto frame = proto::encode(proto::hello_msg{7, 3});
  auto body = body_of(frame, proto::msg::hello, 0);
  proto::hello_msg out;
  REQUIRE(proto::decode(body, out));
  CHECK(out.version == 7);
  CHECK(out.min_version == 3);
  check_refusals(frame, [](std::string_view b) {
    proto::hello_msg m;
    return proto::decode(b, m);
  });
  // An inverted or zero range is no hello.
  CHECK_FALSE(proto::decode(body_of(proto::encode(proto::hello_msg{2, 3}), proto::msg::hello, 0),
                            out));
  CHECK_FALSE(proto::decode(body_of(proto::encode(proto::hello_msg{2, 0}), proto::msg::hello, 0),
                            out));

  struct row {
    proto::hello_msg node, init;
    uint32_t agreed; ///< 0: mismatch
  };
  row rows[] = {
    {{2, 1}, {2, 1}, 2}, // this build with itself
    {{2, 1}, {1, 1}, 1}, // an init from before hello
    {{3, 2}, {2, 1}, 2}, // a newer node, an init it still speaks to
    {{2, 1}, {5, 2}, 2}, // a newer init that still speaks the node's version
    {{2, 1}, {5, 3}, 0}, // an init that no longer does
    {{4, 3}, {2, 1}, 0}, // a node that no longer speaks the init's
  };
  for (auto& r : rows) {
    INFO("node v" << r.node.version << " init v" << r.init.version);
    CHECK(proto::agree(r.node, r.init) == r.agreed);
    CHECK(proto::agree(r.init, r.node) == r.agreed);
  }
  CHECK(proto::mismatch_text({2, 1}, {5, 3})
        == "init protocol mismatch: node speaks v2 (v1-v2), init speaks v5 (v3-v5)");
  CHECK(proto::version >= proto::min_version);
}

namespace {

/// How a mismatch names this build's versions: "vN (vMIN-vN)".
std::string node_versions() {
  auto v = std::to_string(proto::version);
  return "v" + v + " (v" + std::to_string(proto::min_version) + "-v" + v + ")";
}

} // namespace

namespace {

/// One end of a socketpair played by a fake init on its own thread.
struct fake_init {
  int node_end = -1, init_end = -1;
  fake_init() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    node_end = sv[0];
    init_end = sv[1];
  }
  ~fake_init() {
    if (init_end >= 0)
      ::close(init_end);
  }
  /// Reads one whole frame (blocking); empty on EOF.
  std::string read_frame() {
    std::string in;
    char buf[4096];
    proto::header h;
    while (proto::peek_frame(in, h) != proto::parse::complete) {
      auto n = ::recv(init_end, buf, sizeof buf, 0);
      if (n <= 0)
        return {};
      in.append(buf, static_cast<size_t>(n));
    }
    return in;
  }
  void send(const std::string& frame) {
    REQUIRE(::send(init_end, frame.data(), frame.size(), MSG_NOSIGNAL)
            == static_cast<ssize_t>(frame.size()));
  }
};

/// A channel on `f`'s node end; its "init" is an eventfd that never fires.
std::shared_ptr<backends::init_channel> channel_on(std::shared_ptr<backends::io_loop> loop,
                                                   fake_init& f,
                                                   std::function<expected<sys::unique_fd>()>
                                                     reconnect = {},
                                                   bool await_hello = true) {
  backends::channel_parts p;
  p.id = "n1.hello";
  p.reap = false;
  p.pidfd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  p.ctl.reset(f.node_end);
  p.reconnect = std::move(reconnect);
  p.await_hello = await_hello;
  return std::make_shared<backends::init_channel>(std::move(loop), std::move(p));
}

} // namespace

TEST_CASE("init channel: the node and init agree on a version at connect",
          "[init][protocol][hello]") {
  auto loop = std::make_shared<backends::io_loop>();

  SECTION("an init of this build") {
    fake_init f;
    std::thread init([&] {
      auto hello = f.read_frame();
      proto::header h;
      REQUIRE(proto::peek_frame(hello, h) == proto::parse::complete);
      CHECK(h.type == proto::msg::hello);
      // A running exec's output may come first (a restarted node).
      f.send(proto::writer(proto::msg::output, 77).u8(1).str("late").finish());
      f.send(proto::encode(proto::hello_msg{}));
    });
    auto ch = channel_on(loop, f);
    auto st = ch->start();
    init.join();
    REQUIRE(st);
    CHECK(ch->protocol_version() == proto::version);
    (void)ch->shut();
  }

  SECTION("an init that speaks only newer versions: the error names both") {
    fake_init f;
    std::thread init([&] {
      (void)f.read_frame();
      f.send(proto::encode(proto::hello_msg{9, 9}));
    });
    auto ch = channel_on(loop, f);
    auto st = ch->start();
    init.join();
    REQUIRE_FALSE(st);
    CHECK(st.err().message.find("init protocol mismatch: node speaks " + node_versions()
                                + ", init speaks v9")
          != std::string::npos);
    CHECK(st.err().message.find("n1.hello") != std::string::npos);
  }

  SECTION("an init of version 1 closes at hello; the node reconnects and speaks v1") {
    fake_init f, again;
    std::thread init([&] {
      (void)f.read_frame(); // hello: unknown to version 1, which drops the connection
      ::close(f.init_end);
      f.init_end = -1;
    });
    bool reconnected = false;
    auto ch = channel_on(loop, f, [&]() -> expected<sys::unique_fd> {
      reconnected = true;
      return sys::unique_fd{again.node_end};
    });
    auto st = ch->start();
    init.join();
    REQUIRE(st);
    CHECK(reconnected);
    CHECK(ch->protocol_version() == 1);
    // No hello on the new connection: version 1 would drop it again.
    pollfd pfd{again.init_end, POLLIN, 0};
    CHECK(::poll(&pfd, 1, 50) == 0);
    (void)ch->shut();
  }

  SECTION("an init of version 1 on a channel that cannot reconnect: a named mismatch") {
    fake_init f;
    std::thread init([&] {
      (void)f.read_frame();
      ::close(f.init_end);
      f.init_end = -1;
    });
    auto ch = channel_on(loop, f);
    auto st = ch->start();
    init.join();
    REQUIRE_FALSE(st);
    CHECK(st.err().message.find("node speaks " + node_versions() + ", init speaks v1 (v1-v1)")
          != std::string::npos);
  }
}

TEST_CASE("init channel: a recovered init answers hello when it runs again",
          "[init][protocol][hello]") {
  auto loop = std::make_shared<backends::io_loop>();
  auto wait_version = [](backends::init_channel& ch, uint32_t want) {
    for (int i = 0; i < 200 && ch.protocol_version() != want; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return ch.protocol_version();
  };

  SECTION("start does not wait (a frozen init); the answer comes later") {
    fake_init f;
    auto ch = channel_on(loop, f, {}, false);
    REQUIRE(ch->start());
    CHECK(ch->protocol_version() == 0);
    auto hello = f.read_frame();
    proto::header h;
    REQUIRE(proto::peek_frame(hello, h) == proto::parse::complete);
    CHECK(h.type == proto::msg::hello);
    f.send(proto::encode(proto::hello_msg{}));
    CHECK(wait_version(*ch, proto::version) == proto::version);
    (void)ch->shut();
  }

  SECTION("a late mismatch fails every call with both versions") {
    fake_init f;
    auto ch = channel_on(loop, f, {}, false);
    REQUIRE(ch->start());
    (void)f.read_frame();
    f.send(proto::encode(proto::hello_msg{9, 9}));
    std::promise<error> failed;
    // The channel closes once the loop thread read the answer.
    for (int i = 0; i < 200; ++i) {
      if (ch->send_stdin(1, "x", false).err().message.find("mismatch") != std::string::npos)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    exec_request req;
    req.argv = {"true"};
    backends::exec_callbacks cb;
    cb.on_done = [&](expected<exec_result> r) { failed.set_value(r.err()); };
    ch->exec(std::move(req), std::move(cb));
    auto err = failed.get_future().get();
    CHECK(err.message.find("init protocol mismatch: node speaks " + node_versions()
                           + ", init speaks v9")
          != std::string::npos);
    (void)ch->shut();
  }

  SECTION("a version 1 init closes at hello: reconnected, spoken to in v1") {
    fake_init f, again;
    auto ch = channel_on(loop, f, [&]() -> expected<sys::unique_fd> {
      return sys::unique_fd{again.node_end};
    }, false);
    REQUIRE(ch->start());
    (void)f.read_frame();
    ::close(f.init_end);
    f.init_end = -1;
    CHECK(wait_version(*ch, 1) == 1);
    pollfd pfd{again.init_end, POLLIN, 0};
    CHECK(::poll(&pfd, 1, 50) == 0); // no hello on the new connection
    (void)ch->shut();
  }
}

TEST_CASE("init protocol: a session shell's exec carries unbounded_output", "[init][protocol]") {
  // Issue 26 part 2: after `user` (present, maybe empty); absent otherwise.
  for (std::string user : {"", "1000:1000"}) {
    proto::exec_msg m;
    m.argv = {"/bin/bash"};
    m.keep_stdin = 1;
    m.user = user;
    m.unbounded_output = 1;
    proto::exec_msg out;
    REQUIRE(proto::decode(body_of(proto::encode(7, m), proto::msg::exec, 7), out));
    CHECK(out.user == user);
    CHECK(out.unbounded_output == 1);
    m.unbounded_output = 0;
    proto::exec_msg plain;
    REQUIRE(proto::decode(body_of(proto::encode(7, m), proto::msg::exec, 7), plain));
    CHECK(plain.unbounded_output == 0);
  }
}
