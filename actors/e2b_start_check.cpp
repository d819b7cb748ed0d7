// A template's start command checked at the end of its build (e2b_templates.hpp),
// as E2B's build runs it: in a sandbox of the built layer, the start command
// in the background, the ready command until it succeeds, then the start
// command must not have failed. The sandbox is destroyed either way. Runs on
// the build's own thread, over this node's REST port, like the builder.
#include "actors/e2b_templates.hpp"

#include <nlohmann/json.hpp>

#include "api/e2b_start_cmd.hpp"
#include "sys/http_client.hpp"

namespace dsec::e2b {

namespace {

using nlohmann::json;

/// How long a build waits for the ready command: E2B's builds wait minutes
/// for a server to come up; beyond this the build fails naming the command.
constexpr double build_ready_wait_s = 120;

/// The body of a REST answer with status `want`, or an error naming `what`.
expected<json> call(sys::http_client& c, const char* method, const std::string& target,
                    const json& body, int want, const std::string& what,
                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  auto res = c.request(method, target, body.is_null() ? std::string{} : body.dump(),
                       "application/json", timeout);
  if (!res)
    return error{res.err().code, what + ": " + res.err().message};
  auto j = json::parse(res->body, nullptr, false);
  if (res->status != want) {
    std::string msg = !j.is_discarded() && j.is_object()
                        ? j.value("error", json::object()).value("message", res->body.substr(0, 300))
                        : res->body.substr(0, 300);
    return error{errc::invalid_argument, what + ": " + msg};
  }
  return j.is_discarded() ? json::object() : j;
}

/// The check itself, in sandbox `id`.
status check_in(sys::http_client& c, const std::string& id, const template_start& t,
                const std::function<void(const std::string&)>& log) {
  int64_t pid = 0;
  auto base = "/v1/sandboxes/" + id;
  if (!t.start_cmd.empty()) {
    auto p = call(c, "POST", base + "/exec?background=1", json{{"cmd", t.start_cmd}}, 201,
                  "start command");
    if (!p)
      return p.err();
    pid = p->value("pid", int64_t{0});
  }
  if (!t.ready_cmd.empty()) {
    auto req = ready_check_request(t, build_ready_wait_s);
    auto timeout = std::chrono::seconds(static_cast<int>(build_ready_wait_s) + 60);
    auto r = call(c, "POST", base + "/exec", json{{"cmd", req.argv}, {"timeout_s", req.timeout_s}},
                  200, "ready command", timeout);
    if (!r)
      return r.err();
    if (r->value("exit_code", -1) != 0 || r->value("timed_out", false)) {
      exec_result res;
      res.exit_code = r->value("exit_code", -1);
      res.timed_out = r->value("timed_out", false);
      res.stderr_data = r->value("stderr", std::string{});
      std::string state;
      if (pid > 0)
        if (auto p = call(c, "GET", base + "/processes/" + std::to_string(pid), json{}, 200,
                          "start command"); p) {
          background_process bp;
          bp.running = p->value("state", "") == "running";
          bp.result.exit_code = p->value("exit_code", json(0)).is_number() ? (*p)["exit_code"].get<int>() : 0;
          bp.result.stdout_data = p->value("stdout", std::string{});
          bp.result.stderr_data = p->value("stderr", std::string{});
          state = start_state_of(bp);
        }
      auto msg = ready_failure(t, res, build_ready_wait_s, state);
      return invalid_argument(msg.substr(0, msg.rfind("; the sandbox was destroyed")));
    }
    log("Ready command succeeded: " + t.ready_cmd);
  }
  if (pid <= 0)
    return {};
  auto p = call(c, "GET", base + "/processes/" + std::to_string(pid), json{}, 200, "start command");
  if (!p)
    return p.err();
  if (p->value("state", "") != "running" && p->value("exit_code", json(0)).is_number()
      && (*p)["exit_code"].get<int>() != 0) {
    background_process bp;
    bp.running = false;
    bp.result.exit_code = (*p)["exit_code"].get<int>();
    bp.result.stdout_data = p->value("stdout", std::string{});
    bp.result.stderr_data = p->value("stderr", std::string{});
    return invalid_argument("start command `" + t.start_cmd + "` " + start_state_of(bp));
  }
  return {};
}

} // namespace

status check_start_in_build(const node_config& cfg, const std::string& layer,
                            const template_start& t,
                            const std::function<void(const std::string&)>& log) {
  auto c = node_client(cfg);
  if (!c)
    return c.err();
  log("Checking the start command in a sandbox of " + layer);
  json spec = {{"layers", {layer}},
               {"ttl_s", static_cast<int64_t>(build_ready_wait_s) + 120},
               {"labels", {{"dsec-build", "1"}}}};
  auto sb = call(*c, "POST", "/v1/sandboxes", spec, 201, "start command check: create");
  if (!sb)
    return sb.err();
  auto id = sb->value("id", std::string{});
  auto st = check_in(*c, id, t, log);
  (void)c->request("DELETE", "/v1/sandboxes/" + id);
  return st;
}

} // namespace dsec::e2b
