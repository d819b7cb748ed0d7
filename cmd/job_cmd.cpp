// `dsec pause` and `dsec resume`: one sandbox by id, or a whole job by label
// (POST /v1/sandboxes:pause|:resume, every matching sandbox of the cluster).
// Prints the ids done, one per line; each failure goes to stderr naming the
// sandbox (or node) and its cause, and makes the exit code 1.
#include <unistd.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cmd/args.hpp"
#include "cmd/rest_call.hpp"
#include "cmd/client_cmd.hpp"
#include "core/job.hpp"
#include "core/json_codec.hpp"
#include "sys/http_client.hpp"

namespace dsec::cli {

namespace {

using nlohmann::json;

expected<sys::http_response> post(const args& a, const std::string& target,
                                  const std::string& body) {
  return rest_call(a, "POST", target, body, "application/json", std::chrono::minutes(10));
}

void print_usage(std::ostream& out, const std::string& cmd) {
  out << "usage: dsec " << cmd << " ID [ID ...]" << (cmd == "pause" ? " [--no-memory]" : "")
      << " | --label K=V [--label K=V ...] [--json] [--rest HOST:PORT]\n"
      << "  ID ...         the sandboxes to " << cmd << "\n"
      << "  --label K=V    every sandbox of the cluster with these labels (a whole job)\n";
  if (cmd == "pause")
    out << "  --no-memory    keep only the files (container sandboxes): every process ends and "
           "its memory is freed; the resume boots the sandbox again\n";
}

int usage(const std::string& cmd, const std::string& msg) {
  std::cerr << "dsec " << cmd << ": " << msg << "\n";
  print_usage(std::cerr, cmd);
  return 2;
}

/// The whole job: every sandbox of the cluster matching the labels.
int job(const std::string& cmd, const args& a) {
  json labels = json::object();
  for (auto& item : a.all("label")) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return usage(cmd, "--label takes KEY=VALUE, got \"" + item + "\"");
    labels[item.substr(0, eq)] = item.substr(eq + 1);
  }
  auto res = post(a, "/v1/sandboxes:" + cmd, json{{"labels", labels}}.dump());
  if (!res)
    return fail(cmd, res.err());
  auto r = json_codec::decode_job(res->body);
  if (!r)
    return fail(cmd, r.err());
  if (a.has("json"))
    std::cout << res->body << "\n";
  else
    for (auto& id : r->done)
      std::cout << id << "\n";
  for (auto& e : r->errors)
    std::cerr << "dsec " << cmd << ": " << (e.id.empty() ? "node " + e.node : e.id) << ": "
              << e.message << " (" << to_string(e.code) << ")\n";
  return r->errors.empty() ? 0 : 1;
}

} // namespace

bool is_job_command(const std::string& cmd) { return cmd == "pause" || cmd == "resume"; }

int run_job_command(const std::string& cmd, const std::vector<std::string>& words) {
  for (auto& w : words)
    if (w == "--help" || w == "-h") {
      print_usage(std::cout, cmd);
      return 0;
    }
  auto a = parse_args(words, {"label", "rest"}, {"json", "no-memory"});
  if (!a)
    return usage(cmd, a.err().message);
  bool by_label = a->has("label");
  bool drop_memory = a->has("no-memory");
  if (drop_memory && cmd != "pause")
    return usage(cmd, "--no-memory is an option of dsec pause only");
  if (drop_memory && by_label)
    return usage(cmd, "--no-memory pauses sandboxes by id, not a whole job by --label");
  if (by_label && !a->positional.empty())
    return usage(cmd, "give sandbox ids or --label, not both");
  if (!by_label && a->positional.empty())
    return usage(cmd, "need sandbox ids or --label K=V (a whole job)");
  if (by_label)
    return job(cmd, *a);
  int rc = 0;
  for (auto& id : a->positional) {
    auto res = post(*a, "/v1/sandboxes/" + url_encode(id) + "/" + cmd,
                    drop_memory ? R"({"keep_memory":false})" : "");
    if (!res)
      rc = fail(cmd, res.err());
    else if (a->has("json"))
      std::cout << res->body << "\n";
    else
      std::cout << id << "\n";
  }
  return rc;
}

} // namespace dsec::cli
