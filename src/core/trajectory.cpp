// Trajectory records as JSON lines, and the pure rules of the log (see
// trajectory.hpp).
#include "core/trajectory.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/json_codec.hpp"
#include "core/json_codec_fields.hpp"

namespace dsec::trajectory {

using nlohmann::json;
using json_codec::value_or;

namespace {

nlohmann::ordered_json to_json(const content& c) {
  nlohmann::ordered_json j;
  j["size"] = c.size;
  j["digest"] = c.digest;
  switch (c.how) {
    case keep::inline_text: j["text"] = c.data; break;
    case keep::blob: j["blob"] = true; break;
    case keep::digest_only: j["kept"] = false; break;
  }
  return j;
}

bool from_json(const json& j, content& c) {
  if (!j.is_object())
    return false;
  auto size = j.find("size");
  auto digest = j.find("digest");
  if (size == j.end() || !size->is_number_integer() || digest == j.end() || !digest->is_string())
    return false;
  c.size = size->get<int64_t>();
  c.digest = digest->get<std::string>();
  if (auto t = j.find("text"); t != j.end() && t->is_string()) {
    c.how = keep::inline_text;
    c.data = t->get<std::string>();
  } else if (auto k = j.find("kept"); k != j.end() && k->is_boolean() && !k->get<bool>()) {
    c.how = keep::digest_only;
  } else {
    c.how = keep::blob;
  }
  return true;
}


std::string shorten(const std::string& s) {
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

std::string argv_text(const std::vector<std::string>& argv) {
  std::string out;
  for (auto& a : argv)
    out += (out.empty() ? "" : " ") + a;
  return out;
}

std::string env_text(const std::map<std::string, std::string>& env) {
  std::string out;
  for (auto& [k, v] : env)
    out += (out.empty() ? "" : ",") + k + "=" + v;
  return "{" + out + "}";
}

} // namespace

keep keep_for(std::string_view data, size_t inline_max, size_t blob_max) {
  if (data.size() <= inline_max && valid_utf8(data))
    return keep::inline_text;
  return data.size() <= blob_max ? keep::blob : keep::digest_only;
}

std::string encode(const record& r) {
  // Ordered: "seq" first, so a reader (and read_log's since filter) finds it
  // without parsing the line.
  nlohmann::ordered_json j;
  j["seq"] = r.seq;
  j["kind"] = r.kind;
  j["at"] = r.at_ms / 1000.0;
  if (r.kind == "spec") {
    j["id"] = r.id;
    j["node"] = r.node;
    j["spec"] = nlohmann::ordered_json::parse(json_codec::encode(r.spec));
  } else if (r.kind == "exec" && r.background) {
    j["background"] = true;
    j["pid"] = r.pid;
    j["cmd"] = r.argv;
    j["cwd"] = r.cwd;
    j["env"] = r.env;
    j["stdin"] = to_json(r.stdin_data);
    j["timeout_s"] = r.timeout_s;
  } else if (r.kind == "exit") {
    j["pid"] = r.pid;
    j["exit_code"] = r.exit_code;
    j["stdout"] = to_json(r.stdout_data);
    j["stderr"] = to_json(r.stderr_data);
    j["timed_out"] = r.timed_out;
    j["truncated"] = r.truncated;
    j["duration_ms"] = r.duration_ms;
  } else if (r.kind == "exec") {
    if (!r.step.empty())
      j["step"] = r.step;
    j["cmd"] = r.argv;
    j["cwd"] = r.cwd;
    j["env"] = r.env;
    j["stdin"] = to_json(r.stdin_data);
    j["timeout_s"] = r.timeout_s;
    j["exit_code"] = r.exit_code;
    j["stdout"] = to_json(r.stdout_data);
    j["stderr"] = to_json(r.stderr_data);
    j["timed_out"] = r.timed_out;
    j["truncated"] = r.truncated;
    j["duration_ms"] = r.duration_ms;
  } else if (r.kind == "file") {
    j["path"] = r.path;
    j["size"] = r.file.size;
    j["digest"] = r.file.digest;
    j["content"] = to_json(r.file);
  } else if (r.kind == "rebuilt") {
    j["source"] = r.source;
    j["upto_seq"] = r.upto_seq;
  } else if (r.kind == "destroyed") {
    j["reason"] = r.reason;
  } else if (r.kind == "session_open") {
    j["session"] = r.session;
    j["shell"] = r.argv.empty() ? std::string{} : r.argv[0];
    j["cwd"] = r.cwd;
    j["env"] = r.env;
  } else if (r.kind == "session_run") {
    j["session"] = r.session;
    j["cmd"] = r.argv.empty() ? std::string{} : r.argv[0];
    j["timeout_s"] = r.timeout_s;
    j["exit_code"] = r.exit_code;
    j["stdout"] = to_json(r.stdout_data);
    j["stderr"] = to_json(r.stderr_data);
    j["timed_out"] = r.timed_out;
    j["truncated"] = r.truncated;
    j["duration_ms"] = r.duration_ms;
  } else if (r.kind == "session_close") {
    j["session"] = r.session;
  }
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

expected<record> decode(std::string_view line) {
  auto j = json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("trajectory record: not a JSON object");
  record r;
  auto seq = j.find("seq");
  auto kind = j.find("kind");
  if (seq == j.end() || !seq->is_number_unsigned() || kind == j.end() || !kind->is_string())
    return invalid_argument("trajectory record: seq or kind is missing");
  r.seq = seq->get<uint64_t>();
  r.kind = kind->get<std::string>();
  r.at_ms = static_cast<int64_t>(std::llround(value_or<double>(j, "at", 0) * 1000));
  auto bad = [&](const char* what) {
    return invalid_argument("trajectory record " + std::to_string(r.seq) + " (" + r.kind
                            + "): " + what);
  };
  if (r.kind == "spec") {
    r.id = value_or<std::string>(j, "id", "");
    r.node = value_or<std::string>(j, "node", "");
    auto spec = j.find("spec");
    if (spec == j.end() || !spec->is_object())
      return bad("spec is missing");
    auto parsed = json_codec::parse_spec(spec->dump());
    if (!parsed)
      return bad(("spec: " + parsed.err().message).c_str());
    r.spec = std::move(*parsed);
  } else if (r.kind == "exit") {
    r.background = true;
    r.pid = value_or<int32_t>(j, "pid", 0);
    r.exit_code = value_or<int32_t>(j, "exit_code", 0);
    r.timed_out = value_or<bool>(j, "timed_out", false);
    r.truncated = value_or<bool>(j, "truncated", false);
    r.duration_ms = value_or<double>(j, "duration_ms", 0);
    for (auto [key, out] : {std::pair{"stdout", &r.stdout_data}, std::pair{"stderr", &r.stderr_data}}) {
      auto it = j.find(key);
      if (it == j.end() || !from_json(*it, *out))
        return bad((std::string{key} + " is missing or malformed").c_str());
    }
  } else if (r.kind == "exec") {
    r.background = value_or<bool>(j, "background", false);
    r.pid = value_or<int32_t>(j, "pid", 0);
    r.step = value_or<std::string>(j, "step", "");
    r.argv = value_or<std::vector<std::string>>(j, "cmd", {});
    r.cwd = value_or<std::string>(j, "cwd", "");
    r.env = value_or<std::map<std::string, std::string>>(j, "env", {});
    r.timeout_s = value_or<double>(j, "timeout_s", 0);
    r.exit_code = value_or<int32_t>(j, "exit_code", 0);
    r.timed_out = value_or<bool>(j, "timed_out", false);
    r.truncated = value_or<bool>(j, "truncated", false);
    r.duration_ms = value_or<double>(j, "duration_ms", 0);
    if (r.argv.empty())
      return bad("cmd is missing");
    for (auto [key, out] : {std::pair{"stdin", &r.stdin_data}, std::pair{"stdout", &r.stdout_data},
                            std::pair{"stderr", &r.stderr_data}}) {
      if (r.background && key != std::string_view{"stdin"})
        continue; // a background start has no result yet
      auto it = j.find(key);
      if (it == j.end() || !from_json(*it, *out))
        return bad((std::string{key} + " is missing or malformed").c_str());
    }
  } else if (r.kind == "file") {
    r.path = value_or<std::string>(j, "path", "");
    auto c = j.find("content");
    if (r.path.empty() || c == j.end() || !from_json(*c, r.file))
      return bad("path or content is missing");
  } else if (r.kind == "rebuilt") {
    r.source = value_or<std::string>(j, "source", "");
    r.upto_seq = value_or<uint64_t>(j, "upto_seq", 0);
  } else if (r.kind == "destroyed") {
    r.reason = value_or<std::string>(j, "reason", "");
  } else if (r.kind == "session_open" || r.kind == "session_run" || r.kind == "session_close") {
    r.session = value_or<std::string>(j, "session", "");
    if (r.session.empty())
      return bad("session is missing");
    if (r.kind == "session_open") {
      r.argv = {value_or<std::string>(j, "shell", "")};
      r.cwd = value_or<std::string>(j, "cwd", "");
      r.env = value_or<std::map<std::string, std::string>>(j, "env", {});
    } else if (r.kind == "session_run") {
      auto cmd = j.find("cmd");
      if (cmd == j.end() || !cmd->is_string())
        return bad("cmd is missing");
      r.argv = {cmd->get<std::string>()};
      r.timeout_s = value_or<double>(j, "timeout_s", 0);
      r.exit_code = value_or<int32_t>(j, "exit_code", 0);
      r.timed_out = value_or<bool>(j, "timed_out", false);
      r.truncated = value_or<bool>(j, "truncated", false);
      r.duration_ms = value_or<double>(j, "duration_ms", 0);
      for (auto [key, out] : {std::pair{"stdout", &r.stdout_data}, std::pair{"stderr", &r.stderr_data}}) {
        auto it = j.find(key);
        if (it == j.end() || !from_json(*it, *out))
          return bad((std::string{key} + " is missing or malformed").c_str());
      }
    }
  }
  return r;
}

status validate_step(std::string_view step) {
  if (step.empty())
    return invalid_argument("step: must not be empty");
  if (step.size() > limits::max_step)
    return invalid_argument("step: longer than " + std::to_string(limits::max_step) + " bytes");
  for (unsigned char c : step) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || std::string_view{"._:/@+=-"}.find(static_cast<char>(c)) != std::string_view::npos;
    if (!ok)
      return invalid_argument("step: \"" + shorten(std::string{step})
                              + "\" has a character outside [A-Za-z0-9._:/@+=-]");
  }
  return {};
}

std::vector<std::string> step_differences(const record& logged, const exec_request& req,
                                          const std::string& stdin_digest) {
  std::vector<std::string> out;
  if (logged.argv != req.argv)
    out.emplace_back("cmd");
  if (logged.cwd != req.cwd)
    out.emplace_back("cwd");
  if (logged.env != req.env)
    out.emplace_back("env");
  if (logged.stdin_data.digest != stdin_digest)
    out.emplace_back("stdin");
  return out;
}

error step_conflict(const std::string& sandbox_id, const record& logged,
                    const exec_request& req, const std::vector<std::string>& fields) {
  std::string what;
  for (auto& f : fields) {
    std::string was, now;
    if (f == "cmd") {
      was = argv_text(logged.argv);
      now = argv_text(req.argv);
    } else if (f == "cwd") {
      was = logged.cwd;
      now = req.cwd;
    } else if (f == "env") {
      was = env_text(logged.env);
      now = env_text(req.env);
    } else {
      was = std::to_string(logged.stdin_data.size) + " bytes " + logged.stdin_data.digest.substr(0, 19);
      now = std::to_string(req.stdin_data.size()) + " bytes";
    }
    what += (what.empty() ? "" : "; ") + f + " was \"" + shorten(was) + "\", now \""
            + shorten(now) + "\"";
  }
  return conflict("step \"" + logged.step + "\" of sandbox " + sandbox_id
                  + " was logged (seq " + std::to_string(logged.seq)
                  + ") with another request: " + what);
}

exec_result result_of(const record& r) {
  exec_result out;
  out.exit_code = r.exit_code;
  out.stdout_data = r.stdout_data.data;
  out.stderr_data = r.stderr_data.data;
  out.timed_out = r.timed_out;
  out.truncated = r.truncated;
  out.duration_ms = r.duration_ms;
  out.replayed = true;
  return out;
}

expected<int64_t> parse_seq(std::string_view field, std::string_view text) {
  auto bad = [&] {
    return invalid_argument(std::string{field} + ": must be a whole number >= 0, got \""
                            + shorten(std::string{text}) + "\"");
  };
  if (text.empty() || text.size() > 16 || text.find_first_not_of("0123456789") != std::string_view::npos)
    return bad();
  int64_t v = 0;
  for (char c : text)
    v = v * 10 + (c - '0');
  if (v > (int64_t{1} << 53))
    return bad();
  return v;
}

expected<int64_t> parse_replay(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return int64_t{-1};
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("replay: body must be a JSON object such as {\"upto_seq\": 12}");
  int64_t upto = -1;
  for (auto& [k, v] : j.items()) {
    if (k != "upto_seq")
      return invalid_argument("replay: unknown field \"" + k + "\"");
    if (v.is_null())
      continue;
    if (!v.is_number_unsigned() || v.get<uint64_t>() > (uint64_t{1} << 53))
      return invalid_argument("replay: upto_seq must be a whole number >= 0");
    upto = v.get<int64_t>();
  }
  return upto;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    if (c < 0x80)
      n = 0;
    else if (c >= 0xc2 && c <= 0xdf)
      n = 1;
    else if (c >= 0xe0 && c <= 0xef)
      n = 2;
    else if (c >= 0xf0 && c <= 0xf4)
      n = 3;
    else
      return false;
    if (i + n >= s.size() && n > 0)
      return false;
    for (size_t k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2)
        return false;
    if (n >= 2) { // no overlong forms, no surrogates, nothing past U+10FFFF
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90)
          || (c == 0xf4 && c1 >= 0x90))
        return false;
    }
    i += n + 1;
  }
  return true;
}

} // namespace dsec::trajectory
