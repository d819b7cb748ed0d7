// E2B control-plane JSON, Connect envelopes and envd messages (e2b_codec.hpp).
#include "api/e2b_codec.hpp"
#include "core/port_route.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <ctime>

#include <nlohmann/json.hpp>

#include "api/e2b_codec_detail.hpp"
#include "api/e2b_create.hpp"
#include "api/gateway_routes.hpp"

namespace dsec::e2b {

namespace {

using nlohmann::json;
using detail::parse_object;

/// Connect envelopes larger than this are refused before any allocation
/// (requests are small JSON messages; uploads go through POST /files).
constexpr uint32_t max_envelope = 4u << 20;


expected<std::map<std::string, std::string>> string_map(const json& j, const char* field) {
  std::map<std::string, std::string> out;
  if (j.is_null())
    return out;
  if (!j.is_object())
    return invalid_argument(std::string{field} + ": must be an object of strings");
  for (auto& [k, v] : j.items()) {
    if (!v.is_string())
      return invalid_argument(std::string{field} + "." + k + ": must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

std::string iso_ms(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char frac[16];
  snprintf(frac, sizeof(frac), ".%03dZ", static_cast<int>(ms % 1000));
  return std::string{buf} + frac;
}


const char* e2b_state(sandbox_state s) {
  return s == sandbox_state::paused ? "paused" : to_string(s);
}

json sandbox_json(const sandbox_info& info) {
  json metadata = json::object();
  for (auto& [k, v] : info.labels)
    if (k != template_label && k != traffic_token_label && k != public_ports_label) // ports
      metadata[k] = v;
  auto tpl = info.labels.find(template_label);
  std::string template_id = tpl != info.labels.end() ? tpl->second
                            : info.layers.empty()     ? std::string{}
                                                      : info.layers.back();
  return json{{"sandboxID", info.id},
              {"templateID", template_id},
              {"alias", template_id},
              {"clientID", info.node},
              {"envdVersion", envd_version},
              {"startedAt", iso_ms(info.created_at_ms)},
              {"endAt", iso_ms(info.expires_at_ms ? info.expires_at_ms : info.created_at_ms
                                                                        + 100LL * 365 * 86400000)},
              {"state", e2b_state(info.state)},
              {"cpuCount", std::max<int64_t>(1, static_cast<int64_t>(info.cpu + 0.999))},
              {"memoryMB", info.memory_mb},
              {"diskSizeMB", info.disk_mb},
              {"metadata", metadata},
              {"lifecycle", json::parse(lifecycle_json(info))},
              {"domain", nullptr}};
}

/// application/x-www-form-urlencoded decoding ('+' is a space).
expected<std::string> form_decode(std::string_view s) {
  std::string plus;
  plus.reserve(s.size());
  for (char c : s)
    plus += c == '+' ? ' ' : c;
  return url_decode(plus);
}



} // namespace

expected<nlohmann::json> detail::parse_object(std::string_view body, const char* what) {
  if (body.empty())
    return json::object();
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(std::string{what} + ": body is not a JSON object");
  return j;
}

// -- control plane ------------------------------------------------------------

expected<create_request> parse_create(std::string_view body) {
  auto j = parse_object(body, "create sandbox");
  if (!j)
    return j.err();
  create_request r;
  auto tpl = j->find("templateID");
  if (tpl == j->end() || !tpl->is_string() || tpl->get<std::string>().empty())
    return invalid_argument("create sandbox: templateID (a layer ref, an alias or an "
                            "image reference) is required");
  r.template_id = tpl->get<std::string>();
  if (auto t = j->find("timeout"); t != j->end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 0
        || t->get<int64_t>() > spec_limits::max_ttl_s)
      return invalid_argument("create sandbox: timeout must be an integer number of seconds "
                              "between 0 and 2592000");
    r.timeout_s = t->get<int64_t>();
  }
  auto md = string_map(j->value("metadata", json{}), "metadata");
  if (!md)
    return md.err();
  if (md->count(template_label))
    return invalid_argument(std::string{"metadata: the key "} + template_label + " is reserved");
  r.metadata = std::move(*md);
  auto env = string_map(j->value("envVars", json{}), "envVars");
  if (!env)
    return env.err();
  r.env = std::move(*env);
  return r;
}

expected<std::vector<std::string>> template_layers(const std::string& id) {
  if (id == "base") // issue 27: E2B's base template (layers/e2b_base.hpp) and its sudo
    return std::vector<std::string>{"base/e2b@1", "toolkit/e2b-sudo@1"};
  if (id == "python")
    return std::vector<std::string>{"base/python@3.11"};
  if (id == "code-interpreter-v1" || id == "code-interpreter") // @e2b/code-interpreter's default
    return std::vector<std::string>{"base/code-interpreter@1", "toolkit/code-interpreter-user@1",
                                    "toolkit/e2b-sudo@1"}; // issue 27: E2B's user and its sudo
  if (id == "busybox")
    return std::vector<std::string>{"base/busybox@1"};
  if (id.find('@') != std::string::npos)
    return std::vector<std::string>{id};
  return not_found("template " + id.substr(0, 200)
                   + ": not a layer ref (name@version), an image reference "
                     "(registry/repo:tag), an alias of the node's store (dsec layer alias NAME "
                     "REF) nor a built-in alias (base, python, busybox, code-interpreter-v1)");
}

expected<int64_t> parse_timeout(std::string_view body) {
  auto j = parse_object(body, "timeout");
  if (!j)
    return j.err();
  auto t = j->find("timeout");
  if (t == j->end() || t->is_null())
    return int64_t{-1};
  if (!t->is_number_integer() || t->get<int64_t>() < 0
      || t->get<int64_t>() > spec_limits::max_ttl_s)
    return invalid_argument("timeout: must be an integer number of seconds between 0 and 2592000");
  return t->get<int64_t>();
}

std::string encode_sandbox(const sandbox_info& info, const std::string& access_token) {
  auto j = sandbox_json(info);
  if (!access_token.empty())
    j["envdAccessToken"] = access_token;
  return j.dump();
}

std::string encode_sandbox_list(const std::vector<sandbox_info>& list) {
  json arr = json::array();
  for (auto& i : list)
    arr.push_back(sandbox_json(i));
  return arr.dump();
}

std::string encode_metrics(const sandbox_metric& m) {
  json arr = json::array();
  arr.push_back(json{{"timestamp", iso_ms(m.timestamp_ms)},
                     {"timestampUnix", m.timestamp_ms / 1000},
                     {"cpuCount", m.cpu_count},
                     {"cpuUsedPct", m.cpu_used_pct},
                     {"memUsed", m.mem_used},
                     {"memTotal", m.mem_total}});
  return arr.dump();
}

std::string error_body(int status, std::string_view message) {
  return json{{"code", status}, {"message", std::string{message}}}.dump();
}

int http_status(errc code) { return http_status_of(code); }

expected<list_query> parse_list_query(const std::map<std::string, std::string>& q) {
  list_query out;
  for (auto& [k, v] : q)
    if (k != "metadata" && k != "state" && k != "limit" && k != "nextToken" && k != "order"
        && k != "startedAfter" && k != "template")
      return invalid_argument("list sandboxes: query parameter " + k.substr(0, 64)
                              + " is not implemented by dsec (it filters by metadata, state, "
                                "startedAfter and template, orders by order, pages by limit "
                                "and nextToken)");
  if (auto it = q.find("order"); it != q.end() && !it->second.empty()) {
    if (it->second != "asc" && it->second != "desc")
      return invalid_argument("list sandboxes: order must be asc or desc, got \""
                              + it->second.substr(0, 64) + "\"");
    out.ascending = it->second == "asc";
  }
  if (auto it = q.find("startedAfter"); it != q.end() && !it->second.empty()) {
    auto ms = parse_rfc3339_ms(it->second, "list sandboxes: startedAfter");
    if (!ms)
      return ms.err();
    out.started_after_ms = *ms;
  }
  if (auto it = q.find("template"); it != q.end())
    out.template_id = it->second;
  if (auto it = q.find("metadata"); it != q.end() && !it->second.empty()) {
    // One parameter holding `k=v&k2=v2`, each part encoded again.
    std::string_view s = it->second;
    size_t pos = 0;
    while (pos <= s.size()) {
      auto amp = s.find('&', pos);
      if (amp == std::string_view::npos)
        amp = s.size();
      auto item = s.substr(pos, amp - pos);
      pos = amp + 1;
      if (item.empty())
        continue;
      auto eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        return invalid_argument("metadata: expected key=value pairs, got \""
                                + std::string{item.substr(0, 200)} + "\"");
      auto k = form_decode(item.substr(0, eq));
      auto v = form_decode(item.substr(eq + 1));
      if (!k || !v)
        return invalid_argument("metadata: invalid percent-encoding");
      out.metadata[*k] = *v;
    }
  }
  if (auto it = q.find("state"); it != q.end() && !it->second.empty()) {
    std::string_view s = it->second;
    size_t pos = 0;
    while (pos <= s.size()) {
      auto comma = s.find(',', pos);
      if (comma == std::string_view::npos)
        comma = s.size();
      auto st = std::string{s.substr(pos, comma - pos)};
      pos = comma + 1;
      if (st != "running" && st != "paused")
        return invalid_argument("state: must be running or paused, got \"" + st.substr(0, 64)
                                + "\"");
      out.states.push_back(st);
    }
  }
  auto number = [](const std::string& v, const char* field, size_t max) -> expected<size_t> {
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument(std::string{field} + ": must be a non-negative integer");
    auto n = static_cast<size_t>(std::stoul(v));
    if (n > max)
      return invalid_argument(std::string{field} + ": at most " + std::to_string(max));
    return n;
  };
  if (auto it = q.find("limit"); it != q.end()) {
    auto n = number(it->second, "limit", 1000);
    if (!n)
      return n.err();
    out.limit = *n == 0 ? 100 : *n;
  }
  if (auto it = q.find("nextToken"); it != q.end() && !it->second.empty()) {
    auto n = number(it->second, "nextToken", 100000000);
    if (!n)
      return n.err();
    out.offset = *n;
  }
  return out;
}

std::vector<sandbox_info> select_page(std::vector<sandbox_info> all, const list_query& q,
                                      std::string& next_token) {
  std::vector<sandbox_info> match;
  for (auto& i : all) {
    const char* st = e2b_state(i.state);
    bool state_ok = q.states.empty()
                      ? (i.state == sandbox_state::running || i.state == sandbox_state::paused)
                      : std::find(q.states.begin(), q.states.end(), st) != q.states.end();
    bool md_ok = std::all_of(q.metadata.begin(), q.metadata.end(), [&](auto& kv) {
      auto it = i.labels.find(kv.first);
      return it != i.labels.end() && it->second == kv.second;
    });
    bool time_ok = !q.started_after_ms || i.created_at_ms >= *q.started_after_ms;
    bool template_ok = q.template_id.empty()
                       || sandbox_json(i)["templateID"].get<std::string>() == q.template_id;
    if (state_ok && md_ok && time_ok && template_ok)
      match.push_back(std::move(i));
  }
  // Newest first, as E2B lists (order=asc: oldest first); the id breaks ties
  // so pages are stable.
  std::sort(match.begin(), match.end(), [asc = q.ascending](const sandbox_info& a,
                                                            const sandbox_info& b) {
    if (a.created_at_ms != b.created_at_ms)
      return asc ? a.created_at_ms < b.created_at_ms : a.created_at_ms > b.created_at_ms;
    return a.id < b.id;
  });
  next_token.clear();
  if (q.offset >= match.size())
    return {};
  auto end = std::min(match.size(), q.offset + q.limit);
  if (end < match.size())
    next_token = std::to_string(end);
  return {std::make_move_iterator(match.begin() + static_cast<long>(q.offset)),
          std::make_move_iterator(match.begin() + static_cast<long>(end))};
}

// -- Connect protocol -----------------------------------------------------------

const char* connect_code(errc code) {
  switch (code) {
    case errc::none: return "unknown";
    case errc::invalid_argument: return "invalid_argument";
    case errc::not_found: return "not_found";
    case errc::conflict: return "already_exists";
    case errc::too_large: return "resource_exhausted";
    case errc::resource_exhausted: return "resource_exhausted";
    case errc::unavailable: return "unavailable";
    case errc::timeout: return "deadline_exceeded";
    case errc::internal: return "internal";
  }
  return "unknown";
}

int connect_status(const char* code) {
  std::string_view c = code;
  if (c == "invalid_argument" || c == "failed_precondition" || c == "out_of_range")
    return 400;
  if (c == "unauthenticated")
    return 401;
  if (c == "permission_denied")
    return 403;
  if (c == "not_found")
    return 404;
  if (c == "already_exists" || c == "aborted")
    return 409;
  if (c == "resource_exhausted")
    return 429;
  if (c == "unimplemented")
    return 501;
  if (c == "unavailable")
    return 503;
  if (c == "deadline_exceeded")
    return 504;
  return 500;
}

std::string connect_error(const char* code, std::string_view message) {
  return json{{"code", code}, {"message", std::string{message}}}.dump();
}

std::string envelope(uint8_t flags, std::string_view payload) {
  std::string out(5, '\0');
  out[0] = static_cast<char>(flags);
  auto n = static_cast<uint32_t>(payload.size());
  out[1] = static_cast<char>(n >> 24);
  out[2] = static_cast<char>(n >> 16);
  out[3] = static_cast<char>(n >> 8);
  out[4] = static_cast<char>(n);
  out.append(payload.data(), payload.size());
  return out;
}

std::string end_of_stream(const char* code, std::string_view message) {
  if (!code)
    return envelope(0x02, "{}");
  json j{{"error", {{"code", code}, {"message", std::string{message}}}}};
  return envelope(0x02, j.dump());
}

expected<std::string> unwrap_request(std::string_view body) {
  if (body.size() < 5)
    return invalid_argument("connect: a streaming request needs one 5-byte-framed message, got "
                            + std::to_string(body.size()) + " bytes");
  auto flags = static_cast<uint8_t>(body[0]);
  uint32_t n = (uint32_t{static_cast<uint8_t>(body[1])} << 24)
               | (uint32_t{static_cast<uint8_t>(body[2])} << 16)
               | (uint32_t{static_cast<uint8_t>(body[3])} << 8) | uint32_t{static_cast<uint8_t>(body[4])};
  if (flags & 0x01)
    return invalid_argument("connect: compressed messages are not accepted");
  if (flags != 0)
    return invalid_argument("connect: unexpected envelope flags " + std::to_string(flags));
  if (n > max_envelope)
    return invalid_argument("connect: message of " + std::to_string(n) + " bytes is over the "
                            + std::to_string(max_envelope) + "-byte limit");
  if (body.size() - 5 != n)
    return invalid_argument("connect: envelope says " + std::to_string(n) + " bytes, body has "
                            + std::to_string(body.size() - 5));
  return std::string{body.substr(5)};
}

// -- process.Process -------------------------------------------------------------

expected<exec_request> parse_start(std::string_view body, bool& pty, bool* keep_stdin,
                                   std::string_view home) {
  auto j = parse_object(body, "process start");
  if (!j)
    return j.err();
  pty = j->contains("pty") && !(*j)["pty"].is_null();
  if (keep_stdin) {
    auto s = j->find("stdin");
    *keep_stdin = s != j->end() && s->is_boolean() && s->get<bool>();
  }
  auto p = j->find("process");
  if (p == j->end() || !p->is_object())
    return invalid_argument("process start: process (cmd, args, envs, cwd) is required");
  auto cmd = p->find("cmd");
  if (cmd == p->end() || !cmd->is_string() || cmd->get<std::string>().empty())
    return invalid_argument("process start: process.cmd is required");
  std::vector<std::string> args;
  if (auto a = p->find("args"); a != p->end() && !a->is_null()) {
    if (!a->is_array())
      return invalid_argument("process start: process.args must be a list of strings");
    for (auto& x : *a) {
      if (!x.is_string())
        return invalid_argument("process start: process.args must be a list of strings");
      args.push_back(x.get<std::string>());
    }
  }
  exec_request req;
  auto c = cmd->get<std::string>();
  if (c == "/bin/bash") {
    // The SDK always asks for `/bin/bash -l -c CMD`; layers without bash
    // (busybox) run it with /bin/sh, without the login flag.
    std::string script = "[ -x /bin/bash ] && exec /bin/bash \"$@\"; ";
    if (!args.empty() && args[0] == "-l")
      script += "shift; ";
    script += "exec /bin/sh \"$@\"";
    req.argv = {"/bin/sh", "-c", script, "sh"};
  } else {
    req.argv = {c};
  }
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  auto envs = string_map(p->value("envs", json{}), "process.envs");
  if (!envs)
    return envs.err();
  req.env = std::move(*envs);
  if (auto cwd = p->find("cwd"); cwd != p->end() && cwd->is_string())
    req.cwd = cwd->get<std::string>();
  if (!req.cwd.empty() && req.cwd[0] != '/')
    req.cwd = std::string{home} + (!home.empty() && home.back() == '/' ? "" : "/") + req.cwd;
  return req;
}

expected<int32_t> parse_selector(std::string_view body) {
  auto j = parse_object(body, "process selector");
  if (!j)
    return j.err();
  auto p = j->find("process");
  if (p == j->end() || !p->is_object())
    return invalid_argument("process: a selector {\"pid\": N} is required");
  if (p->contains("tag"))
    return not_found("process: selection by tag is not supported, use the pid");
  auto pid = p->find("pid");
  if (pid == p->end() || !pid->is_number_integer() || pid->get<int64_t>() <= 0
      || pid->get<int64_t>() > (1 << 30))
    return invalid_argument("process: pid must be a positive integer");
  return static_cast<int32_t>(pid->get<int64_t>());
}

expected<std::pair<int32_t, int32_t>> parse_signal(std::string_view body) {
  auto pid = parse_selector(body);
  if (!pid)
    return pid.err();
  auto j = json::parse(body, nullptr, false);
  auto s = j.find("signal");
  int32_t signo = 0;
  if (s != j.end() && s->is_string()) {
    auto name = s->get<std::string>();
    if (name == "SIGNAL_SIGKILL")
      signo = SIGKILL;
    else if (name == "SIGNAL_SIGTERM")
      signo = SIGTERM;
  } else if (s != j.end() && s->is_number_integer()) {
    auto v = s->get<int64_t>();
    if (v == SIGKILL || v == SIGTERM)
      signo = static_cast<int32_t>(v);
  }
  if (signo == 0)
    return invalid_argument("process: signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
  return std::make_pair(*pid, signo);
}

expected<std::pair<int32_t, std::string>> parse_input(std::string_view body) {
  auto pid = parse_selector(body);
  if (!pid)
    return pid.err();
  auto j = json::parse(body, nullptr, false);
  auto in = j.find("input");
  if (in == j.end() || !in->is_object())
    return invalid_argument("send input: input {\"stdin\": base64} is required");
  if (in->contains("pty"))
    return invalid_argument("send input: no PTYs here, send stdin");
  auto s = in->find("stdin");
  if (s == in->end() || !s->is_string())
    return invalid_argument("send input: input.stdin (base64) is required");
  auto data = unbase64(s->get<std::string>());
  if (!data)
    return data.err();
  return std::make_pair(*pid, std::move(*data));
}

expected<std::string> unbase64(std::string_view in) {
  std::string out;
  out.reserve(in.size() / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char ch : in) {
    int v;
    if (ch >= 'A' && ch <= 'Z')
      v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z')
      v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9')
      v = ch - '0' + 52;
    else if (ch == '+' || ch == '-')
      v = 62;
    else if (ch == '/' || ch == '_')
      v = 63;
    else if (ch == '=') {
      ++pad;
      continue;
    } else
      return invalid_argument("base64: invalid character");
    if (pad)
      return invalid_argument("base64: data after padding");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  if (pad > 2 || bits >= 6)
    return invalid_argument("base64: truncated");
  return out;
}

std::string start_event(int32_t pid) {
  return json{{"event", {{"start", {{"pid", pid}}}}}}.dump();
}

std::string data_event(int stream, std::string_view bytes) {
  return json{{"event", {{"data", {{stream == 2 ? "stderr" : "stdout", base64(bytes)}}}}}}.dump();
}

std::string end_event(const exec_result& res) {
  json end{{"exitCode", res.exit_code}, {"exited", res.exit_code < 128}};
  if (res.exit_code > 128 && res.exit_code < 128 + 65) {
    end["status"] = std::string{"signal: "} + (res.exit_code - 128 == SIGKILL ? "killed"
                                               : res.exit_code - 128 == SIGTERM ? "terminated"
                                               : std::to_string(res.exit_code - 128));
  } else {
    end["status"] = "exit status " + std::to_string(res.exit_code);
  }
  // envd's `error` is Go's exec error: set for any end but exit status 0.
  if (res.exit_code != 0)
    end["error"] = end["status"];
  return json{{"event", {{"end", end}}}}.dump();
}

std::string keepalive_event() { return R"({"event":{"keepalive":{}}})"; }

std::string encode_process_list(const std::vector<process_info>& procs) {
  json arr = json::array();
  for (auto& p : procs) {
    json args = json::array();
    for (size_t i = 1; i < p.argv.size(); ++i)
      args.push_back(p.argv[i]);
    json config{{"cmd", p.argv.empty() ? p.name : p.argv[0]},
                {"args", args},
                {"envs", json::object()}};
    arr.push_back(json{{"pid", p.pid}, {"config", config}});
  }
  return json{{"processes", arr}}.dump();
}

} // namespace dsec::e2b
