// dsec-sudo: the sandbox's `sudo` (installed as /usr/bin/sudo by the
// toolkit/e2b-sudo layer; sudo_proto.hpp says why it is not the real one).
// It takes sudo's usual options, builds the command's environment as
// Debian's sudo does (env_reset, secure_path, HOME and USER of the target),
// sends the request with its own stdin, stdout and stderr to dsec-init, and
// waits: the command writes straight to those descriptors, signals sent to
// this process (Ctrl-C at a terminal, a kill) go on to the command's process
// group, and this process ends as the command did (its exit code, or the
// same signal). There are no passwords: a user the sandbox's policy names
// may, anyone else is refused by init. Options it does not implement are
// refused by name, never ignored.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/init/sudo_proto.hpp"

extern char** environ;

namespace {

namespace sp = dsec::init::sudo_proto;
using dsec::init::user_detail::field;
using dsec::init::user_detail::each_line;
using dsec::init::user_detail::parse_id;

constexpr const char* usage =
  "usage: sudo [-nSEHk] [-u user] [-g group] [--preserve-env=list] [VAR=value]... command [arg]...\n"
  "       sudo [-nSEHk] [-u user] [-g group] -i|-s [command [arg]...]\n"
  "       sudo -v | -k | -K | -V | -h\n"
  "dsec's sudo: asks dsec-init to run the command; no passwords (users listed in\n"
  "/etc/dsec/sudo-users may run anything as anyone, root always may).\n";

[[noreturn]] void die(const std::string& m, int code = 1) {
  std::fprintf(stderr, "sudo: %s\n", m.c_str());
  std::exit(code);
}

std::string read_file(const char* path) {
  std::string out;
  if (FILE* f = std::fopen(path, "re")) {
    char buf[8192];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && out.size() < (4u << 20))
      out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

/// A passwd entry by name or uid: name, home, shell ("" if none).
struct account {
  std::string name, home, shell;
  uint32_t uid = 0;
  bool found = false;
};

account lookup(std::string_view passwd, std::string_view who, bool by_uid, uint32_t uid) {
  account a;
  each_line(passwd, [&](std::string_view line) {
    uint32_t u = 0;
    if (!parse_id(field(line, 2), u) || (by_uid ? u != uid : field(line, 0) != who))
      return false;
    a = {std::string(field(line, 0)), std::string(field(line, 5)), std::string(field(line, 6)), u, true};
    return true;
  });
  return a;
}

/// sudo's escaping for -i and -s: every character but letters, digits,
/// '_', '-' and '$' gets a backslash, arguments joined by spaces.
std::string escaped(const std::vector<std::string>& args) {
  std::string out;
  for (auto& a : args) {
    if (!out.empty())
      out.push_back(' ');
    for (char c : a) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '$')
        out.push_back('\\');
      out.push_back(c);
    }
  }
  return out;
}

/// The command's path by secure_path (sudo resolves before it runs anything).
std::string resolve(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos)
    return cmd;
  std::string path = sp::secure_path;
  size_t start = 0;
  for (;;) {
    auto colon = path.find(':', start);
    auto dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    auto cand = (dir.empty() ? std::string{"."} : dir) + "/" + cmd;
    if (::access(cand.c_str(), X_OK) == 0)
      return cand;
    if (colon == std::string::npos)
      break;
    start = colon + 1;
  }
  die(cmd + ": command not found");
}

struct options {
  std::string user, group;
  bool login = false, shell = false, preserve = false, set_home = false;
  std::vector<std::string> preserve_list, assignments, command;
};

options parse(int argc, char** argv) {
  options o;
  bool only_cache_op = false; // -v, -k, -K alone
  int i = 1;
  auto value = [&](const char* opt, const char* rest) -> std::string {
    if (*rest)
      return rest;
    if (i + 1 >= argc)
      die(std::string("option ") + opt + " requires an argument\n" + usage);
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-')
      break;
    if (a.rfind("--", 0) == 0) {
      auto eq = a.find('=');
      auto name = a.substr(0, eq);
      auto val = eq == std::string::npos ? std::string{} : a.substr(eq + 1);
      if (name == "--user" || name == "--group") {
        if (eq == std::string::npos) {
          if (i + 1 >= argc)
            die(name + " requires an argument");
          val = argv[++i];
        }
        (name == "--user" ? o.user : o.group) = val;
      } else if (name == "--preserve-env") {
        if (eq == std::string::npos)
          o.preserve = true;
        else
          for (size_t s = 0; s <= val.size();) {
            auto c = val.find(',', s);
            auto v = val.substr(s, c == std::string::npos ? std::string::npos : c - s);
            if (!v.empty())
              o.preserve_list.push_back(v);
            s = c == std::string::npos ? val.size() + 1 : c + 1;
          }
      } else if (name == "--login") {
        o.login = true;
      } else if (name == "--shell") {
        o.shell = true;
      } else if (name == "--set-home") {
        o.set_home = true;
      } else if (name == "--non-interactive" || name == "--stdin") {
        // Nothing to do: dsec's sudo never asks for a password.
      } else if (name == "--reset-timestamp" || name == "--remove-timestamp" || name == "--validate") {
        only_cache_op = true;
      } else if (name == "--help") {
        std::fputs(usage, stdout);
        std::exit(0);
      } else if (name == "--version") {
        std::puts("dsec sudo 1 (dsec-init's sudo: no setuid, no sudoers, no passwords)");
        std::exit(0);
      } else {
        die("option " + name + " is not supported by dsec's sudo\n" + usage);
      }
      continue;
    }
    for (size_t k = 1; k < a.size(); ++k) {
      char c = a[k];
      const char* rest = argv[i] + k + 1;
      switch (c) {
      case 'n': case 'S': break; // no password is ever asked
      case 'E': o.preserve = true; break;
      case 'H': o.set_home = true; break;
      case 'i': o.login = true; break;
      case 's': o.shell = true; break;
      case 'k': case 'K': case 'v': only_cache_op = true; break; // no credential cache to touch
      case 'u': o.user = value("-u", rest); k = a.size(); break;
      case 'g': o.group = value("-g", rest); k = a.size(); break;
      case 'h': std::fputs(usage, stdout); std::exit(0);
      case 'V': std::puts("dsec sudo 1 (dsec-init's sudo: no setuid, no sudoers, no passwords)"); std::exit(0);
      default:
        die(std::string("option -") + c + " is not supported by dsec's sudo\n" + usage);
      }
    }
  }
  for (; i < argc && std::strchr(argv[i], '=') && argv[i][0] != '=' && o.command.empty(); ++i)
    o.assignments.push_back(argv[i]);
  for (; i < argc; ++i)
    o.command.push_back(argv[i]);
  if (o.login && o.shell)
    die("you may not specify both the -i and -s options");
  if (o.command.empty() && !o.login && !o.shell) {
    if (only_cache_op)
      std::exit(0);
    std::fputs(usage, stderr);
    std::exit(1);
  }
  return o;
}

bool kept_by_reset(const std::string& entry, const std::vector<std::string>& extra) {
  auto name = entry.substr(0, entry.find('='));
  static const char* keep[] = {"TERM", "COLORTERM", "DISPLAY", "XAUTHORITY", "LANG", "LANGUAGE",
                               "TZ", "COLORS", "LS_COLORS"};
  for (auto k : keep)
    if (name == k)
      return true;
  if (name.rfind("LC_", 0) == 0)
    return true;
  for (auto& e : extra)
    if (name == e)
      return true;
  return false;
}

void set_env(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  for (auto& e : env)
    if (e.compare(0, name.size() + 1, name + "=") == 0) {
      e = name + "=" + value;
      return;
    }
  env.push_back(name + "=" + value);
}

sp::request build(const options& o) {
  auto passwd = read_file("/etc/passwd");
  auto me = lookup(passwd, {}, true, ::getuid());
  account target;
  if (o.user.empty()) {
    target = lookup(passwd, {}, true, 0);
    if (!target.found)
      target = {"root", "/root", "/bin/sh", 0, true};
  } else {
    uint32_t id = 0;
    bool numeric = o.user[0] == '#' && parse_id(o.user.substr(1), id);
    target = numeric ? lookup(passwd, {}, true, id) : lookup(passwd, o.user, false, 0);
    if (!target.found && !numeric)
      die("unknown user " + o.user);
    if (!target.found)
      target = {std::to_string(id), "/", "/bin/sh", id, true};
  }
  sp::request r;
  r.user = std::to_string(target.uid);
  if (!o.group.empty())
    r.user += ":" + (o.group[0] == '#' ? o.group.substr(1) : o.group);
  else if (!o.user.empty() && o.user[0] != '#')
    r.user = o.user;
  char cwd[4096];
  r.cwd = ::getcwd(cwd, sizeof cwd) ? cwd : "/";
  auto shell = target.shell.empty() ? std::string{"/bin/sh"} : target.shell;
  if (o.login) {
    r.cwd = target.home.empty() ? "/" : target.home;
    r.argv = {shell, "-l"};
  } else if (o.shell) {
    const char* s = std::getenv("SHELL");
    r.argv = {s && *s ? s : shell};
  }
  if (o.login || o.shell) {
    if (!o.command.empty()) {
      r.argv.push_back("-c");
      r.argv.push_back(escaped(o.command));
    }
  } else {
    r.argv = o.command;
    r.argv[0] = resolve(o.command[0]);
  }
  // env_reset (Debian's default), or everything with -E.
  for (char** e = environ; *e; ++e)
    if (o.preserve || kept_by_reset(*e, o.preserve_list))
      r.env.push_back(*e);
  set_env(r.env, "PATH", sp::secure_path);
  if (!o.preserve || o.set_home || o.login)
    set_env(r.env, "HOME", target.home.empty() ? "/" : target.home);
  set_env(r.env, "SHELL", shell);
  set_env(r.env, "USER", target.name);
  set_env(r.env, "LOGNAME", target.name);
  set_env(r.env, "MAIL", "/var/mail/" + target.name);
  set_env(r.env, "SUDO_USER", me.found ? me.name : std::to_string(::getuid()));
  set_env(r.env, "SUDO_UID", std::to_string(::getuid()));
  set_env(r.env, "SUDO_GID", std::to_string(::getgid()));
  std::string cmd;
  for (auto& a : o.command)
    cmd += (cmd.empty() ? "" : " ") + a;
  set_env(r.env, "SUDO_COMMAND", (o.login || o.shell ? shell : r.argv[0]) + (cmd.empty() ? "" : " ") + cmd.substr(0, 4096));
  for (auto& a : o.assignments)
    set_env(r.env, a.substr(0, a.find('=')), a.substr(a.find('=') + 1));
  return r;
}

[[noreturn]] void end_as(int status) {
  if (WIFEXITED(status))
    std::exit(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    ::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::raise(sig);
    std::exit(128 + sig);
  }
  std::exit(1);
}

} // namespace

int main(int argc, char** argv) {
  auto o = parse(argc, argv);
  auto req = sp::encode(build(o));
  if (req.size() > sp::max_request)
    die("command line and environment exceed " + std::to_string(sp::max_request) + " bytes");
  int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0)
    die(std::string("socket: ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sp::sudo_socket_path, sizeof(addr.sun_path) - 1);
  if (::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    die(std::string("this sandbox offers no sudo: connect ") + sp::sudo_socket_path + ": "
        + std::strerror(errno) + " (dsec-init offers it where " + sp::sudo_policy_path
        + " exists when the sandbox starts)");
  // Signals for the command are read from a signalfd, never delivered here.
  sigset_t fwd;
  sigemptyset(&fwd);
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGTERM, SIGWINCH})
    sigaddset(&fwd, sig);
  ::sigprocmask(SIG_BLOCK, &fwd, nullptr);
  int sfd = ::signalfd(-1, &fwd, SFD_CLOEXEC);
  int fds[3] = {0, 1, 2};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{req.data(), req.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  // A refused peer finds init's answer waiting and the socket closed, so a
  // failed send is read past: the answer says why.
  (void)::sendmsg(s, &mh, MSG_NOSIGNAL);
  static char buf[4096];
  for (;;) {
    pollfd p[2] = {{s, POLLIN, 0}, {sfd, POLLIN, 0}};
    if (::poll(p, sfd >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR)
        continue;
      die(std::string("poll: ") + std::strerror(errno));
    }
    if (sfd >= 0 && (p[1].revents & POLLIN)) {
      signalfd_siginfo si;
      while (::read(sfd, &si, sizeof si) == ssize_t(sizeof si)) {
        auto m = "S" + std::to_string(si.ssi_signo);
        (void)::send(s, m.data(), m.size(), MSG_NOSIGNAL);
        break;
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      auto n = ::recv(s, buf, sizeof buf - 1, 0);
      // ECONNRESET: init refused us and closed with our request unread; its
      // answer is still queued behind the (now cleared) error.
      if (n < 0 && (errno == EINTR || errno == ECONNRESET))
        continue;
      if (n <= 0)
        die("dsec-init closed the connection before the command ended");
      buf[n] = 0;
      if (buf[0] == 'E') {
        std::fprintf(stderr, "%s\n", buf + 1);
        return 1;
      }
      uint32_t status = 0;
      if (buf[0] == 'X' && parse_id(std::string_view(buf + 1, size_t(n) - 1), status))
        end_as(int(status));
      die("unexpected answer from dsec-init");
    }
  }
}
