// Parsing, installing and expanding named egress sources (see
// egress_sources.hpp).
#include "core/egress_sources.hpp"

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

namespace dsec::net {

namespace {

using json = nlohmann::json;

std::mutex g_m;
egress_sources g_sources;
std::string g_upstream;

// Line of byte `pos` in `text` (1-based).
size_t line_of(std::string_view text, size_t pos) {
  size_t line = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i)
    line += text[i] == '\n';
  return line;
}

// The line where `"name"` is first written as a key, for errors after the
// parse (nlohmann keeps no positions).
size_t line_of_key(std::string_view text, const std::string& key) {
  auto pos = text.find("\"" + key + "\"");
  return pos == std::string_view::npos ? 0 : line_of(text, pos);
}

std::string digest_of(const std::map<std::string, std::vector<std::string>>& m) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
    h ^= 0xff; // separator
    h *= 1099511628211ull;
  };
  for (auto& [name, entries] : m) {
    mix(name);
    for (auto& e : entries)
      mix(e);
    mix("\n");
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

} // namespace

bool is_source_name(std::string_view s) {
  if (s.empty() || s.size() > 32 || !(s[0] >= 'a' && s[0] <= 'z'))
    return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

expected<egress_sources> parse_egress_sources(std::string_view text, const std::string& origin) {
  auto where = [&](size_t line) {
    return "egress sources " + origin + (line ? " line " + std::to_string(line) : "") + ": ";
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return invalid_argument(where(line_of(text, e.byte ? e.byte - 1 : 0))
                            + "not JSON: " + e.what());
  }
  if (!j.is_object())
    return invalid_argument(where(1) + "must be a JSON object of name -> [\"host:port\", ...]");
  egress_sources out;
  for (auto& [name, v] : j.items()) {
    size_t line = line_of_key(text, name);
    if (!is_source_name(name))
      return invalid_argument(where(line) + "\"" + name.substr(0, 64)
                              + "\": a name is 1-32 of [a-z0-9_-] starting with a letter");
    if (!v.is_array() || v.empty())
      return invalid_argument(where(line) + "\"" + name
                              + "\": must be a non-empty list of \"host:port\" strings");
    std::vector<std::string> entries;
    std::vector<allow_entry> parsed;
    for (size_t i = 0; i < v.size(); ++i) {
      auto field = "\"" + name + "\"[" + std::to_string(i) + "]";
      if (!v[i].is_string())
        return invalid_argument(where(line) + field + ": must be a string");
      auto s = v[i].get<std::string>();
      auto e = parse_allow_entry(s);
      if (!e) {
        auto at = text.find("\"" + s + "\"");
        return invalid_argument(where(at == std::string_view::npos ? line : line_of(text, at))
                                + field + ": " + e.err().message);
      }
      entries.push_back(std::move(s));
      parsed.push_back(std::move(*e));
    }
    if (entries.size() > max_allow_entries)
      return invalid_argument(where(line) + "\"" + name + "\": at most "
                              + std::to_string(max_allow_entries) + " entries");
    out.by_name[name] = std::move(entries);
    out.parsed[name] = std::move(parsed);
  }
  out.digest = digest_of(out.by_name);
  return out;
}

expected<egress_sources> load_egress_sources(const std::string& path) {
  std::ifstream f(path);
  if (!f)
    return invalid_argument("egress sources " + path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_egress_sources(ss.str(), path);
}

void install_egress_sources(egress_sources s) {
  std::lock_guard<std::mutex> g(g_m);
  g_sources = std::move(s);
}

egress_sources installed_egress_sources() {
  std::lock_guard<std::mutex> g(g_m);
  return g_sources;
}

std::string known_sources_text() {
  std::lock_guard<std::mutex> g(g_m);
  if (g_sources.by_name.empty())
    return "none are configured on this node (dsec node --egress-sources FILE)";
  std::string out = "known: ";
  bool first = true;
  for (auto& [name, _] : g_sources.by_name) {
    out += (first ? "" : ", ") + name;
    first = false;
  }
  return out;
}

expected<std::vector<allow_entry>> expand_source(const std::string& name) {
  {
    std::lock_guard<std::mutex> g(g_m);
    auto it = g_sources.parsed.find(name);
    if (it != g_sources.parsed.end() && !it->second.empty())
      return it->second;
  }
  return invalid_argument("network.allow: unknown egress source \"" + name.substr(0, 64)
                          + "\"; " + known_sources_text());
}

expected<std::vector<sourced_entry>> parse_allow_list_sourced(
  const std::vector<std::string>& allow) {
  if (allow.size() > max_allow_entries)
    return invalid_argument("network.allow: at most " + std::to_string(max_allow_entries)
                            + " entries, got " + std::to_string(allow.size()));
  std::vector<sourced_entry> out;
  for (auto& s : allow) {
    if (is_source_name(s)) {
      auto named = expand_source(s);
      if (!named)
        return named.err();
      for (auto& n : *named)
        out.push_back({std::move(n), s});
      continue;
    }
    auto e = parse_allow_entry(s);
    if (!e)
      return e.err();
    out.push_back({std::move(*e), ""});
  }
  return out;
}

void set_dns_upstream(std::string host_port) {
  std::lock_guard<std::mutex> g(g_m);
  g_upstream = std::move(host_port);
}

std::string dns_upstream() {
  std::lock_guard<std::mutex> g(g_m);
  return g_upstream;
}

} // namespace dsec::net
