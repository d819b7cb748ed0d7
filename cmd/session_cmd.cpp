// `dsec session open|run|close|list`: shell sessions (issue 26 part 2) through
// a node's REST gateway (POST/GET /v1/sandboxes/{id}/sessions, POST
// .../sessions/{sid}/run, DELETE .../sessions/{sid}). `run` prints the
// command's stdout and stderr as they were and exits with its exit code, as
// `dsec exec` does.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cmd/args.hpp"
#include "cmd/client_cmd.hpp"
#include "cmd/rest_call.hpp"
#include "core/json_codec.hpp"

namespace dsec::cli {

namespace {

using nlohmann::json;

const char* session_help =
  "usage: dsec session VERB ...   (shell sessions: cwd, env, variables, functions\n"
  "                                and aliases persist between runs)\n"
  "  dsec session open ID [--shell PATH] [--cwd DIR] [--env K=V ...] [--json]\n"
  "      opens a session (default shell /bin/bash); prints its id (s1, s2, ...)\n"
  "  dsec session run ID SID [--timeout-s S] [--json] [--] CMD ...\n"
  "      runs CMD (words joined by spaces) in the session; prints its output,\n"
  "      exits with its exit code; a timeout interrupts it as Ctrl-C would\n"
  "  dsec session close ID SID     ends the session (its shell and jobs)\n"
  "  dsec session list ID [--json] the sandbox's sessions\n"
  "Every verb takes --rest HOST:PORT (else $DSEC_REST, else 127.0.0.1:7070).\n";

int usage(const std::string& msg) {
  std::cerr << "dsec session: " << msg << "\n" << session_help;
  return 2;
}

std::string base(const std::string& id) { return "/v1/sandboxes/" + url_encode(id) + "/sessions"; }

int open(const std::vector<std::string>& words) {
  auto a = parse_args(words, {"shell", "cwd", "env", "rest"}, {"json", "help"});
  if (!a)
    return usage(a.err().message);
  if (a->has("help")) {
    std::cout << session_help;
    return 0;
  }
  if (a->positional.size() != 1)
    return usage("open: need exactly one sandbox id");
  json req = json::object();
  if (a->has("shell"))
    req["shell"] = a->get("shell");
  if (a->has("cwd"))
    req["cwd"] = a->get("cwd");
  json env = json::object();
  for (auto& kv : a->all("env")) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return usage("open: --env takes KEY=VALUE, got \"" + kv + "\"");
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!env.empty())
    req["env"] = env;
  auto res = rest_call(*a, "POST", base(a->positional[0]), req.dump());
  if (!res)
    return fail("session open", res.err());
  if (a->has("json")) {
    std::cout << res->body << "\n";
    return 0;
  }
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("id"))
    return fail("session open", internal_error("the node's answer is not a session: " + res->body));
  std::cout << j["id"].get<std::string>() << "\n";
  return 0;
}

int run(const std::vector<std::string>& words) {
  auto a = parse_args(words, {"timeout-s", "rest"}, {"json", "help"}, false);
  if (!a)
    return usage(a.err().message);
  if (a->has("help")) {
    std::cout << session_help;
    return 0;
  }
  if (a->positional.size() < 3)
    return usage("run: need a sandbox id, a session id and a command");
  std::string cmd;
  for (size_t i = 2; i < a->positional.size(); ++i)
    cmd += (i > 2 ? " " : "") + a->positional[i];
  json req{{"cmd", cmd}};
  if (a->has("timeout-s")) {
    auto v = to_double("timeout-s", a->get("timeout-s"));
    if (!v)
      return usage(v.err().message);
    req["timeout_s"] = *v;
  }
  auto res = rest_call(*a, "POST", base(a->positional[0]) + "/" + url_encode(a->positional[1])
                                     + "/run",
                       req.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!res)
    return fail("session run", res.err());
  if (a->has("json")) {
    std::cout << res->body << "\n";
    return 0;
  }
  auto r = json_codec::decode_exec_result(res->body);
  if (!r)
    return fail("session run", r.err());
  std::cout << r->stdout_data << std::flush;
  std::cerr << r->stderr_data << std::flush;
  if (r->timed_out)
    std::cerr << "dsec session run: timed out (interrupted)\n";
  return r->exit_code;
}

int close(const std::vector<std::string>& words) {
  auto a = parse_args(words, {"rest"}, {"help"});
  if (!a)
    return usage(a.err().message);
  if (a->has("help")) {
    std::cout << session_help;
    return 0;
  }
  if (a->positional.size() != 2)
    return usage("close: need a sandbox id and a session id");
  auto res = rest_call(*a, "DELETE", base(a->positional[0]) + "/" + url_encode(a->positional[1]));
  if (!res)
    return fail("session close", res.err());
  return 0;
}

int list(const std::vector<std::string>& words) {
  auto a = parse_args(words, {"rest"}, {"json", "help"});
  if (!a)
    return usage(a.err().message);
  if (a->has("help")) {
    std::cout << session_help;
    return 0;
  }
  if (a->positional.size() != 1)
    return usage("list: need exactly one sandbox id");
  auto res = rest_call(*a, "GET", base(a->positional[0]));
  if (!res)
    return fail("session list", res.err());
  if (a->has("json")) {
    std::cout << res->body << "\n";
    return 0;
  }
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("sessions"))
    return fail("session list", internal_error("the node's answer is not a list: " + res->body));
  std::cout << "ID\tSHELL\tALIVE\tRUNS\tREASON\n";
  for (auto& s : j["sessions"])
    std::cout << s.value("id", "") << "\t" << s.value("shell", "") << "\t"
              << (s.value("alive", false) ? "yes" : "no") << "\t" << s.value("runs", 0) << "\t"
              << s.value("reason", "") << "\n";
  return 0;
}

} // namespace

int run_session_command(const std::vector<std::string>& words) {
  if (words.empty())
    return usage("need a verb: open, run, close or list");
  auto verb = words[0];
  std::vector<std::string> rest(words.begin() + 1, words.end());
  if (verb == "--help" || verb == "-h" || verb == "help") {
    std::cout << session_help;
    return 0;
  }
  if (verb == "open")
    return open(rest);
  if (verb == "run")
    return run(rest);
  if (verb == "close")
    return close(rest);
  if (verb == "list" || verb == "ls")
    return list(rest);
  return usage("unknown verb \"" + verb + "\" (open, run, close, list)");
}

} // namespace dsec::cli
