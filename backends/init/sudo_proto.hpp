// `sudo` without setuid (issue 27): the wire between the sandbox's `sudo`
// (backends/init/sudo_client.cpp, the static dsec-sudo binary that the
// toolkit/e2b-sudo layer installs as /usr/bin/sudo) and dsec-init
// (backends/init/sudo.cpp), and who may use it.
//
// Why not the real sudo: every process of a sandbox has no_new_privs, and
// root there is uid 0 with no capabilities at all (setup.cpp: SECBIT_NOROOT
// locked, empty bounding set). Even without no_new_privs a setuid sudo would
// get euid 0 and no CAP_SETGID, so its setgroups/setresgid fail. Instead,
// init (which keeps CAP_SETUID/CAP_SETGID permitted for execs as another
// user) listens on a SOCK_SEQPACKET socket at sudo_socket_path, only in a
// sandbox whose root has sudo_policy_path when init starts. A client sends
// one request (target user, cwd, argv, env) with its stdin, stdout and
// stderr as SCM_RIGHTS; init checks the peer's uid (SO_PEERCRED, taken by
// the kernel at connect) against the policy at accept, before it reads a
// byte from the peer, and starts the command exactly as an exec of the node
// would (spawn.cpp): same filter, same empty capability sets, same cgroups.
// So a permitted user gets what root in the sandbox already has, nothing
// more; anyone else gets a refusal and nothing parsed.
//
// Messages (each one SOCK_SEQPACKET record):
//   client -> init   request: "dsec-sudo 1\0" user\0 cwd\0 argc\0 argv...\0 envc\0 env...\0
//                    (with exactly 3 descriptors), then any number of
//                    signals: "S" decimal-signo
//   init -> client   "E" message (refused or failed; init then closes), or
//                    "X" decimal wait status (the command ended).
// Pure and header-only: init, the client and the unit test share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/init/exec_user.hpp"

namespace dsec::init::sudo_proto {

/// Where init listens: on the sandbox's own /dev tmpfs (per sandbox, never
/// in a layer or a snapshot).
constexpr const char* sudo_socket_path = "/dev/dsec-sudo";
/// Who may use sudo: one user name (or uid) per line, `#` comments. Root may
/// always. Root-owned in the layer, so only root can change it.
constexpr const char* sudo_policy_path = "/etc/dsec/sudo-users";
/// First field of a request: names the protocol and its version.
constexpr std::string_view magic = "dsec-sudo 1";
/// Largest request (argv and env together). A seqpacket record must fit the
/// socket buffer (about 208 KiB by default); real sudo's limit is ARG_MAX,
/// but a sudo'd command line past this is refused with this number.
constexpr size_t max_request = 128u << 10;
/// Most argv or env entries in a request.
constexpr size_t max_entries = 8192;
/// Concurrent sudo commands init serves; more are refused (each holds fds).
constexpr size_t max_sessions = 64;
/// The PATH of a sudo'd command (Debian's sudoers secure_path).
constexpr const char* secure_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One request.
struct request {
  std::string user; ///< exec_user.hpp spec; "" = root
  std::string cwd;
  std::vector<std::string> argv, env;
};

inline void put(std::string& out, std::string_view s) {
  out.append(s);
  out.push_back('\0');
}

inline std::string encode(const request& r) {
  std::string out;
  put(out, magic);
  put(out, r.user);
  put(out, r.cwd);
  put(out, std::to_string(r.argv.size()));
  for (auto& a : r.argv)
    put(out, a);
  put(out, std::to_string(r.env.size()));
  for (auto& e : r.env)
    put(out, e);
  return out;
}

/// Parses a request; "" or what is wrong with it.
inline std::string decode(std::string_view in, request& r) {
  r = request{};
  if (in.size() > max_request)
    return "request larger than " + std::to_string(max_request) + " bytes";
  if (in.empty() || in.back() != '\0')
    return "request is not NUL-terminated";
  auto next = [&in](std::string& out) {
    auto z = in.find('\0');
    if (z == std::string_view::npos)
      return false;
    out.assign(in.substr(0, z));
    in.remove_prefix(z + 1);
    return true;
  };
  auto count = [&next](size_t& n) {
    std::string s;
    uint32_t v = 0;
    if (!next(s) || !user_detail::parse_id(s, v) || v > max_entries)
      return false;
    n = v;
    return true;
  };
  std::string m;
  if (!next(m) || m != magic)
    return "not a dsec-sudo 1 request (a sudo of another dsec version?)";
  size_t n = 0;
  if (!next(r.user) || !next(r.cwd) || !count(n))
    return "request truncated before argv";
  if (n == 0)
    return "request has no command";
  r.argv.resize(n);
  for (auto& a : r.argv)
    if (!next(a))
      return "request truncated in argv";
  if (r.argv[0].empty())
    return "request has an empty command name";
  if (!count(n))
    return "request truncated before env";
  r.env.resize(n);
  for (auto& e : r.env)
    if (!next(e))
      return "request truncated in env";
  if (!in.empty())
    return "request has bytes after env";
  if (r.cwd.empty() || r.cwd[0] != '/')
    return "request cwd is not absolute";
  return {};
}

/// The signals a client forwards to its command (what a terminal or a
/// `kill` of the sudo process would send); others are refused.
inline bool forwardable(int signo) {
  switch (signo) {
  case 1: case 2: case 3: case 10: case 12: case 15: case 28: // HUP INT QUIT USR1 USR2 TERM WINCH
    return true;
  default:
    return false;
  }
}

/// Whether `uid` may use sudo under `policy` (sudo_policy_path's text) with
/// the sandbox's `passwd`: "" if so, else why not.
inline std::string refusal(uint32_t uid, std::string_view policy, std::string_view passwd) {
  if (uid == 0)
    return {};
  bool allowed = false;
  user_detail::each_line(policy, [&](std::string_view line) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t'))
      line.remove_prefix(1);
    if (line.empty() || line[0] == '#')
      return false;
    uint32_t id = 0;
    if (user_detail::parse_id(line, id)) {
      allowed = id == uid;
      return allowed;
    }
    user_detail::each_line(passwd, [&](std::string_view entry) {
      uint32_t u = 0;
      if (user_detail::field(entry, 0) == line && user_detail::parse_id(user_detail::field(entry, 2), u))
        allowed = u == uid;
      return allowed;
    });
    return allowed;
  });
  if (allowed)
    return {};
  return "uid " + std::to_string(uid) + " may not use sudo in this sandbox (not listed in "
         + sudo_policy_path + ")";
}

} // namespace dsec::init::sudo_proto
