// `dsec layer` subcommands (build, import, pull, push, ls, defaults, alias). Flags are parsed by
// cli/args (`--flag value` and `--flag=value`); each subcommand then checks
// which ones it accepts, so a typo or a misplaced option is a usage error
// (exit 2), never ignored.
#include "cmd/layer_cmd.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cmd/args.hpp"
#include "cmd/layer_build_cmd.hpp"
#include "core/json_codec.hpp"
#include "layers/aliases.hpp"
#include "layers/defaults.hpp"
#include "layers/e2b_base.hpp"
#include "layers/e2b_sudo.hpp"
#include "layers/e2b_user_layer.hpp"
#include "layers/oci_import.hpp"
#include "layers/prune_git.hpp"
#include "layers/store.hpp"
#include "registry/image_pull.hpp"
#include "registry/layer_artifact.hpp"

namespace dsec::cli {

namespace {

// The node's default state directory; the store lives in <state-dir>/store.
constexpr const char* default_state_dir = "/var/lib/dsec";

constexpr const char* usage_text =
  "usage: dsec layer build DIR --name N --version V [--kind base|workspace|toolkit|snapshot]"
  " [--prune-git | --chunked] [--state-dir DIR | --store DIR]\n"
  "       dsec layer import OCI_LAYOUT_DIR|DOCKER_SAVE.tar --name N --version V"
  " [--kind base|workspace|toolkit] [--state-dir DIR | --store DIR]\n"
  "       dsec layer pull REGISTRY/REPO[:TAG][@sha256:HEX] [--name N --version V]"
  " [--kind K] [--state-dir DIR | --store DIR] [REGISTRY FLAGS] [--max-concurrent N] [--json]\n"
  "       dsec layer push LAYER_REF REGISTRY/REPO:TAG [--state-dir DIR | --store DIR]"
  " [REGISTRY FLAGS]\n"
  "       dsec layer ls [--state-dir DIR | --store DIR] [--json]\n"
  "       dsec layer defaults [--e2b] [--state-dir DIR | --store DIR]\n"
  "         (--e2b: also base/e2b@1, E2B's base template: user `user`, git, curl, wget, pip;\n"
  "          a debootstrap of a few minutes, cached like the others. Always: toolkit/e2b-sudo@1,\n"
  "          passwordless sudo for E2B's user from dsec-sudo beside dsec or $DSEC_SUDO, and\n"
  "          toolkit/code-interpreter-user@1, E2B's user over base/code-interpreter@1)\n"
  "       dsec layer alias [NAME REF | NAME --rm] [--state-dir DIR | --store DIR] [--json]\n"
  "registry flags:\n"
  "  --registry-auth FILE          docker-style config.json (default: $DOCKER_CONFIG/config.json,\n"
  "                                else ~/.docker/config.json, else anonymous)\n"
  "  --registry-ca FILE            PEM CA bundle trusted in addition to the system CAs\n"
  "  --insecure-registry HOST      speak plain HTTP to HOST[:PORT] (repeatable)\n"
  "  --registry-mirror REG=MIRROR[,MIRROR...]  mirrors tried first for pulls (repeatable)\n"
  "  --max-concurrent N            blobs downloaded at once (default 4)\n";

int usage(const std::string& why) {
  std::cerr << "dsec layer: " << why << "\n" << usage_text;
  return 2;
}

int fail(const error& err) {
  std::cerr << "dsec layer: " << err.message << " [" << to_string(err.code) << "]\n";
  return 1;
}

// Checks that only `allowed` flags were given.
bool only(const args& p, const std::set<std::string>& allowed, std::string& why) {
  for (auto& [k, v] : p.flags)
    if (!allowed.count(k)) {
      why = "option --" + k + " does not apply here";
      return false;
    }
  return true;
}

std::string store_root(const args& p) {
  if (p.has("store"))
    return p.get("store");
  return p.get("state-dir", default_state_dir) + "/store";
}

std::string human_size(int64_t bytes) {
  const char* units[] = {"B", "K", "M", "G", "T"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units))
    v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f%s" : "%.1f%s", v, units[u]);
  return buf;
}

std::string short_digest(const std::string& digest) {
  auto colon = digest.find(':');
  return digest.substr(colon == std::string::npos ? 0 : colon + 1, 12);
}

int cmd_build(const args& p, layers::store& s) {
  if (p.has("prune-git")) {
    auto built = layers::build_pruned(s, p.positional[1], p.get("name"), p.get("version"),
                                      p.get("kind", "base"));
    if (!built)
      return fail(built.err());
    std::cerr << "pruned git history of " << built->repos.size() << " repositor"
              << (built->repos.size() == 1 ? "y" : "ies");
    for (auto& r : built->repos)
      std::cerr << " " << r;
    std::cerr << "\n";
    std::cout << built->info.ref << " " << built->info.digest << "\n";
    return 0;
  }
  // --chunked: metadata image + data blob (layers/blob_device.hpp).
  layers::store::build_options opts;
  opts.chunked = p.has("chunked");
  auto info = s.build(p.positional[1], p.get("name"), p.get("version"), p.get("kind", "base"), opts);
  if (!info)
    return fail(info.err());
  std::cout << info->ref << " " << info->digest << "\n";
  return 0;
}

int cmd_import(const args& p, layers::store& s) {
  auto res = layers::import_image(s, p.positional[1], p.get("name"), p.get("version"),
                                  p.get("kind", "base"));
  if (!res)
    return fail(res.err());
  auto& st = res->stats;
  std::cerr << "imported " << res->manifest.layers.size() << " layer(s) from "
            << res->manifest.format << " (" << res->manifest.source << "): " << st.entries
            << " entries, " << human_size(st.bytes) << ", " << st.whiteouts << " whiteouts, "
            << st.opaque_dirs << " opaque dirs, " << st.hardlinks << " hardlinks, "
            << st.skipped_devices << " device nodes skipped\n";
  std::cout << res->info.ref << " " << res->info.digest << "\n";
  return 0;
}

/// The registry flags of pull and push as registry_options.
expected<registry::registry_options> registry_flags(const args& p) {
  registry::registry_options o;
  o.auth_file = p.get("registry-auth");
  o.ca_file = p.get("registry-ca");
  o.insecure_hosts = p.all("insecure-registry");
  for (auto& m : p.all("registry-mirror"))
    if (auto st = registry::add_mirror_option(o, m); !st)
      return st.err();
  if (p.has("max-concurrent")) {
    auto n = to_int("--max-concurrent", p.get("max-concurrent"));
    if (!n)
      return n.err();
    if (*n < 1 || *n > 64)
      return invalid_argument("--max-concurrent must be 1 to 64, not " + p.get("max-concurrent"));
    o.max_concurrent_blobs = static_cast<int>(*n);
  }
  return o;
}

/// `pull`: one image (or layer artifact) from a registry into one layer.
int cmd_pull(const args& p, layers::store& s) {
  auto ref = registry::parse_image_reference(p.positional[1]);
  if (!ref)
    return fail(ref.err());
  registry::pull_options o;
  auto reg = registry_flags(p);
  if (!reg)
    return fail(reg.err());
  o.registry = std::move(*reg);
  o.name = p.get("name");
  o.version = p.get("version");
  o.kind = p.get("kind");  // empty: "base", or the kind a layer artifact records
  auto res = registry::pull_image(s, *ref, o);
  if (!res)
    return fail(res.err());
  auto& i = res->info;
  std::cerr << "pulled " << ref->str() << " (manifest " << res->manifest_digest << ")"
            << (res->artifact ? " as a dsec layer artifact" : "") << ": "
            << human_size(static_cast<int64_t>(res->bytes_fetched)) << " fetched, "
            << human_size(static_cast<int64_t>(res->bytes_written)) << " written\n";
  if (p.has("json")) {
    nlohmann::json j = {{"ref", i.ref},
                        {"digest", i.digest},
                        {"kind", i.kind},
                        {"size_bytes", i.size_bytes},
                        {"manifest_digest", res->manifest_digest},
                        {"artifact", res->artifact},
                        {"bytes_fetched", res->bytes_fetched},
                        {"bytes_written", res->bytes_written}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::cout << i.ref << " " << i.digest << " " << i.size_bytes << " " << res->bytes_fetched
            << "\n";
  return 0;
}

/// `push`: one layer of the store to a registry as a dsec layer artifact.
int cmd_push(const args& p, layers::store& s) {
  auto target = registry::parse_image_reference(p.positional[2]);
  if (!target)
    return fail(target.err());
  if (target->tag.empty() || !target->digest.empty())
    return usage("push needs a REGISTRY/REPO:TAG target (no @digest)");
  auto reg = registry_flags(p);
  if (!reg)
    return fail(reg.err());
  auto digest = registry::push_layer(s, p.positional[1], *target, *reg);
  if (!digest)
    return fail(digest.err());
  std::cout << target->str() << " " << *digest << "\n";
  return 0;
}

/// `alias`: lists the store's aliases, sets NAME -> REF, or removes NAME.
int cmd_alias(const args& p, layers::store& s) {
  if (p.positional.size() == 3)
    if (auto st = layers::set_alias(s, p.positional[1], p.positional[2]); !st)
      return fail(st.err());
  if (p.positional.size() == 2)
    if (auto st = layers::remove_alias(s, p.positional[1]); !st)
      return fail(st.err());
  if (p.positional.size() > 1)
    return 0;
  auto all = layers::read_aliases(s.root());
  if (!all)
    return fail(all.err());
  if (p.has("json")) {
    std::cout << nlohmann::json(*all).dump() << "\n";
    return 0;
  }
  for (auto& [name, ref] : *all)
    std::cout << name << "\t" << ref << "\n";
  return 0;
}

int cmd_ls(const args& p, layers::store& s) {
  auto all = s.try_list();
  if (!all)
    return fail(all.err());
  if (p.has("json")) {
    std::cout << json_codec::encode(*all) << "\n";
    return 0;
  }
  size_t w = 3;
  for (auto& l : *all)
    w = std::max(w, l.ref.size());
  auto row = [w](const std::string& ref, const std::string& kind, const std::string& dig,
                 const std::string& size) {
    std::printf("%-*s  %-9s  %-12s  %s\n", static_cast<int>(w), ref.c_str(), kind.c_str(),
                dig.c_str(), size.c_str());
  };
  row("REF", "KIND", "DIGEST", "SIZE");
  for (auto& l : *all)
    row(l.ref, l.kind, short_digest(l.digest), human_size(l.size_bytes));
  return 0;
}

/// The static sudo client for toolkit/e2b-sudo@1: $DSEC_SUDO, or dsec-sudo
/// beside this executable (build tree: backends/dsec-sudo), as the node
/// finds dsec-init.
std::string find_sudo_client() {
  if (auto* env = ::getenv("DSEC_SUDO"))
    return env;
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string dir = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string{"./x"};
  dir = dir.substr(0, dir.rfind('/'));
  for (auto cand : {dir + "/dsec-sudo", dir + "/backends/dsec-sudo", dir + "/../backends/dsec-sudo",
                    dir + "/../libexec/dsec/dsec-sudo"})
    if (::access(cand.c_str(), X_OK) == 0)
      return cand;
  return dir + "/dsec-sudo";
}

int cmd_defaults(const args& p, layers::store& s) {
  auto log = [](const std::string& line) { std::cerr << line << "\n"; };
  auto st = layers::build_defaults(s, log);
  // issue 27: E2B's sudo and the code interpreter's `user`, small layers
  // stacked on E2B's templates (seconds: no debootstrap).
  if (st)
    st = layers::build_e2b_sudo(s, find_sudo_client(), log);
  if (st)
    st = layers::build_code_interpreter_user(s, log);
  if (st && p.has("e2b"))
    st = layers::build_e2b_base(s, log);
  if (!st)
    return fail(st.err());
  for (auto ref : {"base/busybox@1", "base/python@3.11", layers::e2b_base_ref})
    if (auto info = s.resolve(ref))
      std::cout << info->ref << " " << info->digest << "\n";
  for (auto ref : {layers::e2b_sudo_ref, layers::code_interpreter_user_ref})
    if (auto info = s.resolve(ref))
      std::cout << info->ref << " " << info->digest << "\n";
  return 0;
}

} // namespace

int run_layer_command(const std::vector<std::string>& words) {
  if (is_dockerfile_build(words)) // cmd/layer_build_cmd.hpp
    return run_dockerfile_build(words);
  for (auto& w : words)
    if (w == "--help" || w == "-h") {
      std::cout << usage_text;
      return 0;
    }
  auto parsed = parse_args(words, {"name", "version", "kind", "state-dir", "store",
                                   "registry-auth", "registry-ca", "insecure-registry",
                                   "registry-mirror", "max-concurrent"},
                           {"json", "prune-git", "chunked", "rm", "e2b"});
  if (!parsed)
    return usage(parsed.err().message);
  auto& p = *parsed;
  std::string why;
  if (p.positional.empty())
    return usage("missing subcommand (build, import, pull, push, ls, defaults or alias)");
  auto& sub = p.positional[0];
  bool ok = true;
  if (sub == "build" || sub == "import") {
    ok = sub == "build" ? only(p, {"name", "version", "kind", "state-dir", "store", "prune-git", "chunked"}, why)
                        : only(p, {"name", "version", "kind", "state-dir", "store"}, why);
    if (ok && p.positional.size() != 2)
      ok = false, why = sub == "build" ? "build takes exactly one DIR"
                                       : "import takes exactly one OCI layout dir or .tar";
    if (ok && (!p.has("name") || !p.has("version")))
      ok = false, why = sub + " needs --name and --version";
    if (ok && p.has("prune-git") && p.has("chunked"))
      ok = false, why = "--prune-git and --chunked cannot be combined";
  } else if (sub == "pull" || sub == "push") {
    std::set<std::string> allowed = {"state-dir", "store", "registry-auth", "registry-ca",
                                     "insecure-registry", "registry-mirror", "max-concurrent"};
    if (sub == "pull")
      allowed.insert({"name", "version", "kind", "json"});
    ok = only(p, allowed, why);
    if (ok && p.positional.size() != (sub == "pull" ? 2u : 3u))
      ok = false, why = sub == "pull" ? "pull takes exactly one image reference"
                                      : "push takes LAYER_REF REGISTRY/REPO:TAG";
    if (ok && p.has("name") != p.has("version"))
      ok = false, why = "pull takes --name and --version together, or neither";
  } else if (sub == "ls") {
    ok = only(p, {"state-dir", "store", "json"}, why);
  } else if (sub == "defaults") {
    ok = only(p, {"state-dir", "store", "e2b"}, why);
  } else if (sub == "alias") {
    ok = only(p, {"state-dir", "store", "json", "rm"}, why);
    auto n = p.positional.size();
    if (ok && !(n == 1 || (n == 2 && p.has("rm")) || (n == 3 && !p.has("rm"))))
      ok = false, why = "alias takes NAME REF (set), NAME --rm (remove) or nothing (list)";
  } else {
    return usage("unknown subcommand \"" + sub + "\"");
  }
  if (ok && sub != "build" && sub != "import" && sub != "alias" && sub != "pull" &&
      sub != "push" && p.positional.size() != 1)
    ok = false, why = sub + " takes no arguments";
  if (ok && p.has("state-dir") && p.has("store"))
    ok = false, why = "give --state-dir or --store, not both";
  if (!ok)
    return usage(why);
  auto s = layers::store::open(store_root(p));
  if (!s)
    return fail(s.err());
  if (sub == "build")
    return cmd_build(p, *s);
  if (sub == "import")
    return cmd_import(p, *s);
  if (sub == "pull")
    return cmd_pull(p, *s);
  if (sub == "push")
    return cmd_push(p, *s);
  if (sub == "ls")
    return cmd_ls(p, *s);
  if (sub == "alias")
    return cmd_alias(p, *s);
  return cmd_defaults(p, *s);
}

} // namespace dsec::cli
