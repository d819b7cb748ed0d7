// Validation of specs and exec requests (see validate.hpp).
#include "core/validate.hpp"

#include "core/allow_list.hpp"
#include "core/layer_ref.hpp"
#include "core/trajectory.hpp"

namespace dsec {

namespace {

error bad(const std::string& field, const std::string& what) {
  return invalid_argument(field + ": " + what);
}

bool too_long(const std::string& s) { return s.size() > spec_limits::max_string; }

/// Names without '=' or NUL, values without NUL, sizes bounded.
status check_string_map(const std::map<std::string, std::string>& m, const char* field,
                        size_t max_items, bool env) {
  if (m.size() > max_items)
    return too_large(std::string{field} + ": more than " + std::to_string(max_items) + " entries");
  for (auto& [k, v] : m) {
    if (k.empty() || k.size() > 256 || too_long(v))
      return bad(field, "names must be 1-256 bytes and values at most 4096 bytes");
    if (env && (k.find('=') != std::string::npos || k.find('\0') != std::string::npos
                || v.find('\0') != std::string::npos))
      return bad(field, "names must be non-empty without '=' or NUL");
  }
  return {};
}

/// A protected path: absolute, normalised, not inside the kernel's own
/// filesystems (/proc, /sys, /dev are set up by the node).
status check_protected(const std::vector<std::string>& v, const char* field, bool allow_root) {
  for (auto& p : v) {
    bool ok = !p.empty() && p[0] == '/' && p.find('\0') == std::string::npos
              && (p.size() == 1 || p.back() != '/') && p.find("//") == std::string::npos
              && p.find("/./") == std::string::npos && p.find("/../") == std::string::npos
              && (p.size() < 3 || (p.compare(p.size() - 3, 3, "/..") != 0
                                   && p.compare(p.size() - 2, 2, "/.") != 0));
    if (!ok)
      return bad(field, "\"" + p.substr(0, 200) + "\" must be an absolute, normalised path");
    if (p == "/" && !allow_root)
      return bad(field, "\"/\" cannot be hidden");
    for (const char* sys : {"/proc", "/sys", "/dev"}) {
      std::string s{sys};
      if (p == s || p.rfind(s + "/", 0) == 0)
        return bad(field, "\"" + p + "\" is inside " + s + ", which the node sets up itself");
    }
  }
  return {};
}

status check_strings(const std::vector<std::string>& v, const char* field, size_t max_items) {
  if (v.size() > max_items)
    return too_large(std::string{field} + ": more than " + std::to_string(max_items) + " entries");
  for (auto& s : v)
    if (too_long(s))
      return too_large(std::string{field} + ": an entry is longer than 4096 bytes");
  return {};
}

} // namespace

bool valid_layer_ref(std::string_view ref) {
  return layers::parse_ref(std::string{ref}).ok();
}

status validate_cpu_class(const std::string& cls) {
  if (cls != "latency" && cls != "batch")
    return bad("cpu_class", "must be \"latency\" or \"batch\", got \"" + cls.substr(0, 200)
                              + "\"");
  return {};
}

status validate(const sandbox_spec& s) {
  if (s.backend != "container" && s.backend != "microvm" && s.backend != "vm"
      && s.backend != "fncall")
    return bad("backend", "must be one of container, microvm, vm, fncall; got \"" + s.backend + "\"");
  if (s.layers.empty())
    return bad("layers", "at least one layer ref (name@version) is required");
  if (s.layers.size() > spec_limits::max_layers)
    return too_large("layers: more than 128 layers");
  for (auto& l : s.layers)
    if (!valid_layer_ref(l))
      return bad("layers", "\"" + l + "\" is not a name@version ref");
  if (!(s.cpu >= 0) || s.cpu > spec_limits::max_cpu)
    return bad("cpu", "must be between 0 and 256");
  if (s.memory_mb < spec_limits::min_memory_mb || s.memory_mb > spec_limits::max_memory_mb)
    return bad("memory_mb", "must be between 8 and 1048576");
  if (s.disk_mb < 1 || s.disk_mb > spec_limits::max_disk_mb)
    return bad("disk_mb", "must be between 1 and 4194304");
  if (s.pids < 8 || s.pids > spec_limits::max_pids)
    return bad("pids", "must be between 8 and 1048576");
  if (s.ttl_s < 0 || s.ttl_s > spec_limits::max_ttl_s)
    return bad("ttl_s", "must be between 0 and 2592000");
  if (s.paused_ttl_s < 1 || s.paused_ttl_s > spec_limits::max_paused_ttl_s)
    return bad("paused_ttl_s", "must be between 1 and 2592000");
  if (auto st = validate_cpu_class(s.cpu_class); !st)
    return st;
  for (auto* str : {&s.backend, &s.cpu_class, &s.node, &s.request_id})
    if (too_long(*str))
      return too_large("spec: a string field is longer than 4096 bytes");
  status st;
  if (!(st = check_string_map(s.env, "env", spec_limits::max_env, true))
      || !(st = check_string_map(s.labels, "labels", spec_limits::max_labels, false))
      || !(st = check_strings(s.network.allow, "network.allow", 256))
      || !(st = validate(s.network))
      || !(st = check_strings(s.protect.readonly, "protect.readonly", 256))
      || !(st = check_strings(s.protect.hidden, "protect.hidden", 256))
      || !(st = check_protected(s.protect.readonly, "protect.readonly", true))
      || !(st = check_protected(s.protect.hidden, "protect.hidden", false)))
    return st;
  return {};
}

status validate(const exec_request& r) {
  if (r.argv.empty() || r.argv[0].empty())
    return bad("cmd", "argv must not be empty");
  size_t total = 0;
  for (auto& a : r.argv) {
    if (a.find('\0') != std::string::npos)
      return bad("cmd", "must not contain NUL bytes");
    total += a.size();
  }
  if (total > (1u << 20) || r.argv.size() > 65536)
    return too_large("cmd: argv larger than 1 MiB");
  if (!r.cwd.empty() && r.cwd[0] != '/')
    return bad("cwd", "must be an absolute path, got \"" + r.cwd.substr(0, 200) + "\"");
  if (too_long(r.cwd))
    return too_large("cwd: longer than 4096 bytes");
  if (!(r.timeout_s >= 0) || r.timeout_s > 7 * 24 * 3600.0)
    return bad("timeout_s", "must be between 0 and 604800");
  if (!r.step.empty())
    if (auto st = trajectory::validate_step(r.step); !st)
      return st;
  return check_string_map(r.env, "env", spec_limits::max_env, true);
}

status validate(const network_policy& policy) {
  if (policy.allow.size() > 256)
    return too_large("network.allow: more than 256 entries");
  // The backend's own parser, so nothing passes here that it would refuse
  // after layers were fetched and mounted. The wording is the gateway's.
  for (auto& e : policy.allow)
    if (!net::parse_allow_entry(e))
      return bad("network.allow", "\"" + e.substr(0, 200)
                                    + "\" is not host:port, cidr:port, [v6]:port or domain:port"
                                      " (port 1-65535 or *)");
  if (auto list = net::parse_allow_list(policy.allow); !list)
    return list.err();
  return {};
}

status validate(const fncall_request& r) {
  if (r.language != "python" && r.language != "bash")
    return bad("language", "must be \"python\" or \"bash\", got \"" + r.language.substr(0, 100)
                             + "\"");
  if (r.code.size() > fncall_limits::max_code)
    return too_large("code: " + std::to_string(r.code.size()) + " bytes, over the limit of 1 MiB");
  if (r.stdin_data.size() > fncall_limits::max_stdin)
    return too_large("stdin: over the limit of 1 MiB");
  if (!(r.timeout_s > 0) || r.timeout_s > fncall_limits::max_timeout_s)
    return bad("timeout_s", "must be more than 0 and at most 300");
  if (r.files.size() > fncall_limits::max_files)
    return too_large("files: more than 64 files");
  size_t total = 0;
  for (auto& [path, data] : r.files) {
    total += data.size();
    bool dotdot = path == ".." || path.rfind("../", 0) == 0
                  || path.find("/../") != std::string::npos
                  || (path.size() >= 3 && path.compare(path.size() - 3, 3, "/..") == 0);
    if (path.empty() || path[0] == '/' || dotdot || path.find('\0') != std::string::npos
        || path.size() > 1024)
      return bad("files", "\"" + path.substr(0, 200)
                            + "\" must be a relative path inside the call's directory, without ..");
  }
  if (total > fncall_limits::max_file_bytes)
    return too_large("files: more than 16 MiB in all");
  return {};
}

} // namespace dsec
