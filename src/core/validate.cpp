// Validation of specs and exec requests (see validate.hpp).
#include "core/validate.hpp"
#include "core/layer_config.hpp"

#include "core/allow_list.hpp"
#include "core/deny_list.hpp"
#include "core/host_mask.hpp"
#include "core/egress_sources.hpp"
#include "core/image_reference.hpp"
#include "core/layer_ref.hpp"
#include "core/sandbox_path.hpp"
#include "core/trajectory.hpp"

namespace dsec {

namespace {

error bad(const std::string& field, const std::string& what) {
  return invalid_argument(field + ": " + what);
}

bool too_long(const std::string& s) { return s.size() > spec_limits::max_string; }

/// Names without '=' or NUL, values without NUL, sizes bounded (the count
/// is the field list's bound: check_bounds).
status check_string_map(const std::map<std::string, std::string>& m, const char* field, bool env) {
  for (auto& [k, v] : m) {
    if (k.empty() || k.size() > 256 || too_long(v))
      return bad(field, "names must be 1-256 bytes and values at most 4096 bytes");
    if (env && (k.find('=') != std::string::npos || k.find('\0') != std::string::npos
                || v.find('\0') != std::string::npos))
      return bad(field, "names must be non-empty without '=' or NUL");
  }
  return {};
}

/// A protected path: absolute and normalised (core/sandbox_path.hpp), not
/// inside the kernel's own filesystems (/proc, /sys, /dev are set up by the
/// node).
status check_protected(const std::vector<std::string>& v, const char* field, bool allow_root) {
  for (auto& p : v) {
    if (auto parts = parse_sandbox_path(p, path_form::normalised); !parts)
      return bad(field, parts.err().message);
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

status check_strings(const std::vector<std::string>& v, const char* field) {
  for (auto& s : v)
    if (too_long(s))
      return too_large(std::string{field} + ": an entry is longer than 4096 bytes");
  return {};
}

// -- the field list's bounds --------------------------------------------------------

template <class M>
status check_bound(const std::string& field, const M& v, const range& r) {
  if constexpr (std::is_arithmetic_v<M>) {
    if (!within(r, static_cast<double>(v)))
      return bound_error(field, r, false);
  } else {
    if (!within(r, static_cast<double>(v.size())))
      return bound_error(field, r, true);
  }
  return {};
}

/// Each bounded field of `x` (nested lists too) within its bound, named
/// `prefix` + its name.
template <class T>
status check_bounds(const T& x, const std::string& prefix) {
  status st;
  for_each_field<T>([&](const auto& fd) {
    using M = typename std::decay_t<decltype(fd)>::type;
    if (!st)
      return;
    if constexpr (has_field_list_v<M>)
      st = check_bounds(x.*(fd.member), prefix + fd.name + ".");
    else if (fd.limits.message != nullptr)
      st = check_bound(prefix + fd.name, x.*(fd.member), fd.limits);
  });
  return st;
}

/// The image parses, and the backend can start from one: an image becomes
/// a chunked EROFS layer (a metadata image whose data lives in a separate
/// blob), which the container backend mounts with `device=`. The VM
/// backends hand each layer to the guest as one disk, so they would see
/// the metadata only; fncall makes no sandboxes at all.
status validate_image(const sandbox_spec& s) {
  if (s.image.empty())
    return {};
  if (s.image.size() > spec_limits::max_string)
    return too_large("image: longer than 4096 bytes");
  if (auto ref = registry::parse_image_reference(s.image); !ref)
    return bad("image", ref.err().message);
  if (s.backend == "fncall")
    return bad("image", "the fncall backend runs calls from the node's warm pool, not "
                        "sandboxes from images; use backend \"container\"");
  if (s.backend != "container")
    return bad("image", "the " + s.backend + " backend cannot start from an image yet (its "
                        "guest takes each layer as one EROFS disk, and an image is a chunked "
                        "layer whose data is a separate blob); use backend \"container\"");
  return {};
}

} // namespace

error bound_error(const std::string& field, const range& r, bool count, const std::string& got) {
  std::string text = field + ": " + r.message;
  if (!got.empty())
    text += ", got " + got;
  return count ? too_large(text) : invalid_argument(text);
}

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
  if (s.layers.empty() && s.image.empty())
    return bad("layers", "at least one layer ref (name@version) is required, or an image");
  if (auto st = check_bounds(s, ""); !st)
    return st;
  for (auto& l : s.layers)
    if (!valid_layer_ref(l))
      return bad("layers", "\"" + l + "\" is not a name@version ref");
  if (auto st = validate_image(s); !st)
    return st;
  if (auto st = validate_cpu_class(s.cpu_class); !st)
    return st;
  auto pauses = [](const std::string& v) { return v == "pause" || v == "pause_files"; };
  if (s.on_timeout != "destroy" && !pauses(s.on_timeout))
    return bad("on_timeout", "must be \"destroy\", \"pause\" or \"pause_files\", got \""
                               + s.on_timeout.substr(0, 200) + "\"");
  if (!pauses(s.on_idle) && s.on_idle != "destroy")
    return bad("on_idle", "must be \"pause\", \"pause_files\" or \"destroy\", got \""
                            + s.on_idle.substr(0, 200) + "\"");
  if ((pauses(s.on_timeout) || (s.idle_timeout_s > 0 && pauses(s.on_idle)))
      && s.backend == "fncall")
    return bad(pauses(s.on_timeout) ? "on_timeout" : "on_idle",
               "\"" + (pauses(s.on_timeout) ? s.on_timeout : s.on_idle)
                 + "\" needs a backend that pauses; fncall sandboxes do not");
  if ((s.on_timeout == "pause_files" || (s.idle_timeout_s > 0 && s.on_idle == "pause_files"))
      && !s.backend.empty() && s.backend != "container")
    return bad(s.on_timeout == "pause_files" ? "on_timeout" : "on_idle",
               "\"pause_files\" (a pause that keeps only the files) is served by the "
               "container backend only, not " + s.backend);
  for (auto* str : {&s.backend, &s.cpu_class, &s.node, &s.request_id})
    if (too_long(*str))
      return too_large("spec: a string field is longer than 4096 bytes");
  status st;
  if (!(st = check_string_map(s.env, "env", true))
      || !(st = check_string_map(s.labels, "labels", false))
      || !(st = s.labels.count(host_mask_label)
                  ? check_host_mask(s.labels.at(host_mask_label),
                                    std::string{"labels."} + host_mask_label)
                  : status{})
      || !(st = check_strings(s.network.allow, "network.allow"))
      || !(st = validate(s.network))
      || !(st = check_strings(s.protect.readonly, "protect.readonly"))
      || !(st = check_strings(s.protect.hidden, "protect.hidden"))
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
  if (too_long(r.cwd))
    return too_large("cwd: longer than 4096 bytes");
  if (!r.cwd.empty())
    if (auto parts = parse_sandbox_path(r.cwd, path_form::entry_or_root); !parts)
      return bad("cwd", parts.err().message);
  if (!(r.timeout_s >= 0) || r.timeout_s > 7 * 24 * 3600.0)
    return bad("timeout_s", "must be between 0 and 604800");
  if (!r.step.empty())
    if (auto st = trajectory::validate_step(r.step); !st)
      return st;
  if (!r.user.empty())
    if (auto st = validate_user(r.user, "user"); !st)
      return st;
  // An exec's env is held to the spec's env bound.
  if (auto st = check_bound("env", r.env, bound_of<sandbox_spec>("env")); !st)
    return st;
  return check_string_map(r.env, "env", true);
}

status validate(const network_policy& policy) {
  if (auto st = check_bounds(policy, "network."); !st)
    return st;
  // The backend's own parser, so nothing passes here that it would refuse
  // after layers were fetched and mounted. The wording is the gateway's.
  for (auto& e : policy.allow)
    if (!net::is_source_name(e) && !net::parse_allow_entry(e))
      return bad("network.allow", "\"" + e.substr(0, 200)
                                    + "\" is not host:port, cidr:port, [v6]:port or domain:port"
                                      " (port 1-65535 or *)");
  if (auto list = net::parse_allow_list(policy.allow); !list)
    return list.err();
  if (auto st = check_strings(policy.deny, "network.deny"); !st)
    return st;
  if (auto deny = net::parse_deny_list(policy.deny); !deny)
    return deny.err();
  // Each entry is one kernel rule or more; the kernel holds 128 per sandbox.
  if (!policy.deny.empty() && policy.allow.size() + policy.deny.size() > net::max_allow_entries)
    return bad("network", std::to_string(policy.allow.size()) + " allow and "
                            + std::to_string(policy.deny.size()) + " deny entries; at most "
                            + std::to_string(net::max_allow_entries) + " together");
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
    if (path.size() > 1024 || !parse_sandbox_path(path, path_form::relative))
      return bad("files", "\"" + path.substr(0, 200)
                            + "\" must be a relative path inside the call's directory, without ..");
  }
  if (total > fncall_limits::max_file_bytes)
    return too_large("files: more than 16 MiB in all");
  return {};
}

} // namespace dsec
