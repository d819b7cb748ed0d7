// A template's start and ready commands, the pure half (e2b_start_cmd.hpp).
#include "api/e2b_start_cmd.hpp"

#include <algorithm>
#include <cstdio>

namespace dsec::e2b {

namespace {

/// The loop around the ready command: it gets the command in $1 so no
/// quoting is involved; a failed try's output goes to stderr once per
/// change, so a long wait does not fill the output cap. A `sleep` without
/// fractions waits a whole second instead of spinning.
constexpr const char* ready_loop =
  "last=; while :; do out=$(/bin/sh -c \"$1\" 2>&1) && exit 0; "
  "if [ \"$out\" != \"$last\" ]; then printf '\\036%s' \"$out\" >&2; last=$out; fi; "
  "sleep 0.2 2>/dev/null || sleep 1; done";

std::string tail(const std::string& s, size_t n) {
  auto t = s.size() > n ? "..." + s.substr(s.size() - n) : s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
    t.pop_back();
  return t;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", s);
  return buf;
}

} // namespace

exec_request start_command_request(const template_start& t) {
  exec_request r;
  r.argv = {"/bin/sh", "-c", t.start_cmd};
  return r;
}

exec_request ready_check_request(const template_start& t, double budget_s) {
  exec_request r;
  r.argv = {"/bin/sh", "-c", ready_loop, "ready", t.ready_cmd};
  r.timeout_s = budget_s;
  return r;
}

double ready_budget_s(int64_t ttl_s) {
  // A second short of the TTL: the check ends before the sandbox does, so the
  // answer is the check's own.
  double b = ttl_s > 0 ? static_cast<double>(ttl_s) - 1 : max_ready_wait_s;
  return std::clamp(b, min_ready_wait_s, max_ready_wait_s);
}

std::string ready_failure(const template_start& t, const exec_result& r, double budget_s,
                          const std::string& start_state) {
  std::string msg = "create from template " + t.template_id + ": its ready command `"
                    + tail(t.ready_cmd, 200) + "` ";
  if (r.timed_out)
    msg += "did not succeed within " + seconds(budget_s) + " s";
  else
    msg += "check stopped with status " + std::to_string(r.exit_code);
  auto sep = r.stderr_data.rfind('\x1e');
  auto last = sep == std::string::npos ? std::string{} : r.stderr_data.substr(sep + 1);
  msg += last.empty() ? " (it printed nothing)" : " (last output: " + tail(last, 300) + ")";
  if (!start_state.empty())
    msg += "; the start command `" + tail(t.start_cmd, 200) + "` " + start_state;
  return msg + "; the sandbox was destroyed";
}

std::string start_state_of(const background_process& p) {
  if (p.running)
    return "is still running";
  auto out = p.result.stderr_data.empty() ? p.result.stdout_data : p.result.stderr_data;
  auto s = "exited with code " + std::to_string(p.result.exit_code);
  return out.empty() ? s : s + " (" + tail(out, 300) + ")";
}

} // namespace dsec::e2b
