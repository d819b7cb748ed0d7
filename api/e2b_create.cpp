// E2B create options onto a dsec spec (e2b_create.hpp).
#include "api/e2b_create.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <optional>

#include <nlohmann/json.hpp>

#include "api/e2b_codec_detail.hpp"
#include "core/allow_list.hpp"
#include "core/deny_list.hpp"
#include "core/egress_sources.hpp"

namespace dsec::e2b {

namespace {

using nlohmann::json;

/// E2B's "all traffic" selector (ALL_TRAFFIC in its SDKs).
constexpr const char* all_traffic = "0.0.0.0/0";

error refused(const std::string& what, const std::string& option, const std::string& why) {
  return invalid_argument(what + ": " + option + " is not implemented by dsec (" + why + ")");
}

error refused(const std::string& option, const std::string& why) {
  return refused("create sandbox", option, why);
}

bool present(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

/// An E2B address selector (IP, CIDR, domain) as a dsec allow entry, every port.
std::string allow_entry_of(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]:*" : host + ":*";
}

expected<std::vector<std::string>> selector_list(const std::string& what, const json& net,
                                                 const char* key) {
  std::vector<std::string> out;
  auto it = net.find(key);
  if (it == net.end() || it->is_null())
    return out;
  std::string field = std::string{"network."} + key;
  if (!it->is_array())
    return invalid_argument(what + ": " + field + " must be a list of strings");
  for (auto& v : *it) {
    if (!v.is_string() || v.get<std::string>().empty())
      return invalid_argument(what + ": " + field + " must be a list of non-empty strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

/// network.allowOut/denyOut and allow_internet_access onto spec.network.
status apply_network(const std::string& what, const json& j, sandbox_spec& spec) {
  std::optional<bool> internet;
  for (const char* key : {"allow_internet_access", "allowInternetAccess"})
    if (present(j, key)) {
      if (!j[key].is_boolean())
        return invalid_argument(std::string{what + ": "} + key + " must be a boolean");
      internet = j[key].get<bool>();
    }
  std::vector<std::string> allow_out, deny_out;
  if (auto nw = j.find("network"); nw != j.end() && !nw->is_null()) {
    if (!nw->is_object())
      return invalid_argument(what + ": network must be an object");
    for (auto& [k, v] : nw->items()) {
      if (v.is_null() || k == "allowOut" || k == "denyOut" || k == "allowPublicTraffic"
          || k == "maskRequestHost") // the last two: api/e2b_ports.hpp
        continue;
      return refused(what, "network." + k, "dsec's network is an allow-list of addresses and "
                                     "domains: network.allowOut");
    }
    auto allow = selector_list(what, *nw, "allowOut");
    auto deny = selector_list(what, *nw, "denyOut");
    if (!allow || !deny)
      return !allow ? allow.err() : deny.err();
    auto sources = net::installed_egress_sources();
    // Addresses and CIDRs to close (network.deny, core/deny_list.hpp).
    for (auto& d : *deny) {
      if (d == all_traffic || sources.by_name.count(d))
        continue;
      auto entry = allow_entry_of(d);
      if (auto p = net::parse_deny_list({entry}); !p)
        return invalid_argument(what + ": network.denyOut \"" + d.substr(0, 100)
                                + "\": not an IP address, CIDR or egress source name "
                                  "(domains cannot be denied, as in E2B; egress sources: "
                                + net::known_sources_text() + ")");
      deny_out.push_back(std::move(entry));
    }
    // The internet is open when allow_internet_access is true, or absent
    // (E2B's default) beside a deny of single addresses, unless 0.0.0.0/0 is
    // denied; allowOut wins over denyOut and denyOut over the open internet.
    bool open = std::count(deny->begin(), deny->end(), all_traffic) == 0
                && (internet == true || (!internet && !deny_out.empty()));
    for (auto& d : *deny) {
      // A name of the node's egress sources (DSec's {"npm": false}) is
      // closed like everything not allowed; allowOut naming it too wins,
      // as in E2B. "All but npm" is no allow-list: refused, not widened.
      if (d == all_traffic || !sources.by_name.count(d) || !open)
        continue;
      return refused(what, "network.denyOut \"" + d.substr(0, 100) + "\" with the internet open",
                     "an allow-list cannot open all traffic but a source; deny " +
                       std::string{all_traffic} + " too and list what to open in allowOut");
    }
    internet = open;
    for (auto& a : *allow) {
      // A name of the node's egress sources (`pypi`) stays a name: the same
      // rule as dsec's own network.allow.
      if (sources.by_name.count(a)) {
        allow_out.push_back(a);
        continue;
      }
      auto entry = allow_entry_of(a);
      if (auto p = net::parse_allow_entry(entry); !p)
        return invalid_argument(what + ": network.allowOut \"" + a.substr(0, 100)
                                + "\": not an IP address, CIDR or domain name");
      allow_out.push_back(std::move(entry));
    }
  }
  spec.network.allow = std::move(allow_out); // empty: none, dsec's default
  spec.network.deny.clear();
  if (internet == true) {
    // allowOut entries stay before the catch-alls: they win over denyOut.
    if (!deny_out.empty())
      spec.network.deny = std::move(deny_out);
    else
      spec.network.allow.clear(); // the catch-alls open them anyway
    spec.network.allow.push_back("0.0.0.0/0:*");
    spec.network.allow.push_back("[::/0]:*");
  }
  return {};
}

/// autoPause, autoPauseMemory, autoResume onto the spec's lifecycle fields.
status apply_lifecycle(const json& j, sandbox_spec& spec) {
  spec.on_timeout = "destroy";
  if (present(j, "autoPause")) {
    if (!j["autoPause"].is_boolean())
      return invalid_argument("create sandbox: autoPause must be a boolean");
    if (j["autoPause"].get<bool>())
      spec.on_timeout = "pause";
  }
  bool keep_memory = true;
  if (present(j, "autoPauseMemory")) {
    if (!j["autoPauseMemory"].is_boolean())
      return invalid_argument("create sandbox: autoPauseMemory must be a boolean");
    keep_memory = j["autoPauseMemory"].get<bool>();
  }
  // lifecycle.onTimeout {action: 'pause', keepMemory: false}: the timeout
  // keeps the files only; the connect that resumes boots the sandbox again.
  if (!keep_memory && spec.on_timeout == "pause")
    spec.on_timeout = "pause_files";
  // E2B resumes a paused sandbox only under autoResume, or on connect.
  spec.auto_resume = false;
  if (present(j, "autoResume")) {
    auto& ar = j["autoResume"];
    if (!ar.is_object() || (present(ar, "enabled") && !ar["enabled"].is_boolean()))
      return invalid_argument("create sandbox: autoResume must be {\"enabled\": boolean}");
    for (auto& [k, v] : ar.items())
      if (k != "enabled" && !v.is_null())
        return refused("autoResume." + k, "autoResume takes only enabled");
    spec.auto_resume = ar.value("enabled", false);
  }
  if (spec.auto_resume && spec.on_timeout == "pause_files")
    return invalid_argument("create sandbox: autoResume true is not valid with autoPauseMemory "
                            "false: a sandbox paused without its memory boots again, so it "
                            "resumes only on connect");
  return {};
}

} // namespace

status apply_create_options(std::string_view body, sandbox_spec& spec, bool tokens) {
  auto j = detail::parse_object(body, "create sandbox");
  if (!j)
    return j.err();
  // What parse_create reads, what is mapped below, and what api/e2b_ports reads.
  static const char* const known[] = {"templateID", "timeout", "metadata", "envVars",
                                      "autoPause", "autoPauseMemory", "autoResume",
                                      "allow_internet_access", "allowInternetAccess",
                                      "network", "secure"};
  for (auto& [k, v] : j->items()) {
    if (v.is_null() || std::find(std::begin(known), std::end(known), k) != std::end(known))
      continue;
    if (k == "mcp")
      return refused("mcp", "no MCP gateway runs in dsec sandboxes");
    if (k == "volumeMounts")
      return refused("volumeMounts", "E2B volumes; dsec sandboxes are built from layers");
    if (k == "iam")
      return refused("iam", "no identity tokens are issued to dsec sandboxes");
    return refused("option " + k.substr(0, 100), "unknown option");
  }
  if (present(*j, "secure")) {
    // secure: envd calls need the sandbox's access token, which dsec requires
    // exactly when the node has API keys.
    if (!(*j)["secure"].is_boolean())
      return invalid_argument("create sandbox: secure must be a boolean");
    bool secure = (*j)["secure"].get<bool>();
    if (secure && !tokens)
      return refused("secure true", "this node has no --api-key-file, so its envd calls carry "
                                    "no access token");
    if (!secure && tokens)
      return refused("secure false", "this node has API keys, so every envd call needs the "
                                     "sandbox's envdAccessToken");
  }
  if (auto st = apply_lifecycle(*j, spec); !st)
    return st;
  return apply_network("create sandbox", *j, spec);
}

expected<bool> parse_pause(std::string_view body) {
  auto j = detail::parse_object(body, "pause sandbox");
  if (!j)
    return j.err();
  for (auto& [k, v] : j->items())
    if (k != "memory" && !v.is_null())
      return refused("pause sandbox", k, "pause takes only memory");
  if (!present(*j, "memory"))
    return true;
  if (!(*j)["memory"].is_boolean())
    return invalid_argument("pause sandbox: memory must be a boolean");
  return (*j)["memory"].get<bool>();
}

std::string lifecycle_json(const sandbox_info& info) {
  bool pauses = info.on_timeout == "pause" || info.on_timeout == "pause_files";
  return json{{"onTimeout", pauses ? "pause" : "kill"},
              {"autoResume", info.auto_resume}}
    .dump();
}

expected<int64_t> parse_rfc3339_ms(std::string_view text, const char* field) {
  auto bad = [&] {
    return invalid_argument(std::string{field} + ": expected an RFC 3339 time such as "
                            "2026-01-02T15:04:05Z, got \"" + std::string{text.substr(0, 64)}
                            + "\"");
  };
  std::string s{text};
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end)
    return bad();
  int64_t ms = 0;
  if (*end == '.') {
    ++end;
    int digits = 0;
    int64_t frac = 0;
    while (*end >= '0' && *end <= '9') {
      if (digits < 3)
        frac = frac * 10 + (*end - '0'), ++digits;
      ++end;
    }
    if (digits == 0)
      return bad();
    while (digits++ < 3)
      frac *= 10;
    ms = frac;
  }
  int64_t offset_s = 0;
  if (*end == 'Z' || *end == 'z') {
    ++end;
  } else if (*end == '+' || *end == '-') {
    int sign = *end == '-' ? -1 : 1;
    int hh = 0, mm = 0;
    if (std::sscanf(end + 1, "%2d:%2d", &hh, &mm) != 2 || hh > 23 || mm > 59)
      return bad();
    offset_s = sign * (hh * 3600 + mm * 60);
    end += 6;
  } else {
    return bad();
  }
  if (*end != '\0')
    return bad();
  auto secs = static_cast<int64_t>(timegm(&tm)) - offset_s;
  return secs * 1000 + ms;
}

} // namespace dsec::e2b

namespace dsec::e2b {

expected<network_policy> parse_network_update(std::string_view body, const std::string& id) {
  const std::string what = "update network of sandbox " + id;
  auto j = detail::parse_object(body, "update network");
  if (!j)
    return j.err();
  // E2B's SandboxNetworkUpdateConfig: the egress fields at the top level.
  json create_shape = json::object();
  json net = json::object();
  for (auto& [k, v] : j->items()) {
    if (v.is_null())
      continue;
    if (k == "allow_internet_access")
      create_shape[k] = v;
    else if (k == "allowOut" || k == "denyOut")
      net[k] = v;
    else
      return refused(what, k.substr(0, 100), "dsec's network is an allow-list of addresses and "
                                             "domains: allowOut, denyOut, "
                                             "allow_internet_access");
  }
  create_shape["network"] = net;
  sandbox_spec spec;
  if (auto st = apply_network(what, create_shape, spec); !st)
    return st.err();
  return spec.network;
}

} // namespace dsec::e2b
