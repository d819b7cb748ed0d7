// CLI client commands over REST. Errors print `dsec CMD: message` on stderr
// and exit 1 (usage errors exit 2); `exec` exits with the command's code.
#include "cmd/client_cmd.hpp"

#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cmd/args.hpp"
#include "cmd/rest_call.hpp"
#include "cmd/pty_cmd.hpp" // terminals (issue 26 part 1)
#include "core/json_codec.hpp"
#include "sys/http_client.hpp"

namespace dsec::cli {

namespace {

namespace codec = json_codec;
using nlohmann::json;

struct failure {
  int code;
  std::string message;
};

/// Sends a request; a non-2xx answer becomes the node's error message.
expected<sys::http_response> call(const args& a, const std::string& method,
                                  const std::string& target, const std::string& body = {},
                                  const std::string& ctype = "application/json") {
  return rest_call(a, method, target, body, ctype);
}

int usage(const std::string& cmd, const std::string& msg, const char* text) {
  std::cerr << "dsec " << cmd << ": " << msg << "\nusage: " << text << "\n";
  return 2;
}

expected<std::map<std::string, std::string>> kv_list(const std::string& flag,
                                                     const std::vector<std::string>& items) {
  std::map<std::string, std::string> out;
  for (auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return invalid_argument("--" + flag + " takes KEY=VALUE, got \"" + item + "\"");
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

const char* create_usage =
  "dsec create [--image REGISTRY/REPO:TAG|REPO@sha256:HEX] [--layer REF ...] [--cpu N] "
  "[--memory-mb N] [--disk-mb N] [--ttl-s N] [--paused-ttl-s N] [--label K=V ...] "
  "[--env K=V ...] [--request-id ID] [--cpu-class latency|batch] [--backend NAME] "
  "[--node ID] [--on-timeout destroy|pause] [--idle-timeout-s N] [--on-idle pause|destroy] "
  "[--no-auto-resume] [--json] [--rest HOST:PORT]";

const char* create_help =
  "Creates a sandbox and prints its id (--json: the whole sandbox).\n"
  "  --image REF   start from an image of an OCI registry (127.0.0.1:5000/team/py:3.11,\n"
  "                repo@sha256:...); the node pulls it the first time, later creates\n"
  "                reuse it; --layer refs stack on top of it\n"
  "  --layer REF   a layer ref name@version, first = bottom (repeatable); without\n"
  "                --image and --layer: base/busybox@1\n"
  "  --on-timeout pause     pause when the TTL runs out instead of destroying (the\n"
  "                         whole TTL again after a resume)\n"
  "  --idle-timeout-s N     after N s with no call and no CPU use: --on-idle pause\n"
  "                         (default) or destroy\n"
  "  --no-auto-resume       a call on it while paused fails instead of resuming it\n";

int cmd_create(const std::vector<std::string>& words) {
  auto a = parse_args(words,
                      {"layer", "image", "cpu", "memory-mb", "disk-mb", "ttl-s", "label", "env",
                       "request-id", "rest", "backend", "node", "cpu-class", "paused-ttl-s",
                       "on-timeout", "idle-timeout-s", "on-idle"},
                      {"json", "help", "no-auto-resume"});
  if (!a)
    return usage("create", a.err().message, create_usage);
  if (a->has("help")) {
    std::cout << "usage: " << create_usage << "\n" << create_help;
    return 0;
  }
  if (!a->positional.empty())
    return usage("create", "unexpected argument \"" + a->positional[0] + "\"", create_usage);
  json spec;
  spec["layers"] = a->all("layer");
  if (a->has("image"))
    spec["image"] = a->get("image"); // the node checks the reference
  else if (spec["layers"].empty())
    spec["layers"] = {"base/busybox@1"};
  for (auto [flag, key] : {std::pair{"memory-mb", "memory_mb"}, {"disk-mb", "disk_mb"},
                           {"ttl-s", "ttl_s"}, {"paused-ttl-s", "paused_ttl_s"},
                           {"idle-timeout-s", "idle_timeout_s"}}) {
    if (!a->has(flag))
      continue;
    auto v = to_int(flag, a->get(flag));
    if (!v)
      return usage("create", v.err().message, create_usage);
    spec[key] = *v;
  }
  if (a->has("cpu")) {
    auto v = to_double("cpu", a->get("cpu"));
    if (!v)
      return usage("create", v.err().message, create_usage);
    spec["cpu"] = *v;
  }
  auto labels = kv_list("label", a->all("label"));
  auto env = kv_list("env", a->all("env"));
  if (!labels || !env)
    return usage("create", (labels ? env.err() : labels.err()).message, create_usage);
  if (!labels->empty())
    spec["labels"] = *labels;
  if (!env->empty())
    spec["env"] = *env;
  for (auto [flag, key] : {std::pair{"request-id", "request_id"}, {"backend", "backend"},
                           {"node", "node"}, {"cpu-class", "cpu_class"},
                           {"on-timeout", "on_timeout"}, {"on-idle", "on_idle"}})
    if (a->has(flag))
      spec[key] = a->get(flag);
  if (a->has("no-auto-resume"))
    spec["auto_resume"] = false;
  auto res = call(*a, "POST", "/v1/sandboxes", spec.dump());
  if (!res)
    return fail("create", res.err());
  if (a->has("json"))
    std::cout << res->body << "\n";
  else if (auto info = codec::decode_sandbox(res->body))
    std::cout << info->id << "\n";
  return 0;
}

const char* exec_usage =
  "dsec exec ID [--cwd DIR] [--env K=V ...] [--timeout-s N] [--stdin FILE|-] [--step KEY] [--json] "
  "[--background] [--] CMD [ARGS...]   (one CMD word runs through /bin/sh -c; --background "
  "prints the command's pid and returns at once)";

int cmd_exec(const std::vector<std::string>& words) {
  auto a = parse_args(words, {"cwd", "env", "timeout-s", "stdin", "rest", "step"},
                      {"json", "background"}, true);
  if (!a)
    return usage("exec", a.err().message, exec_usage);
  if (a->positional.size() < 2)
    return usage("exec", "need a sandbox id and a command", exec_usage);
  json req;
  std::vector<std::string> cmd(a->positional.begin() + 1, a->positional.end());
  if (cmd.size() == 1)
    req["cmd"] = cmd[0];
  else
    req["cmd"] = cmd;
  if (a->has("cwd"))
    req["cwd"] = a->get("cwd");
  if (a->has("step")) // fast-forward key (core/trajectory.hpp)
    req["step"] = a->get("step");
  auto env = kv_list("env", a->all("env"));
  if (!env)
    return usage("exec", env.err().message, exec_usage);
  if (!env->empty())
    req["env"] = *env;
  if (a->has("timeout-s")) {
    auto v = to_double("timeout-s", a->get("timeout-s"));
    if (!v)
      return usage("exec", v.err().message, exec_usage);
    req["timeout_s"] = *v;
  }
  if (a->has("stdin")) {
    auto f = a->get("stdin");
    std::ifstream in;
    std::istream* src = &std::cin;
    if (f != "-") {
      in.open(f, std::ios::binary);
      if (!in)
        return fail("exec", invalid_argument("cannot read --stdin file " + f));
      src = &in;
    }
    req["stdin"] = std::string(std::istreambuf_iterator<char>(*src), {});
  }
  bool background = a->has("background");
  auto res = call(*a, "POST",
                  "/v1/sandboxes/" + url_encode(a->positional[0], true) + "/exec"
                    + (background ? "?background=1" : ""),
                  req.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!res)
    return fail("exec", res.err());
  if (background && !a->has("json")) {
    auto p = codec::decode_background(res->body);
    if (!p)
      return fail("exec", p.err());
    std::cout << p->pid << "\n";
    return 0;
  }
  if (a->has("json")) {
    std::cout << res->body << "\n";
    return 0;
  }
  auto r = codec::decode_exec_result(res->body);
  if (!r)
    return fail("exec", r.err());
  std::cout << r->stdout_data << std::flush;
  std::cerr << r->stderr_data << std::flush;
  if (r->timed_out)
    std::cerr << "dsec exec: timed out\n";
  return r->exit_code;
}

/// dsec ps ID: the sandbox's processes.
int cmd_ps(const std::vector<std::string>& words) {
  const char* text = "dsec ps ID [--json]";
  auto a = parse_args(words, {"rest"}, {"json"});
  if (!a || a->positional.size() != 1)
    return usage("ps", a ? "need exactly one sandbox id" : a.err().message, text);
  auto res = call(*a, "GET", "/v1/sandboxes/" + url_encode(a->positional[0], true) + "/processes");
  if (!res)
    return fail("ps", res.err());
  if (a->has("json")) {
    std::cout << res->body << "\n";
    return 0;
  }
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("processes") || !j["processes"].is_array())
    return fail("ps", internal_error("unexpected answer: " + res->body.substr(0, 200)));
  std::cout << "PID\tPPID\tSTATE\tCMD\n";
  for (auto& p : j["processes"])
    std::cout << p.value("pid", 0) << "\t" << p.value("ppid", 0) << "\t"
              << p.value("state", std::string{}) << "\t" << p.value("cmd", std::string{})
              << "\n";
  return 0;
}

/// dsec kill ID PID [--signal N|NAME]: signals one process in the sandbox.
int cmd_kill(const std::vector<std::string>& words) {
  const char* text = "dsec kill ID PID [--signal N|NAME]   (default SIGKILL)";
  auto a = parse_args(words, {"rest", "signal"}, {});
  if (!a || a->positional.size() != 2)
    return usage("kill", a ? "need a sandbox id and a pid" : a.err().message, text);
  auto pid = to_int("pid", a->positional[1]);
  if (!pid)
    return usage("kill", pid.err().message, text);
  json body;
  body["signal"] = a->get("signal", "9");
  if (auto n = to_int("signal", a->get("signal", "9")))
    body["signal"] = *n;
  auto res = call(*a, "POST",
                  "/v1/sandboxes/" + url_encode(a->positional[0], true) + "/processes/"
                    + std::to_string(*pid) + "/kill",
                  body.dump());
  if (!res)
    return fail("kill", res.err());
  return 0;
}

std::string age(int64_t created_ms) {
  auto secs = static_cast<long long>(::time(nullptr)) - created_ms / 1000;
  if (secs < 120)
    return std::to_string(secs) + "s";
  if (secs < 7200)
    return std::to_string(secs / 60) + "m";
  return std::to_string(secs / 3600) + "h";
}

int cmd_ls(const std::vector<std::string>& words) {
  const char* text = "dsec ls [--label K=V ...] [--json] [--rest HOST:PORT]";
  auto a = parse_args(words, {"label", "rest"}, {"json"});
  if (!a || !a->positional.empty())
    return usage("ls", a ? "unexpected argument" : a.err().message, text);
  std::string target = "/v1/sandboxes";
  char sep = '?';
  for (auto& l : a->all("label")) {
    target += sep + std::string{"label="} + url_encode(l, true);
    sep = '&';
  }
  auto res = call(*a, "GET", target);
  if (!res)
    return fail("ls", res.err());
  if (a->has("json")) {
    std::cout << res->body << "\n";
    return 0;
  }
  auto list = codec::decode_sandboxes(res->body);
  if (!list)
    return fail("ls", list.err());
  std::printf("%-32s %-9s %-6s %s\n", "ID", "STATE", "AGE", "LAYERS");
  for (auto& s : *list) {
    std::string layers;
    for (auto& l : s.layers)
      layers += (layers.empty() ? "" : ",") + l;
    std::printf("%-32s %-9s %-6s %s\n", s.id.c_str(), to_string(s.state),
                age(s.created_at_ms).c_str(), layers.c_str());
  }
  return 0;
}

int cmd_get(const std::vector<std::string>& words) {
  const char* text = "dsec get ID [--rest HOST:PORT]";
  auto a = parse_args(words, {"rest"}, {});
  if (!a || a->positional.size() != 1)
    return usage("get", a ? "need exactly one sandbox id" : a.err().message, text);
  auto res = call(*a, "GET", "/v1/sandboxes/" + url_encode(a->positional[0], true));
  if (!res)
    return fail("get", res.err());
  std::cout << json::parse(res->body, nullptr, false).dump(2) << "\n";
  return 0;
}

int cmd_rm(const std::vector<std::string>& words) {
  const char* text = "dsec rm ID [ID ...] [--rest HOST:PORT]";
  auto a = parse_args(words, {"rest"}, {});
  if (!a || a->positional.empty())
    return usage("rm", a ? "need at least one sandbox id" : a.err().message, text);
  int rc = 0;
  for (auto& id : a->positional) {
    auto res = call(*a, "DELETE", "/v1/sandboxes/" + url_encode(id, true));
    if (!res)
      rc = fail("rm", res.err());
    else
      std::cout << id << "\n";
  }
  return rc;
}

/// `dsec update ID --cpu-class batch [--allow HOST:PORT ... | --no-network]`:
/// PATCH /v1/sandboxes/{id}; prints what was applied (the info with --json).
int cmd_update(const std::vector<std::string>& words) {
  const char* text = "dsec update ID [--cpu-class latency|batch] [--allow HOST:PORT ... | "
                     "--no-network] [--json] [--rest HOST:PORT]";
  auto a = parse_args(words, {"rest", "cpu-class", "allow"}, {"no-network", "json"});
  if (!a || a->positional.size() != 1)
    return usage("update", a ? "need exactly one sandbox id" : a.err().message, text);
  json body = json::object();
  if (a->has("cpu-class"))
    body["cpu_class"] = a->get("cpu-class");
  if (a->has("allow") && a->has("no-network"))
    return usage("update", "--allow and --no-network exclude each other", text);
  if (a->has("allow"))
    body["network"] = {{"allow", a->all("allow")}};
  else if (a->has("no-network"))
    body["network"] = {{"mode", "none"}};
  if (body.empty())
    return usage("update", "nothing to change: give --cpu-class, --allow or --no-network", text);
  auto res = call(*a, "PATCH", "/v1/sandboxes/" + url_encode(a->positional[0], true), body.dump());
  if (!res)
    return fail("update", res.err());
  auto j = json::parse(res->body, nullptr, false);
  if (a->has("json") || j.is_discarded()) {
    std::cout << res->body << "\n";
    return 0;
  }
  std::string applied;
  for (auto& k : j.value("applied", json::array()))
    applied += (applied.empty() ? "" : ",") + k.get<std::string>();
  std::cout << a->positional[0] << " cpu_class=" << j.value("cpu_class", "") << " applied="
            << applied << "\n";
  return 0;
}

/// `dsec cp LOCAL ID:/path` uploads, `dsec cp ID:/path LOCAL` downloads
/// (LOCAL may be - for stdin/stdout).
int cmd_cp(const std::vector<std::string>& words) {
  const char* text = "dsec cp LOCAL ID:/abs/path | dsec cp ID:/abs/path LOCAL [--rest HOST:PORT]";
  auto a = parse_args(words, {"rest"}, {});
  if (!a || a->positional.size() != 2)
    return usage("cp", a ? "need a source and a destination" : a.err().message, text);
  auto remote = [](const std::string& s) {
    auto c = s.find(':');
    return c != std::string::npos && c > 0 && c + 1 < s.size() && s[c + 1] == '/';
  };
  auto& src = a->positional[0];
  auto& dst = a->positional[1];
  if (remote(dst) && !remote(src)) {
    std::string data;
    if (src == "-") {
      data.assign(std::istreambuf_iterator<char>(std::cin), {});
    } else {
      std::ifstream in(src, std::ios::binary);
      if (!in)
        return fail("cp", invalid_argument("cannot read " + src));
      data.assign(std::istreambuf_iterator<char>(in), {});
    }
    auto c = dst.find(':');
    auto res = call(*a, "PUT", "/v1/sandboxes/" + url_encode(dst.substr(0, c), true)
                                 + "/files?path=" + url_encode(dst.substr(c + 1), true),
                    data, "application/octet-stream");
    return res ? 0 : fail("cp", res.err());
  }
  if (remote(src) && !remote(dst)) {
    auto c = src.find(':');
    auto res = call(*a, "GET", "/v1/sandboxes/" + url_encode(src.substr(0, c), true)
                                 + "/files?path=" + url_encode(src.substr(c + 1), true));
    if (!res)
      return fail("cp", res.err());
    if (dst == "-") {
      std::cout << res->body << std::flush;
      return 0;
    }
    std::ofstream out(dst, std::ios::binary);
    out << res->body;
    return out ? 0 : fail("cp", invalid_argument("cannot write " + dst));
  }
  return usage("cp", "exactly one side must be ID:/abs/path", text);
}

} // namespace

bool is_client_command(const std::string& cmd) {
  if (is_pty_command(cmd)) // terminals (issue 26 part 1; cmd/pty_cmd.cpp)
    return true;
  return cmd == "create" || cmd == "exec" || cmd == "ls" || cmd == "get" || cmd == "rm"
         || cmd == "cp" || cmd == "ps" || cmd == "kill" || cmd == "update" || cmd == "inspect"
         || is_job_command(cmd)
         || cmd == "session"; // shell sessions (issue 26 part 2)
}

int run_client_command(const std::string& cmd, const std::vector<std::string>& args) {
  if (cmd == "create")
    return cmd_create(args);
  if (cmd == "exec")
    return cmd_exec(args);
  if (cmd == "ls")
    return cmd_ls(args);
  if (cmd == "get" || cmd == "inspect")
    return cmd_get(args);
  if (is_job_command(cmd))
    return run_job_command(cmd, args);
  if (cmd == "rm")
    return cmd_rm(args);
  if (cmd == "cp")
    return cmd_cp(args);
  if (cmd == "ps")
    return cmd_ps(args);
  if (cmd == "kill")
    return cmd_kill(args);
  if (cmd == "update")
    return cmd_update(args);
  if (is_pty_command(cmd))
    return run_pty_command(cmd, args);
  if (cmd == "session") // shell sessions (issue 26 part 2)
    return run_session_command(args);
  return 2;
}

} // namespace dsec::cli
