// run_command via posix_spawn with a pipe for output.
#include "sys/process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "sys/fd.hpp"

extern char** environ;

namespace dsec::sys {

expected<command_result> run_command(const std::vector<std::string>& argv,
                                     const std::string& input) {
  if (argv.empty())
    return invalid_argument("run_command: empty argv");
  int p[2], q[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    return sys_error("pipe for", argv[0], errno);
  unique_fd rd{p[0]}, wr{p[1]};
  unique_fd in_rd, in_wr;
  if (!input.empty()) {
    if (::pipe2(q, O_CLOEXEC) != 0)
      return sys_error("pipe for", argv[0], errno);
    in_rd = unique_fd{q[0]}, in_wr = unique_fd{q[1]};
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (input.empty())
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  else
    posix_spawn_file_actions_adddup2(&fa, in_rd.get(), 0);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, wr.get(), 2);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return sys_error("spawn", argv[0], rc, rc == ENOENT ? errc::unavailable : errc::internal);
  wr.reset();
  in_rd.reset();
  if (in_wr) { // inputs fit the pipe buffer: written whole before the output is read
    (void)!::write(in_wr.get(), input.data(), input.size());
    in_wr.reset();
  }
  command_result res;
  char buf[8192];
  for (;;) {
    auto n = ::read(rd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    if (res.output.size() < (1u << 20))
      res.output.append(buf, static_cast<size_t>(n));
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  res.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return res;
}

status run_checked(const std::vector<std::string>& argv, const std::string& input) {
  auto r = run_command(argv, input);
  if (!r)
    return r.err();
  if (r->exit_code == 0)
    return {};
  std::string cmd;
  for (auto& a : argv)
    cmd += (cmd.empty() ? "" : " ") + a;
  auto out = r->output;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return internal_error(cmd + ": "
                        + (out.empty() ? "exit status " + std::to_string(r->exit_code) : out));
}

} // namespace dsec::sys
