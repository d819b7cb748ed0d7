// The trajectory CLI verbs (see trajectory_cmd.hpp). Errors print
// `dsec CMD: message (code)` on stderr and exit 1; usage errors exit 2.
#include "cmd/trajectory_cmd.hpp"

#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cmd/args.hpp"
#include "cmd/rest_call.hpp"
#include "core/json_codec.hpp"
#include "core/trajectory.hpp"
#include "sys/http_client.hpp"

namespace dsec::cli {

namespace {

using nlohmann::json;

int usage(const std::string& cmd, const std::string& msg, const char* text) {
  std::cerr << "dsec " << cmd << ": " << msg << "\nusage: " << text << "\n";
  return 2;
}

/// One line per record: seq, kind, and what it did.
std::string summary(const json& r) {
  auto kind = r.value("kind", std::string{});
  std::string out = std::to_string(r.value("seq", 0)) + "\t" + kind;
  if (kind == "exec") {
    std::string cmd;
    for (auto& a : r.value("cmd", json::array()))
      cmd += (cmd.empty() ? "" : " ") + a.get<std::string>();
    if (r.value("background", false))
      out += "\tbackground pid " + std::to_string(r.value("pid", 0));
    else
      out += "\texit " + std::to_string(r.value("exit_code", 0));
    if (r.contains("step"))
      out += "\tstep " + r["step"].get<std::string>();
    out += "\t" + cmd;
  } else if (kind == "exit") {
    out += "\tpid " + std::to_string(r.value("pid", 0)) + "\texit "
           + std::to_string(r.value("exit_code", 0));
  } else if (kind == "file") {
    out += "\t" + r.value("path", std::string{}) + "\t" + std::to_string(r.value("size", 0))
           + " bytes";
  } else if (kind == "spec") {
    out += "\t" + r.value("id", std::string{});
  } else if (kind == "rebuilt") {
    out += "\tfrom " + r.value("source", std::string{}) + " up to seq "
           + std::to_string(r.value("upto_seq", 0));
  } else if (kind == "destroyed") {
    out += "\t" + r.value("reason", std::string{});
  }
  return out;
}

int cmd_trajectory(const std::vector<std::string>& words) {
  const char* text = "dsec trajectory ID [--since SEQ] [--json] [--rest HOST:PORT]";
  auto a = parse_args(words, {"since", "rest"}, {"json"});
  if (!a)
    return usage("trajectory", a.err().message, text);
  if (a->positional.size() != 1)
    return usage("trajectory", "need one sandbox id", text);
  std::string target = "/v1/sandboxes/" + a->positional[0] + "/trajectory";
  if (a->has("since")) {
    auto s = trajectory::parse_seq("--since", a->get("since"));
    if (!s)
      return usage("trajectory", s.err().message, text);
    target += "?since=" + std::to_string(*s);
  }
  auto res = rest_call(*a, "GET", target);
  if (!res)
    return fail("trajectory", res.err());
  if (a->has("json")) { // the node's NDJSON as is
    std::cout << res->body << std::flush;
    return 0;
  }
  size_t pos = 0;
  while (pos < res->body.size()) {
    auto nl = res->body.find('\n', pos);
    auto line = res->body.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? res->body.size() : nl + 1;
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object())
      std::cout << summary(j) << "\n";
  }
  return 0;
}

int cmd_replay(const std::vector<std::string>& words) {
  const char* text = "dsec replay ID [--upto-seq SEQ] [--rest HOST:PORT]";
  auto a = parse_args(words, {"upto-seq", "rest"}, {});
  if (!a)
    return usage("replay", a.err().message, text);
  if (a->positional.size() != 1)
    return usage("replay", "need one sandbox id", text);
  std::string body;
  if (a->has("upto-seq")) {
    auto s = trajectory::parse_seq("--upto-seq", a->get("upto-seq"));
    if (!s)
      return usage("replay", s.err().message, text);
    body = json{{"upto_seq", *s}}.dump();
  }
  auto res = rest_call(*a, "POST", "/v1/sandboxes/" + a->positional[0] + "/replay", body);
  if (!res)
    return fail("replay", res.err());
  auto info = json_codec::decode_sandbox(res->body);
  if (!info)
    return fail("replay", info.err());
  std::cout << info->id << "\n";
  return 0;
}

} // namespace

bool is_trajectory_command(const std::string& cmd) {
  return cmd == "trajectory" || cmd == "replay";
}

int run_trajectory_command(const std::string& cmd, const std::vector<std::string>& args) {
  return cmd == "trajectory" ? cmd_trajectory(args) : cmd_replay(args);
}

} // namespace dsec::cli
