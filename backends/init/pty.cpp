// Terminals in dsec-init (backends/channel/pty_proto.hpp): a `pty_open`
// request runs its command on a new pseudo-terminal of the sandbox's own
// devpts instance (/dev/pts/ptmx). The command is a session leader with the
// terminal as its controlling tty (spawn.cpp: setsid, then TIOCSCTTY), so a
// shell there has job control, Ctrl-C reaches its foreground job and a
// resize (TIOCSWINSZ on the master) sends it SIGWINCH. The job is an exec
// job (jobs.cpp) whose stdin and stdout are the master: output frames on
// stream 1, stdin_data frames typed at the terminal, `done` when the
// command exited and the terminal hung up. Its output is not capped as an
// exec's is (a terminal runs for hours); the node keeps a bounded scrollback.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "backends/channel/pty_proto.hpp"
#include "backends/init/exec_user.hpp"
#include "backends/init/loop_state.hpp"
#include "backends/init/setup.hpp"
#include "backends/init/spawn.hpp"

namespace dsec::init {

namespace proto = init_proto;
using proto::msg;

namespace {

/// The shell of `uid` in the sandbox's /etc/passwd if it can run it (not
/// nologin or false), else /bin/bash, else /bin/sh; started as a login shell.
std::vector<std::string> login_shell(uint32_t uid) {
  std::string shell;
  user_detail::each_line(read_small_file("/etc/passwd"), [&](std::string_view line) {
    uint32_t u = 0;
    if (!user_detail::parse_id(user_detail::field(line, 2), u) || u != uid)
      return false;
    shell = std::string(user_detail::field(line, 6));
    return true;
  });
  auto usable = [](const std::string& s) {
    return !s.empty() && s[0] == '/' && s.find("nologin") == std::string::npos
           && s.find("/false") == std::string::npos && ::access(s.c_str(), X_OK) == 0;
  };
  if (!usable(shell))
    shell = ::access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
  return {shell, "-l"};
}

/// A new terminal of the sandbox's devpts: the master (non-blocking) and
/// the peer, both close-on-exec; "" or what failed.
std::string open_pty(const proto::pty_size& size, int& master, int& peer) {
  master = ::open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (master < 0)
    return errno_message("open", "/dev/pts/ptmx", errno);
  int unlock = 0;
  winsize ws{};
  ws.ws_col = size.cols;
  ws.ws_row = size.rows;
  if (::ioctl(master, TIOCSPTLCK, &unlock) != 0 || ::ioctl(master, TIOCSWINSZ, &ws) != 0) {
    int e = errno;
    ::close(master);
    return errno_message("ioctl", "pty master", e);
  }
  // TIOCGPTPEER opens the peer through the master, not by a path that
  // something in the sandbox could have replaced.
  peer = ::ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (peer < 0) {
    int e = errno;
    ::close(master);
    return errno_message("open", "pty peer", e);
  }
  return {};
}

void refuse(uint32_t req, msg type, const std::string& why) {
  send_frame(proto::writer(type, req).str(why).finish());
}

} // namespace

void start_pty(uint32_t req, proto::exec_msg m, const proto::pty_size& size) {
  for (auto& [slot, j] : S.jobs)
    if (j.req == req && j.gen == S.gen)
      return refuse(req, msg::exec_failed, "duplicate request id");
  exec_identity who;
  if (!m.user.empty()) {
    auto why = resolve_exec_user(m.user, read_small_file("/etc/passwd"),
                                 read_small_file("/etc/group"), who);
    if (!why.empty())
      return refuse(req, msg::exec_refused, "user \"" + m.user + "\": " + why);
    if (who.uid != 0 && !who.home.empty())
      for (auto& e : m.env)
        if (e == "HOME=/root")
          e = "HOME=" + who.home;
  }
  if (m.argv.empty())
    m.argv = login_shell(who.uid);
  int master = -1, peer = -1;
  if (auto why = open_pty(size, master, peer); !why.empty())
    return refuse(req, msg::exec_failed, why);
  int writer = ::fcntl(master, F_DUPFD_CLOEXEC, 0); // stdin side, watched apart
  if (writer < 0) {
    int e = errno;
    ::close(master);
    ::close(peer);
    return refuse(req, msg::exec_failed, errno_message("dup", "pty master", e));
  }
  std::vector<char*> argv, envp;
  for (auto& s : m.argv)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : m.env)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  double start = now_ms_f();
  spawn_args args{peer, peer, peer, m.cwd.empty() ? "/" : m.cwd.c_str(), argv.data(),
                  envp.data()};
  args.ctty = true;
  if (!m.user.empty()) {
    args.set_ids = true;
    args.uid = who.uid;
    args.gid = who.gid;
    args.groups = who.groups.data();
    args.ngroups = who.groups.size();
  }
  pid_t pid = spawn(args);
  ::close(peer); // the command holds the terminal now; its hangup ends our reads
  if (pid < 0) {
    int e = errno;
    ::close(master);
    ::close(writer);
    return refuse(req, msg::exec_failed, errno_message("clone", m.argv[0], e));
  }
  uint32_t id = ++S.next_slot;
  job& j = S.jobs[id];
  j.req = req;
  j.gen = S.gen;
  j.pid = pid;
  j.in = writer;
  j.out = master;
  j.start = start;
  j.keep_stdin = true;
  j.pty = true;
  j.stdin_data = std::move(m.stdin_data);
  if (m.timeout_ms)
    j.deadline = now_ms() + int64_t(m.timeout_ms);
  S.by_pid[pid] = id;
  send_frame(proto::writer(msg::started, req).i32(int32_t(pid)).finish());
  ep_add(j.out, EPOLLIN, key(k_stdout, id));
  if (!j.stdin_data.empty()) {
    ep_add(j.in, EPOLLOUT, key(k_stdin, id));
    j.in_watched = true;
    write_stdin(id);
  }
}

void resize_pty(uint32_t req, const proto::pty_size& size) {
  for (auto& [slot, j] : S.jobs) {
    if (j.req != req || j.gen != S.gen || !j.pty || j.out < 0)
      continue;
    winsize ws{};
    ws.ws_col = size.cols;
    ws.ws_row = size.rows;
    // The kernel signals SIGWINCH to the terminal's foreground group.
    ::ioctl(j.out, TIOCSWINSZ, &ws);
    return;
  }
}

} // namespace dsec::init
