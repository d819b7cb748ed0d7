// The control channel between a node and the in-sandbox init (dsec-init): one
// unix stream socket carrying length-prefixed binary frames. Shared by both
// ends, so it is header-only, exception-free and allocation-light (init is a
// small static binary).
//
// A frame is a 9-byte header, little-endian: u32 body length, u8 type, u32
// request id; then `length` bytes of body. Bodies are sequences of fields:
// u8/u32/i32/u64/f64 as raw little-endian bytes, a string as u32 length plus
// bytes, a string list as u32 count plus strings. Every read is bounds
// checked: a malformed or oversized frame makes `reader::ok()` false, which
// both ends treat as a broken channel (drop it), never as a crash.
//
// Conversation: the node connects and sends `config` (id 0), which may be
// queued before init even runs; init sets up the sandbox and answers `ready`
// or `failed` (a message naming operation, object and errno). Then the node sends `exec` frames with fresh ids; init answers
// each with any number of `output` frames, then one `done` (or `exec_failed`).
// Init sends `started` (the command's pid inside the sandbox) before any
// output of an exec. `ps` asks for the sandbox's process table (answered by
// one `ps_list`), `signal` signals one process or group (answered by one
// `signal_done` carrying an errno, 0 = sent). A node that restarts
// reconnects; init keeps running execs and sends their frames on the newest
// connection. Wire values are append only; an older init drops a connection
// that sends it a type it does not know, so a node sends `ps`/`signal` only
// for features the user asked for.
//
// Versions (since version 2): at every connect (after `ready` on create, on
// a restarted node's reconnect, on a resumed or cloned guest's channel) the
// node sends `hello` with the versions it speaks and init answers `hello`
// with its own; the node picks the highest both speak (agree()) or fails
// the sandbox with mismatch_text(), naming both. Init never refuses: only
// the node decides. An init of version 1 (every build before hello) does not
// know the frame and closes the connection at it, as it does for any unknown
// frame; a node that can reconnect (a container's listening socket) then
// connects again without hello and speaks version 1 to it. Version 1 is the
// frames config..stdin_data and ready..started as listed below.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace dsec::init_proto {

/// Descriptors a container init starts with besides stdio and the listener
/// (fd 3), when the node hands it the sandbox root (config_msg::attach_root):
/// the detached overlay mount init attaches at `rootfs` in its own mount
/// namespace, and the node's view of the root (a detached clone of the same
/// mount), which init holds untouched for the whole sandbox life so that a
/// restarted node can take it back with pidfd_getfd.
constexpr int root_mount_fd = 4;
constexpr int root_view_fd = 5;
static_assert(root_view_fd == root_mount_fd + 1, "launch_init closes from root_view_fd + 1");
/// With config_msg::shared_sysfs: the node's detached read-only sysfs tree
/// (a template network namespace's, masks included), which init clones onto
/// /sys and closes during setup.
constexpr int sysfs_tree_fd = 6;
static_assert(sysfs_tree_fd == root_view_fd + 1, "launch_init closes from sysfs_tree_fd + 1");

/// The version of this protocol this build speaks (see the opening comment).
/// Bump it when a peer of the previous version would misread a frame.
constexpr uint32_t version = 4;
/// The oldest version this build still speaks to: version 1 inits lack only
/// hello, which the node then does not send.
constexpr uint32_t min_version = 1;

/// Frame types. Append only.
enum class msg : uint8_t {
  // node -> init
  config = 1, ///< hostname, rootfs path (host view), seccomp program; ready/failed
  exec = 2,   ///< argv, env, cwd, stdin, timeout_ms
  kill = 3,   ///< SIGKILL the process group of request `id`
  ps = 4,     ///< list the sandbox's processes; answered by ps_list
  signal = 5, ///< i32 pid, i32 signo, u8 group; answered by signal_done
  stdin_data = 6, ///< string data, u8 close: more stdin for exec `id` (keep_stdin),
                  ///< then EOF if close; no answer
  hello = 7,      ///< hello_msg (id 0) both ways: the node's, answered by init's
  // init -> node
  ready = 10,       ///< setup done; body: init's pid-ns view of nothing (empty)
  failed = 11,      ///< setup failed; body: message
  output = 12,      ///< u8 stream (1 stdout, 2 stderr), string data
  done = 13,        ///< i32 exit code, u8 timed_out, u8 truncated, f64 duration ms
  exec_failed = 14, ///< message (fork/pipe failure inside init)
  ps_list = 15,     ///< u32 count, then per process: see proc_entry
  signal_done = 16, ///< i32 errno of kill(2), 0 = delivered
  started = 17,     ///< i32 pid of the exec's command, as the sandbox sees it
  exec_refused = 18, ///< message: the request cannot run in this sandbox as
                     ///< asked (its user is unknown there); nothing started
  // node -> init, terminals (backends/channel/pty_proto.hpp); answered as
  // an exec is (started, output on stream 1, done)
  pty_open = 30,   ///< u16 cols, u16 rows, then an exec body (argv may be empty:
                   ///< the user's login shell); runs on a new pty
  pty_resize = 31, ///< u16 cols, u16 rows for the pty of request `id`; no answer
  // -- ports (issue 26 part 3): byte streams to TCP ports inside the
  // sandbox, one per frame id (backends/init/ports.cpp,
  // backends/channel/init_channel_ports.cpp). Values from 40 on, apart
  // from other features' frames. Each side sends port_close once, when its
  // direction ends; the stream is gone when both did, or at once on an
  // errno. Only a node that opened a stream sends these.
  port_open = 40,   ///< node -> init: u32 port; init connects to 127.0.0.1:port
                    ///< inside, answers port_opened or port_close(errno)
  port_data = 41,   ///< both ways: string data of stream `id`
  port_close = 42,  ///< both ways: i32 errno; 0 = the sender's direction ended
  port_opened = 43, ///< init -> node: the connection is up
  // Version 3: flow control of port streams. A node speaking version 3 adds
  // u32 window to port_open; then neither side has more than `window` bytes
  // of a stream sent and not yet acknowledged, and each acknowledges the
  // bytes it wrote to its socket. A slow reader on either end stops the
  // sender instead of filling the other side's memory.
  port_ack = 44, ///< both ways: u32 bytes of stream `id` written on since the last ack
  // -- Version 4: the CPU time of the whole sandbox as its own kernel counts it: a VM
  // guest's /proc/stat, since the emulator's CPU is not the guest's (an idle
  // TCG guest costs its QEMU a few per cent of a core). Read by the idle
  // policy and reclaim (actors/sandbox_idle.hpp). A container's /proc/stat
  // is the host's: the node asks guests only, and only inits of version 4.
  cpu_query = 50, ///< node -> init, no body; answered by cpu_time
  cpu_time = 51,  ///< init -> node: u64 busy ns (user, nice, system, irq,
                  ///< softirq and steal of /proc/stat's "cpu" line)
};

/// The window a version 3 node gives port streams.
constexpr uint32_t port_window = 256 * 1024;

/// True for the frames of port streams (both directions).
inline bool is_port_frame(msg t) {
  return t == msg::port_open || t == msg::port_data || t == msg::port_close
         || t == msg::port_opened || t == msg::port_ack;
}

/// Header size on the wire.
constexpr size_t header_size = 9;
/// Largest body accepted. Bounds memory per frame; stdin of one exec must fit
/// (the node refuses larger stdin with too_large).
constexpr uint32_t max_body = 64u << 20;
/// Output bytes per stream per exec kept by init; beyond it output is dropped
/// and the result says truncated.
constexpr size_t max_output = 16u << 20;
/// Largest output chunk init sends at once (one pipe read).
constexpr size_t max_chunk = 64u << 10;
/// Size of one classic BPF instruction (`struct sock_filter`) on the wire.
constexpr size_t filter_insn_size = 8;
/// Most instructions a seccomp program may have (the kernel's BPF_MAXINSNS).
constexpr size_t max_filter_insns = 4096;

/// Builds one frame in a byte string.
class writer {
 public:
  writer(msg type, uint32_t id) {
    buf_.resize(header_size);
    buf_[4] = static_cast<char>(type);
    std::memcpy(&buf_[5], &id, 4);
  }
  writer& u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); return *this; }
  writer& u32(uint32_t v) { return raw(&v, 4); }
  writer& i32(int32_t v) { return raw(&v, 4); }
  writer& u64(uint64_t v) { return raw(&v, 8); }
  writer& f64(double v) { return raw(&v, 8); }
  writer& str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    buf_.append(s.data(), s.size());
    return *this;
  }
  writer& strs(const std::vector<std::string>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (auto& s : v)
      str(s);
    return *this;
  }
  /// The finished frame (header length filled in).
  std::string finish() {
    uint32_t len = static_cast<uint32_t>(buf_.size() - header_size);
    std::memcpy(&buf_[0], &len, 4);
    return std::move(buf_);
  }

 private:
  writer& raw(const void* p, size_t n) {
    buf_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string buf_;
};

/// A parsed frame header.
struct header {
  uint32_t length = 0;
  msg type = msg::config;
  uint32_t id = 0;
};

/// Result of looking for one frame at the front of a buffer.
enum class parse { incomplete, complete, invalid };

/// Checks whether `buf` starts with a whole frame; fills `h` when it does.
inline parse peek_frame(std::string_view buf, header& h) {
  if (buf.size() < header_size)
    return parse::incomplete;
  std::memcpy(&h.length, buf.data(), 4);
  h.type = static_cast<msg>(static_cast<uint8_t>(buf[4]));
  std::memcpy(&h.id, buf.data() + 5, 4);
  if (h.length > max_body)
    return parse::invalid;
  return buf.size() - header_size >= h.length ? parse::complete : parse::incomplete;
}

/// Reads fields of one body; any overrun sets the failed state and yields
/// zero values, so callers check ok() once at the end.
class reader {
 public:
  explicit reader(std::string_view body) : p_(body) {}
  uint8_t u8() { uint8_t v = 0; raw(&v, 1); return v; }
  uint32_t u32() { uint32_t v = 0; raw(&v, 4); return v; }
  int32_t i32() { int32_t v = 0; raw(&v, 4); return v; }
  uint64_t u64() { uint64_t v = 0; raw(&v, 8); return v; }
  double f64() { double v = 0; raw(&v, 8); return v; }
  std::string str() {
    auto n = u32();
    if (!ok_ || n > p_.size()) {
      ok_ = false;
      return {};
    }
    std::string s(p_.substr(0, n));
    p_.remove_prefix(n);
    return s;
  }
  /// A list of at most `max_items` strings.
  std::vector<std::string> strs(uint32_t max_items = 1u << 16) {
    auto n = u32();
    std::vector<std::string> v;
    // Each string needs at least 4 bytes: a lying count fails here, before
    // any allocation proportional to it.
    if (!ok_ || n > max_items || n > p_.size() / 4) {
      ok_ = false;
      return v;
    }
    v.reserve(n);
    for (uint32_t i = 0; i < n && ok_; ++i)
      v.push_back(str());
    return v;
  }
  /// True if every read so far was in bounds.
  [[nodiscard]] bool ok() const { return ok_; }
  /// True if all was read and in bounds (no trailing garbage).
  [[nodiscard]] bool done() const { return ok_ && p_.empty(); }

 private:
  void raw(void* out, size_t n) {
    if (!ok_ || p_.size() < n) {
      ok_ = false;
      return;
    }
    std::memcpy(out, p_.data(), n);
    p_.remove_prefix(n);
  }
  std::string_view p_;
  bool ok_ = true;
};

/// Body of `config`.
struct config_msg {
  std::string hostname;
  std::string rootfs; ///< absolute host path of the merged root, in init's mount ns
  /// The seccomp filter as raw `struct sock_filter` array, compiled once by
  /// the node; init refuses to start without a well-formed one.
  std::string seccomp_bpf;
  /// Paths inside the root made read-only (recursively) for everything in the
  /// sandbox, and paths covered by an empty read-only mount.
  std::vector<std::string> readonly;
  std::vector<std::string> hidden;
  /// True: the root is not mounted yet; init attaches the detached mount at
  /// root_mount_fd on `rootfs` itself, inside its new mount namespace, after
  /// making every mount there private. False (VM guests): `rootfs` is
  /// already a mount.
  bool attach_root = false;
  /// With attach_root: init was cloned from the node's launch template (a
  /// mount namespace holding only an empty read-only root), so it attaches
  /// the root on "/" and chroots into it; `rootfs` is not used. False: the
  /// root goes on `rootfs` and init pivots into it.
  bool in_template = false;
  /// With attach_root: /sys is a clone of sysfs_tree_fd instead of a new
  /// sysfs mount.
  bool shared_sysfs = false;
};

/// Body of `exec`.
struct exec_msg {
  std::vector<std::string> argv;
  std::vector<std::string> env; ///< "K=V", already merged by the node
  std::string cwd;
  std::string stdin_data;
  uint64_t timeout_ms = 0; ///< 0 = none
  /// Keep stdin open after stdin_data for `stdin_data` frames.
  uint8_t keep_stdin = 0;
  /// Run as this user (backends/init/exec_user.hpp); empty = root. Sent
  /// only when set, so a frame without it is what a version 2 init reads;
  /// an older init drops a frame that carries it (it cannot honour it).
  std::string user;
  /// No per-stream output cap (max_output) for this exec: a shell session's
  /// shell, whose caller cuts and bounds each run (issue 26 part 2). Sent
  /// after `user` (then always present) only when set: an init that does
  /// not know it drops the frame, so only session opens carry it.
  uint8_t unbounded_output = 0;
};

inline std::string encode(const config_msg& m) {
  return writer(msg::config, 0)
    .str(m.hostname)
    .str(m.rootfs)
    .str(m.seccomp_bpf)
    .strs(m.readonly)
    .strs(m.hidden)
    .u8(m.attach_root ? 1 : 0)
    .u8(m.in_template ? 1 : 0)
    .u8(m.shared_sysfs ? 1 : 0)
    .finish();
}

inline bool decode(std::string_view body, config_msg& m) {
  reader r(body);
  m.hostname = r.str();
  m.rootfs = r.str();
  m.seccomp_bpf = r.str();
  m.readonly = r.strs(256);
  m.hidden = r.strs(256);
  m.attach_root = r.u8() != 0;
  m.in_template = r.u8() != 0;
  m.shared_sysfs = r.u8() != 0;
  return r.done();
}

/// Why `prog` cannot be a seccomp program (empty, not whole instructions,
/// too long), or nullptr if its shape is fine. The kernel checks the rest.
inline const char* filter_shape_error(std::string_view prog) {
  if (prog.empty())
    return "empty program";
  if (prog.size() % filter_insn_size != 0)
    return "not a whole number of instructions";
  if (prog.size() / filter_insn_size > max_filter_insns)
    return "more than 4096 instructions";
  return nullptr;
}

inline std::string encode(uint32_t id, const exec_msg& m) {
  writer w(msg::exec, id);
  w.strs(m.argv).strs(m.env).str(m.cwd).str(m.stdin_data).u64(m.timeout_ms).u8(m.keep_stdin);
  if (!m.user.empty() || m.unbounded_output)
    w.str(m.user);
  if (m.unbounded_output)
    w.u8(m.unbounded_output);
  return w.finish();
}

inline bool decode(std::string_view body, exec_msg& m) {
  reader r(body);
  m.argv = r.strs();
  m.env = r.strs();
  m.cwd = r.str();
  m.stdin_data = r.str();
  m.timeout_ms = r.u64();
  m.keep_stdin = r.u8();
  if (r.ok() && !r.done())
    m.user = r.str();
  if (r.ok() && !r.done())
    m.unbounded_output = r.u8();
  return r.done() && !m.argv.empty();
}

/// Body of `done`.
struct done_msg {
  int32_t exit_code = 0;
  bool timed_out = false;
  bool truncated = false;
  double duration_ms = 0;
};

inline std::string encode(uint32_t id, const done_msg& m) {
  return writer(msg::done, id)
    .i32(m.exit_code).u8(m.timed_out).u8(m.truncated).f64(m.duration_ms)
    .finish();
}

inline bool decode(std::string_view body, done_msg& m) {
  reader r(body);
  m.exit_code = r.i32();
  m.timed_out = r.u8() != 0;
  m.truncated = r.u8() != 0;
  m.duration_ms = r.f64();
  return r.done();
}

/// One process in a `ps_list` body.
struct proc_entry {
  int32_t pid = 0, ppid = 0;
  uint8_t state = 0;     ///< the state letter of /proc/<pid>/stat ('R', 'S', 'Z', ...)
  uint64_t start_ms = 0; ///< Unix time in ms
  std::string comm;      ///< /proc/<pid>/comm
  std::vector<std::string> argv; ///< /proc/<pid>/cmdline split at NUL; empty for zombies
};

/// Most processes one `ps_list` carries, and most bytes of one argv: bounds
/// the frame whatever the sandbox runs.
constexpr size_t max_ps_entries = 8192;
constexpr size_t max_ps_argv_bytes = 4096;

inline std::string encode_ps(uint32_t id, const std::vector<proc_entry>& v) {
  writer w(msg::ps_list, id);
  w.u32(static_cast<uint32_t>(v.size()));
  for (auto& e : v)
    w.i32(e.pid).i32(e.ppid).u8(e.state).u64(e.start_ms).str(e.comm).strs(e.argv);
  return w.finish();
}

inline bool decode_ps(std::string_view body, std::vector<proc_entry>& v) {
  reader r(body);
  auto n = r.u32();
  if (!r.ok() || n > max_ps_entries)
    return false;
  v.clear();
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    proc_entry e;
    e.pid = r.i32();
    e.ppid = r.i32();
    e.state = r.u8();
    e.start_ms = r.u64();
    e.comm = r.str();
    e.argv = r.strs(1024);
    v.push_back(std::move(e));
  }
  return r.done();
}

/// Body of `signal`.
struct signal_msg {
  int32_t pid = 0;
  int32_t signo = 0;
  bool group = false; ///< signal the process group `pid` instead of one process
};

inline std::string encode(uint32_t id, const signal_msg& m) {
  return writer(msg::signal, id).i32(m.pid).i32(m.signo).u8(m.group).finish();
}

inline bool decode(std::string_view body, signal_msg& m) {
  reader r(body);
  m.pid = r.i32();
  m.signo = r.i32();
  m.group = r.u8() != 0;
  return r.done();
}

/// Body of `hello`: the versions one end speaks, oldest to newest.
struct hello_msg {
  uint32_t version = init_proto::version;
  uint32_t min_version = init_proto::min_version;
};

inline std::string encode(const hello_msg& m) {
  return writer(msg::hello, 0).u32(m.version).u32(m.min_version).finish();
}

/// Refuses an inverted range (min_version above version) too.
inline bool decode(std::string_view body, hello_msg& m) {
  reader r(body);
  m.version = r.u32();
  m.min_version = r.u32();
  return r.done() && m.min_version <= m.version && m.min_version >= 1;
}

/// The highest version both ends speak, or 0 if their ranges do not meet.
inline uint32_t agree(const hello_msg& node, const hello_msg& init) {
  uint32_t top = node.version < init.version ? node.version : init.version;
  uint32_t bottom = node.min_version > init.min_version ? node.min_version : init.min_version;
  return bottom <= top ? top : 0;
}

/// The error text of ranges that do not meet, naming both ends' versions:
/// "init protocol mismatch: node speaks v2 (v1-v2), init speaks v3 (v3-v3)".
inline std::string mismatch_text(const hello_msg& node, const hello_msg& init) {
  auto side = [](const char* who, const hello_msg& m) {
    return std::string(who) + " speaks v" + std::to_string(m.version) + " (v"
           + std::to_string(m.min_version) + "-v" + std::to_string(m.version) + ")";
  };
  return "init protocol mismatch: " + side("node", node) + ", " + side("init", init);
}

} // namespace dsec::init_proto
