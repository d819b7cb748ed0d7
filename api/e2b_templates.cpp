// E2B's template build API, the pure half (e2b_templates.hpp).
#include "api/e2b_templates.hpp"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/image_reference.hpp"

namespace dsec::e2b {

namespace {

using nlohmann::json;

constexpr size_t max_part = 64;
constexpr size_t max_steps = 256;
constexpr size_t max_tags = 32;
/// A start or ready command is a shell line; 64 KiB is far beyond any real
/// one and keeps the store's record small.
constexpr size_t max_command = 64 * 1024;

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool alnum(char c) { return lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

/// The body as JSON (an empty body is `{}`); discarded when it is not JSON.
json parse_object(std::string_view body) {
  return json::parse(body.empty() ? std::string_view{"{}"} : body, nullptr, false);
}

/// `"..."` for a Dockerfile word: quotes, backslashes and `$` escaped, so the
/// builder's substitution leaves the text as the SDK sent it.
std::string df_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\' || c == '$')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

/// A JSON array word for COPY's exec form, `$` escaped for substitution.
std::string json_word(const std::string& s) {
  std::string esc;
  for (char c : s) {
    if (c == '$')
      esc += '\\';
    esc += c;
  }
  return json(esc).dump();
}

status no_newline(const std::string& s, const std::string& what) {
  if (s.find_first_of("\n\r") != std::string::npos)
    return invalid_argument("template build: " + what + " must not contain a line break");
  return {};
}

std::string record_path(const std::string& root) { return root + "/e2b_templates.json"; }

std::mutex& record_mutex() {
  static std::mutex m;
  return m;
}

} // namespace

status check_tag(std::string_view tag) {
  if (tag.empty() || tag.size() > max_part)
    return invalid_argument("template tag \"" + std::string{tag.substr(0, 100)}
                            + "\": 1-64 characters are required");
  for (char c : tag)
    if (!alnum(c) && c != '.' && c != '_' && c != '-')
      return invalid_argument("template tag \"" + std::string{tag.substr(0, 100)}
                              + "\": only A-Z, a-z, 0-9, '.', '_' and '-' are allowed");
  return {};
}

expected<template_name> parse_template_name(std::string_view text, const char* what) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(std::string{what} + " \"" + std::string{text.substr(0, 100)}
                            + "\": " + why);
  };
  template_name out;
  auto colon = text.find(':');
  out.name = std::string{text.substr(0, colon)};
  if (colon != std::string_view::npos) {
    out.tag = std::string{text.substr(colon + 1)};
    if (auto st = check_tag(out.tag); !st)
      return bad(st.err().message);
  }
  if (out.name.empty() || out.name.size() > max_part || !lower_alnum(out.name[0]))
    return bad("a name is 1-64 characters starting with a lower-case letter or digit");
  for (char c : out.name)
    if (!lower_alnum(c) && c != '.' && c != '_' && c != '-')
      return bad("a name has only a-z, 0-9, '.', '_' and '-' (dsec has no team namespaces)");
  return out;
}

expected<build_request> parse_build_request(std::string_view body) {
  auto j = parse_object(body);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("POST /v3/templates: the body is not a JSON object");
  build_request out;
  std::string name;
  for (auto& [k, v] : j.items()) {
    if ((k == "name" || k == "alias") && v.is_string())
      name = v.get<std::string>();
    else if (k == "tags" && v.is_array()) {
      for (auto& t : v) {
        if (!t.is_string())
          return invalid_argument("POST /v3/templates: tags must be strings");
        out.tags.push_back(t.get<std::string>());
      }
    } else if (k == "cpuCount" && v.is_number()) {
      out.cpu = v.get<double>();
      if (out.cpu <= 0 || out.cpu > 64)
        return invalid_argument("POST /v3/templates: cpuCount must be in (0, 64]");
    } else if (k == "memoryMB" && v.is_number_integer()) {
      out.memory_mb = v.get<int64_t>();
      if (out.memory_mb < 8 || out.memory_mb > (1 << 20))
        return invalid_argument("POST /v3/templates: memoryMB must be in [8, 1048576]");
    } else if (v.is_null()) {
      continue;
    } else {
      return invalid_argument("POST /v3/templates: field " + k.substr(0, 64)
                              + " is not supported by dsec (only name, alias, tags, cpuCount"
                                " and memoryMB)");
    }
  }
  if (name.empty())
    return invalid_argument("POST /v3/templates: name is required");
  auto tn = parse_template_name(name, "template name");
  if (!tn)
    return tn.err();
  out.name = tn->name;
  if (!tn->tag.empty())
    out.tags.insert(out.tags.begin(), tn->tag);
  if (out.tags.size() > max_tags)
    return invalid_argument("POST /v3/templates: more than 32 tags");
  for (auto& t : out.tags)
    if (auto st = check_tag(t); !st)
      return st.err();
  if (out.tags.empty())
    out.tags.push_back(default_tag);
  return out;
}

bool is_files_hash(std::string_view s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

namespace {

expected<template_step> parse_step(const json& v, size_t i) {
  auto where = "template build: step " + std::to_string(i + 1);
  if (!v.is_object())
    return invalid_argument(where + ": not a JSON object");
  template_step s;
  for (auto& [k, f] : v.items()) {
    if (k == "type" && f.is_string())
      s.type = f.get<std::string>();
    else if (k == "args" && f.is_array()) {
      for (auto& a : f) {
        if (!a.is_string())
          return invalid_argument(where + ": args must be strings");
        s.args.push_back(a.get<std::string>());
      }
    } else if (k == "filesHash" && f.is_string())
      s.files_hash = f.get<std::string>();
    else if (k == "force" && f.is_boolean())
      s.force = f.get<bool>();
    // The SDK sends these with COPY; they shape its upload, not the build.
    else if ((k == "forceUpload" || k == "resolveSymlinks" || k == "gzip") && f.is_boolean())
      continue;
    else if (f.is_null())
      continue;
    else
      return invalid_argument(where + ": field " + k.substr(0, 64) + " is not supported by dsec");
  }
  where += " (" + s.type.substr(0, 32) + ")";
  auto args_n = [&](size_t lo, size_t hi) -> status {
    if (s.args.size() < lo || s.args.size() > hi)
      return invalid_argument(where + ": expected " + std::to_string(lo) + "-"
                              + std::to_string(hi) + " args, got "
                              + std::to_string(s.args.size()));
    return {};
  };
  if (s.type == "RUN") {
    if (auto st = args_n(1, 2); !st)
      return st.err();
    if (s.args[0].empty())
      return invalid_argument(where + ": the command is empty");
  } else if (s.type == "COPY") {
    if (auto st = args_n(2, 4); !st)
      return st.err();
    if (s.args.size() > 2 && !s.args[2].empty())
      return invalid_argument(where + ": copy's user option is not supported by dsec (files are"
                                      " owned by root; chown them in a runCmd)");
    if (s.args.size() > 3 && !s.args[3].empty())
      return invalid_argument(where + ": copy's mode option is not supported by dsec (chmod"
                                      " them in a runCmd)");
    if (!is_files_hash(s.files_hash))
      return invalid_argument(where + ": filesHash must be a sha256 hex digest");
    if (s.args[0].empty() || s.args[0][0] == '/' || s.args[0].find("..") != std::string::npos)
      return invalid_argument(where + ": source " + s.args[0].substr(0, 200)
                              + " must be a relative path inside the context");
    if (s.args[1].empty())
      return invalid_argument(where + ": the destination is empty");
    for (auto& a : s.args)
      if (auto st = no_newline(a, "a COPY path"); !st)
        return st.err();
  } else if (s.type == "ENV") {
    if (s.args.empty() || s.args.size() % 2 != 0)
      return invalid_argument(where + ": expected name, value pairs");
    for (size_t k = 0; k < s.args.size(); k += 2) {
      auto& n = s.args[k];
      if (n.empty() || n.find_first_of("= \t\"'\\$") != std::string::npos)
        return invalid_argument(where + ": bad variable name \"" + n.substr(0, 64) + "\"");
      if (auto st = no_newline(s.args[k + 1], "an ENV value"); !st)
        return st.err();
    }
  } else if (s.type == "WORKDIR" || s.type == "USER") {
    if (auto st = args_n(1, 1); !st)
      return st.err();
    if (s.args[0].empty())
      return invalid_argument(where + ": the argument is empty");
    if (auto st = no_newline(s.args[0], s.type); !st)
      return st.err();
  } else {
    return invalid_argument("template build: step " + std::to_string(i + 1) + " has type \""
                            + s.type.substr(0, 32)
                            + "\", which dsec does not build (RUN, COPY, ENV, WORKDIR, USER)");
  }
  return s;
}

} // namespace

bool inherit_start(build_start& child, const std::string& parent_start,
                   const std::string& parent_ready) {
  if (!child.start_cmd.empty() || (parent_start.empty() && parent_ready.empty()))
    return false;
  child.start_cmd = parent_start;
  if (child.ready_cmd.empty())
    child.ready_cmd = parent_ready;
  return true;
}

expected<build_start> parse_build_start(std::string_view body) {
  auto j = parse_object(body);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("template build: the body is not a JSON object");
  build_start out;
  for (auto& [k, v] : j.items()) {
    if (v.is_null())
      continue;
    if (k == "fromImage" && v.is_string())
      out.from_image = v.get<std::string>();
    else if (k == "fromTemplate" && v.is_string())
      out.from_template = v.get<std::string>();
    else if (k == "force" && v.is_boolean())
      out.force = v.get<bool>();
    else if (k == "steps" && v.is_array()) {
      if (v.size() > max_steps)
        return invalid_argument("template build: more than 256 steps");
      for (size_t i = 0; i < v.size(); ++i) {
        auto s = parse_step(v[i], i);
        if (!s)
          return s.err();
        out.force = out.force || s->force;
        out.steps.push_back(std::move(*s));
      }
    } else if (k == "startCmd" || k == "readyCmd") {
      if (!v.is_string())
        return invalid_argument("template build: " + k + " must be a string");
      auto cmd = v.get<std::string>();
      if (cmd.size() > max_command)
        return invalid_argument("template build: " + k + " is longer than 64 KiB");
      if (cmd.find('\0') != std::string::npos)
        return invalid_argument("template build: " + k + " contains a NUL byte");
      (k == "startCmd" ? out.start_cmd : out.ready_cmd) = std::move(cmd);
    } else if (k == "fromImageRegistry") {
      return invalid_argument("template build: fromImageRegistry (registry credentials per"
                              " build) is not supported by dsec: give the node --registry-auth");
    } else {
      return invalid_argument("template build: field " + k.substr(0, 64)
                              + " is not supported by dsec");
    }
  }
  if (out.from_image.empty() == out.from_template.empty())
    return invalid_argument("template build: exactly one of fromImage and fromTemplate is"
                            " required");
  if (out.from_image == "e2bdev/base") { // E2B's default base image: its base template
    out.from_template = "base";
    out.from_image.clear();
  }
  if (!out.from_image.empty()) {
    auto ref = registry::parse_image_reference(out.from_image);
    if (!ref)
      return invalid_argument("template build: fromImage " + out.from_image.substr(0, 200)
                              + ": " + ref.err().message);
    auto first = out.from_image.substr(0, out.from_image.find('/'));
    bool has_registry = out.from_image.find('/') != std::string::npos
                        && (first.find_first_of(".:") != std::string::npos || first == "localhost");
    if (!has_registry)
      return invalid_argument("template build: fromImage " + out.from_image.substr(0, 200)
                              + " names no registry (a Docker Hub name): only images in a"
                                " registry this node reaches work, as host:port/repo:tag");
  }
  return out;
}

copy_target copy_target_of(const std::string& src, const std::string& dest, bool single_file) {
  copy_target t;
  bool glob = src.find_first_of("*?[") != std::string::npos;
  bool dest_is_dir = dest.back() == '/' || dest == "." || dest == "..";
  if (single_file && !glob && !dest_is_dir) {
    t.rename = true;
    auto slash = dest.rfind('/');
    t.entry_name = slash == std::string::npos ? dest : dest.substr(slash + 1);
    t.dest_dir = slash == std::string::npos ? "./" : slash == 0 ? "/" : dest.substr(0, slash + 1);
    return t;
  }
  t.dest_dir = dest_is_dir ? dest : dest + "/";
  return t;
}

expected<std::string> make_dockerfile(const build_start& b, const std::string& from,
                                      const std::string& base_user,
                                      const std::map<size_t, copy_layout>& copies,
                                      std::vector<int>& step_of) {
  std::string out = "FROM " + from + "\n";
  step_of.clear();
  std::string user = base_user.empty() ? "root" : base_user;
  auto add = [&](size_t i, const std::string& line) {
    out += line + "\n";
    step_of.push_back(static_cast<int>(i + 1));
  };
  for (size_t i = 0; i < b.steps.size(); ++i) {
    auto& s = b.steps[i];
    if (s.type == "RUN") {
      bool as_other = s.args.size() > 1 && !s.args[1].empty() && s.args[1] != user;
      if (as_other)
        add(i, "USER " + df_quoted(s.args[1]));
      add(i, "RUN " + json(std::vector<std::string>{"/bin/sh", "-c", s.args[0]}).dump());
      if (as_other)
        add(i, "USER " + df_quoted(user));
    } else if (s.type == "COPY") {
      auto it = copies.find(i);
      if (it == copies.end())
        return internal_error("template build: step " + std::to_string(i + 1)
                              + " (COPY) has no files laid out");
      add(i, "COPY [" + json_word(it->second.dir + "/") + ", " + json_word(it->second.dest) + "]");
    } else if (s.type == "ENV") {
      std::string line = "ENV";
      for (size_t k = 0; k < s.args.size(); k += 2)
        line += " " + s.args[k] + "=" + df_quoted(s.args[k + 1]);
      add(i, line);
    } else if (s.type == "WORKDIR") {
      add(i, "WORKDIR " + df_quoted(s.args[0]));
    } else if (s.type == "USER") {
      user = s.args[0];
      add(i, "USER " + df_quoted(user));
    }
  }
  return out;
}

std::string rfc3339(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

std::string encode_build_status(const std::string& template_id, const std::string& build_id,
                                const std::string& status, const std::vector<build_log>& logs,
                                size_t offset, const std::string& reason, const std::string& step) {
  auto entries = json::array();
  auto lines = json::array();
  for (size_t i = offset; i < logs.size() && entries.size() < 100; ++i) {
    auto& l = logs[i];
    entries.push_back({{"timestamp", rfc3339(l.at_ms)}, {"level", l.level}, {"message", l.message}});
    lines.push_back(l.message);
  }
  json j = {{"templateID", template_id}, {"buildID", build_id}, {"status", status},
            {"logEntries", entries}, {"logs", lines}};
  if (!reason.empty()) {
    j["reason"] = {{"message", reason}};
    if (!step.empty())
      j["reason"]["step"] = step;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// -- the store's record --------------------------------------------------------

expected<template_map> read_templates(const std::string& root) {
  auto path = record_path(root);
  std::ifstream in(path);
  template_map out;
  if (!in)
    return out; // nothing built yet
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = json::parse(ss.str(), nullptr, false);
  auto corrupt = [&](const std::string& why) {
    return error{errc::internal, "E2B template record " + path + " is corrupt: " + why};
  };
  if (j.is_discarded() || !j.is_object())
    return corrupt("not a JSON object");
  for (auto& [name, tags] : j.items()) {
    if (!tags.is_object())
      return corrupt("template " + name.substr(0, 100));
    for (auto& [tag, v] : tags.items()) {
      if (!v.is_object() || !v.value("layer", json()).is_string()
          || !v.value("buildID", json()).is_string())
        return corrupt("template " + name.substr(0, 100) + " tag " + tag.substr(0, 100));
      template_tag t;
      t.layer = v["layer"].get<std::string>();
      t.build_id = v["buildID"].get<std::string>();
      t.created_at_ms = v.value("createdAt", int64_t{0});
      t.cpu = v.value("cpuCount", 0.0);
      t.memory_mb = v.value("memoryMB", int64_t{0});
      const std::pair<const char*, std::string*> cmds[] = {{"startCmd", &t.start_cmd},
                                                           {"readyCmd", &t.ready_cmd}};
      for (auto [key, field] : cmds) {
        auto c = v.find(key);
        if (c == v.end())
          continue;
        if (!c->is_string())
          return corrupt("template " + name.substr(0, 100) + " tag " + tag.substr(0, 100) + " "
                         + key);
        *field = c->get<std::string>();
      }
      out[name][tag] = std::move(t);
    }
  }
  return out;
}

status write_templates(const std::string& root, const template_map& all) {
  std::lock_guard<std::mutex> guard{record_mutex()};
  json j = json::object();
  for (auto& [name, tags] : all) {
    if (tags.empty())
      continue;
    auto& o = j[name] = json::object();
    for (auto& [tag, t] : tags) {
      o[tag] = {{"layer", t.layer}, {"buildID", t.build_id}, {"createdAt", t.created_at_ms},
                {"cpuCount", t.cpu}, {"memoryMB", t.memory_mb}};
      if (!t.start_cmd.empty())
        o[tag]["startCmd"] = t.start_cmd;
      if (!t.ready_cmd.empty())
        o[tag]["readyCmd"] = t.ready_cmd;
    }
  }
  auto path = record_path(root);
  auto tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out.flush())
      return error{errc::internal, "write " + tmp + ": failed"};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return error{errc::internal, "rename " + tmp + " to " + path + ": failed"};
  return {};
}

} // namespace dsec::e2b
