// `dsec layer build --dockerfile`: the driver of a Dockerfile build (see
// layer_build_cmd.hpp). The plan comes from layers/dockerfile.hpp; this file
// runs it: a sandbox per RUN/COPY step through the node's REST API, the step
// cache in the store, and the final flatten.
#include "cmd/layer_build_cmd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "cmd/args.hpp"
#include "cmd/rest_call.hpp"
#include "core/layer_config.hpp"
#include "core/layer_ref.hpp"
#include "layers/blob_cache.hpp"
#include "layers/digest.hpp"
#include "layers/dockerfile.hpp"
#include "layers/mount_cache.hpp"
#include "layers/store.hpp"
#include "core/image_reference.hpp"
#include "registry/image_index.hpp"
#include "sys/fs.hpp"
#include "sys/process.hpp"

namespace dsec::cli {

namespace {

using nlohmann::json;
namespace df = layers::dockerfile;

constexpr const char* usage_text =
  "usage: dsec layer build --dockerfile PATH [--context DIR] --name N --version V\n"
  "         [--kind base|workspace|toolkit] [--build-arg K=V]... [--under REF]... [--network]\n"
  "         [--no-cache]\n"
  "         [--rest HOST:PORT] [--state-dir DIR | --store DIR]\n"
  "  Builds N@V from a Dockerfile on a running node (--rest, $DSEC_REST, 127.0.0.1:7070)\n"
  "  whose layer store is --store (or --state-dir/store, default /var/lib/dsec/store).\n"
  "  Each RUN runs in a sandbox without network unless --network; steps are cached as\n"
  "  build/<key>@1 (--no-cache rebuilds them); the context defaults to the Dockerfile's\n"
  "  directory. The result is one layer whose exec defaults are ENV, WORKDIR and USER.\n"
  "  FROM takes a layer ref or an image reference; the node pulls an image it lacks.\n"
  "  --under stacks layer refs below FROM's layer (bottom first), as a sandbox of\n"
  "  several layers has them: the steps run on the whole stack and the result holds it.\n";

/// Where the copied files travel inside a step's sandbox (removed in the
/// same step, so no layer keeps it).
constexpr const char* copy_tar_path = "/.dsec-build-copy.tar";

/// Sandbox TTL of a build step: bounds what an interrupted build leaves
/// (a killed CLI cannot destroy its sandbox); long enough for slow RUNs.
constexpr int64_t step_ttl_s = 6 * 3600;

int usage(const std::string& why) {
  std::cerr << "dsec layer build: " << why << "\n" << usage_text;
  return 2;
}

std::string random_suffix() {
  static std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(::getpid()) + "-" + std::to_string(rng() % 1000000000);
}

std::string elapsed(std::chrono::steady_clock::time_point since) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - since).count();
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + "s";
}

/// What every step needs.
struct build {
  args a;
  layers::store st;
  std::string context;
  std::string kind;
  bool network = false;
  bool no_cache = false;
};

expected<json> call_json(const build& b, const std::string& method, const std::string& target,
                         const std::string& body = {},
                         const std::string& ctype = "application/json") {
  auto res = rest_call(b.a, method, target, body, ctype);
  if (!res)
    return res.err();
  auto j = json::parse(res->body, nullptr, false);
  if (j.is_discarded())
    return internal_error(method + " " + target + ": the node answered no JSON");
  return j;
}

/// A step's sandbox, destroyed when the step ends however it ends.
class step_sandbox {
 public:
  static expected<step_sandbox> create(const build& b, const std::vector<std::string>& stack) {
    json spec = {{"layers", stack}, {"ttl_s", step_ttl_s}, {"labels", {{"dsec-build", "1"}}}};
    spec["network"] = b.network ? json{{"allow", {"0.0.0.0/0:*"}}} : json{{"mode", "none"}};
    auto j = call_json(b, "POST", "/v1/sandboxes", spec.dump());
    if (!j)
      return error{j.err().code, "create the step's sandbox: " + j.err().message};
    return step_sandbox{&b, j->value("id", "")};
  }
  step_sandbox(step_sandbox&& o) noexcept : b_(o.b_), id_(std::move(o.id_)) { o.id_.clear(); }
  step_sandbox(const step_sandbox&) = delete;
  ~step_sandbox() {
    if (!id_.empty())
      (void)rest_call(b_->a, "DELETE", "/v1/sandboxes/" + url_encode(id_, true));
  }
  const std::string& id() const { return id_; }

  /// Runs argv; the node's answer (exit_code, stdout, stderr).
  expected<json> exec(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env, const std::string& cwd,
                      const std::string& user) const {
    json req = {{"cmd", argv}, {"env", env}};
    if (!cwd.empty())
      req["cwd"] = cwd;
    if (!user.empty())
      req["user"] = user;
    return call_json(*b_, "POST", "/v1/sandboxes/" + url_encode(id_, true) + "/exec",
                     req.dump(-1, ' ', false, json::error_handler_t::replace));
  }

 private:
  step_sandbox(const build* b, std::string id) : b_(b), id_(std::move(id)) {}
  const build* b_;
  std::string id_;
};

/// `ref`'s layer if the store has it with its image.
bool have_layer(const build& b, const std::string& ref) {
  auto info = b.st.resolve(ref);
  return info && layers::layer_present(b.st, info->digest);
}

std::string state_json(const df::step& s) {
  return json{{"env", s.what == df::step::kind::run ? s.env : s.config.env},
              {"workdir", s.config.workdir},
              {"user", s.config.user}}.dump();
}

std::string cache_ref(const std::string& key) {
  return "build/" + layers::digest_hex(key).substr(0, 32) + "@1";
}

// -- COPY / ADD ----------------------------------------------------------------

/// True if the file starts like an archive ADD would unpack.
bool looks_like_archive(const std::string& path) {
  auto text = sys::read_file(path);
  if (!text)
    return false;
  auto& d = *text;
  auto starts = [&](std::string_view m) { return d.compare(0, m.size(), m) == 0; };
  return starts("\x1f\x8b") || starts("BZh") || starts(std::string_view("\xfd" "7zXZ\0", 6))
         || starts("\x28\xb5\x2f\xfd") || (d.size() > 262 && d.compare(257, 5, "ustar") == 0);
}

/// A tar of the step's sources laid out for unpacking at `*unpack_dir`.
struct staged_copy {
  std::string tar;        // empty: nothing to unpack (an empty directory)
  std::string unpack_dir; // absolute, inside the sandbox
  std::string digest;     // of the content, for the cache key
};

expected<staged_copy> stage_copy(const build& b, const df::step& s, const std::string& work) {
  auto where = "Dockerfile line " + std::to_string(s.line) + ": " + (s.add ? "ADD" : "COPY");
  char ctx_real[PATH_MAX];
  if (!::realpath(b.context.c_str(), ctx_real))
    return sys_error(where + ": context", b.context, errno);
  auto stage = work + "/stage";
  if (auto st = sys::make_dirs(stage); !st)
    return st.err();
  bool dest_dir = s.dest.back() == '/';
  staged_copy out;
  out.unpack_dir = s.dest;
  for (auto& src : s.sources) {
    char real[PATH_MAX];
    auto path = b.context + "/" + src;
    if (!::realpath(path.c_str(), real))
      return sys_error(where + ": source " + src + " in the context", b.context, errno,
                       errno == ENOENT ? errc::not_found : errc::invalid_argument);
    std::string r{real}, c{ctx_real};
    if (r != c && r.compare(0, c.size() + 1, c + "/") != 0)
      return invalid_argument(where + ": source " + src + " is outside the context " + b.context);
    struct stat stt;
    if (::stat(real, &stt) != 0)
      return sys_error(where + ": stat", real, errno);
    if (S_ISDIR(stt.st_mode)) { // its contents go into the destination
      if (auto st = sys::run_checked({"cp", "-a", "--", r + "/.", stage + "/"}); !st)
        return error{st.err().code, where + ": " + st.err().message};
      continue;
    }
    if (s.add && looks_like_archive(real))
      return invalid_argument(where + ": " + src + " is an archive, which ADD would unpack: "
                              "dsec does not unpack archives (COPY it and RUN tar -x)");
    std::string name = r.substr(r.rfind('/') + 1);
    if (!dest_dir) { // COPY a.txt /etc/b.txt: the file is renamed
      auto slash = s.dest.rfind('/');
      name = s.dest.substr(slash + 1);
      out.unpack_dir = slash == 0 ? "/" : s.dest.substr(0, slash);
    }
    if (auto st = sys::run_checked({"cp", "-a", "--", r, stage + "/" + name}); !st)
      return error{st.err().code, where + ": " + st.err().message};
  }
  std::vector<std::string> entries;
  if (auto* d = ::opendir(stage.c_str())) {
    while (auto* e = ::readdir(d))
      if (std::string n = e->d_name; n != "." && n != "..")
        entries.push_back(n);
    ::closedir(d);
  }
  std::sort(entries.begin(), entries.end());
  if (entries.empty()) {
    out.digest = layers::sha256_string("empty");
    return out;
  }
  out.tar = work + "/copy.tar";
  // Owned by root as Docker's COPY does; fixed times so equal content is an
  // equal tar (the cache key), whatever the context's timestamps.
  std::vector<std::string> cmd{"tar", "-C", stage, "--sort=name", "--mtime=@1704067200",
                               "--owner=0", "--group=0", "--numeric-owner", "-cf", out.tar, "--"};
  cmd.insert(cmd.end(), entries.begin(), entries.end());
  if (auto st = sys::run_checked(cmd); !st)
    return error{st.err().code, where + ": " + st.err().message};
  auto digest = layers::sha256_file(out.tar);
  if (!digest)
    return digest.err();
  out.digest = *digest;
  return out;
}

status run_copy(const build& b, const step_sandbox& sb, const df::step& s,
                const staged_copy& staged) {
  auto where = "Dockerfile line " + std::to_string(s.line) + ": " + s.text;
  std::string script = "mkdir -p -- \"$1\"";
  if (!staged.tar.empty()) {
    auto data = sys::read_file(staged.tar);
    if (!data)
      return data.err();
    auto put = rest_call(b.a, "PUT", "/v1/sandboxes/" + url_encode(sb.id(), true) + "/files?path="
                                       + url_encode(copy_tar_path, true), *data,
                         "application/octet-stream");
    if (!put)
      return error{put.err().code, where + ": write the files into the sandbox: "
                                     + put.err().message};
    script += std::string{" && tar -xf "} + copy_tar_path + " -C \"$1\"; rc=$?; rm -f "
              + copy_tar_path + "; exit $rc";
  }
  auto res = sb.exec({"/bin/sh", "-c", script, "sh", staged.unpack_dir}, {}, "/", "0");
  if (!res)
    return error{res.err().code, where + ": " + res.err().message};
  if (res->value("exit_code", 1) != 0)
    return internal_error(where + ": unpacking in the sandbox failed (does the base have"
                                  " /bin/sh and tar?): " + res->value("stderr", ""));
  return {};
}

// -- RUN -------------------------------------------------------------------------

status run_command(const step_sandbox& sb, const df::step& s) {
  auto where = "Dockerfile line " + std::to_string(s.line) + ": " + s.text;
  // WORKDIR exists for RUN, as Docker makes it ("/" always does).
  if (!s.config.workdir.empty() && s.config.workdir != "/") {
    auto mk = sb.exec({"mkdir", "-p", "--", s.config.workdir}, {}, "/", "0");
    if (!mk || mk->value("exit_code", 1) != 0)
      return internal_error(where + ": create WORKDIR " + s.config.workdir + ": "
                            + (mk ? mk->value("stderr", "") : mk.err().message));
  }
  auto res = sb.exec(s.argv, s.env, s.config.workdir, s.config.user);
  if (!res)
    return error{res.err().code, where + ": " + res.err().message};
  std::cerr << res->value("stdout", "") << res->value("stderr", "");
  auto code = res->value("exit_code", 1);
  if (code != 0)
    return error{errc::invalid_argument,
                 where + ": the command exited with code " + std::to_string(code)};
  return {};
}

/// Runs one RUN or COPY step over `stack` and records it as `ref`.
status run_step(const build& b, const df::step& s, const std::vector<std::string>& stack,
                const std::string& ref, const staged_copy* staged) {
  auto sb = step_sandbox::create(b, stack);
  if (!sb)
    return sb.err();
  auto st = staged ? run_copy(b, *sb, s, *staged) : run_command(*sb, s);
  if (!st)
    return st;
  auto parsed = layers::parse_ref(ref);
  auto snap = call_json(b, "POST", "/v1/sandboxes/" + url_encode(sb->id(), true) + "/snapshot",
                        json{{"name", parsed->name}, {"version", parsed->version}}.dump());
  if (!snap)
    return error{snap.err().code, "snapshot step " + ref + ": " + snap.err().message};
  if (!have_layer(b, ref))
    return invalid_argument("the node recorded " + ref + " in another layer store than "
                            + b.st.root() + " (pass the node's --store or --state-dir)");
  return {};
}

// -- the result --------------------------------------------------------------------

/// The stack as one layer `ref` with `cfg`: an overlay of the step layers
/// (mounted here, in a private mount namespace, so nothing outlives this
/// process) packed with mkfs.erofs. WORKDIR is created in it.
expected<layer_info> flatten(const build& b, const std::vector<std::string>& stack,
                             const std::string& ref, const layer_config& cfg) {
  static bool private_ns = false;
  if (!private_ns) {
    // SAFETY: this process only; its mounts vanish with it.
    if (::unshare(CLONE_NEWNS) != 0)
      return sys_error("flatten: unshare", "mount namespace", errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return sys_error("flatten: make / private", "/", errno);
    private_ns = true;
  }
  auto work = b.st.root() + "/tmp/flatten-" + random_suffix();
  layers::mount_cache mounts{work + "/l"};
  struct cleanup {
    std::string work;
    layers::mount_cache& m;
    ~cleanup() {
      ::umount2((work + "/merged").c_str(), MNT_DETACH);
      (void)m.unmount_all();
      (void)sys::remove_tree(work);
    }
  } undo{work, mounts};
  std::string lower;
  for (auto& r : stack) {
    auto info = b.st.resolve(r);
    if (!info)
      return info.err();
    auto dir = mounts.acquire(*info, b.st.blob_path(info->digest));
    if (!dir)
      return dir.err();
    lower = *dir + (lower.empty() ? "" : ":" + lower); // top first
  }
  for (auto d : {"/upper", "/work", "/merged"})
    if (auto st = sys::make_dirs(work + d); !st)
      return st.err();
  auto opts = "lowerdir=" + lower + ",upperdir=" + work + "/upper,workdir=" + work + "/work";
  if (::mount("overlay", (work + "/merged").c_str(), "overlay", 0, opts.c_str()) != 0)
    return sys_error("flatten: mount overlay", work + "/merged", errno);
  if (!cfg.workdir.empty())
    if (auto st = sys::make_dirs(work + "/merged" + cfg.workdir); !st)
      return st.err();
  auto parsed = layers::parse_ref(ref);
  layers::store::build_options bo;
  bo.config = cfg;
  auto st = b.st; // build() is not const
  return st.build(work + "/merged", parsed->name, parsed->version, b.kind, bo);
}

/// Records `name@version` for the image of `flat`, with its exec defaults.
expected<layer_info> tag(const build& b, const layer_info& flat, const std::string& name,
                         const std::string& version) {
  auto tmp = b.st.root() + "/tmp/tag-" + random_suffix() + ".erofs";
  if (::link(b.st.blob_path(flat.digest).c_str(), tmp.c_str()) != 0)
    return sys_error("record " + name + "@" + version + ": link image", tmp, errno);
  layer_info info = flat;
  info.ref = name + "@" + version;
  info.name = name;
  info.version = version;
  auto st = b.st;
  return st.add_blob(tmp, info); // verifies, keeps the blob, records the ref
}

/// Runs (or finds cached) every RUN and COPY step of `plan` over `stack`,
/// pushing each step's layer; `key` goes from the base's digest to the top
/// step's cache key.
status run_steps(const build& b, const df::plan& plan, std::vector<std::string>& stack,
                 std::string& key) {
  size_t n = plan.steps.size(), i = 0;
  for (auto& s : plan.steps) {
    ++i;
    std::cerr << "Step " << i << "/" << n << " (line " << s.line << "): " << s.text;
    if (s.what == df::step::kind::config) {
      std::cerr << "\n";
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    staged_copy staged;
    auto work = b.st.root() + "/tmp/dfcopy-" + random_suffix();
    struct rm_work {
      std::string dir;
      ~rm_work() { (void)sys::remove_tree(dir); }
    } rm{work};
    if (s.what == df::step::kind::copy) {
      auto got = stage_copy(b, s, work);
      if (!got) {
        std::cerr << "\n";
        return got.err();
      }
      staged = std::move(*got);
    }
    key = layers::sha256_string(key + "\n" + s.text + "\n" + state_json(s) + "\n" + staged.digest);
    auto ref = cache_ref(key);
    if (!b.no_cache && have_layer(b, ref)) {
      std::cerr << "\n  CACHED " << ref << "\n";
      stack.push_back(ref);
      continue;
    }
    std::cerr << "\n";
    if (b.no_cache && have_layer(b, ref)) // the cached ref stays; the fresh run gets its own
      ref = "build/" + layers::digest_hex(key).substr(0, 32) + "@" + random_suffix();
    auto st = run_step(b, s, stack, ref, s.what == df::step::kind::copy ? &staged : nullptr);
    if (!st)
      return st;
    std::cerr << "  -> " << ref << " (" << elapsed(t0) << ")\n";
    stack.push_back(ref);
  }
  return {};
}

/// FROM of an image reference: the node resolves it as a create that names
/// the image does (one pull per image, with the node's registry settings;
/// no registry call when its store already has it), and the store's
/// images.json then says which layer the image became.
expected<std::string> layer_of_image(const build& b, const std::string& text) {
  auto ref = registry::parse_image_reference(text);
  if (!ref)
    return error{ref.err().code, "FROM " + text + ": " + ref.err().message};
  auto canonical = ref->str();
  auto known = registry::find_image(b.st, canonical);
  if (!known)
    return known.err();
  if (*known)
    return (*known)->layer;
  std::cerr << "Pulling " << canonical << " on the node\n";
  json spec = {{"image", text}, {"ttl_s", 600}, {"labels", {{"dsec-build", "1"}}},
               {"network", {{"mode", "none"}}}};
  auto sb = call_json(b, "POST", "/v1/sandboxes", spec.dump());
  if (!sb)
    return error{sb.err().code, "FROM " + text + ": " + sb.err().message};
  (void)rest_call(b.a, "DELETE", "/v1/sandboxes/" + url_encode(sb->value("id", ""), true));
  known = registry::find_image(b.st, canonical);
  if (!known)
    return known.err();
  if (!*known)
    return not_found("FROM " + text + ": the node pulled the image, but store " + b.st.root()
                     + " has no record of it (the node's store must be this command's:"
                       " pass --store or --state-dir)");
  return (*known)->layer;
}

int fail_build(const error& e) {
  std::cerr << "dsec layer build: " << e.message << " [" << to_string(e.code) << "]\n";
  return 1;
}

} // namespace

bool is_dockerfile_build(const std::vector<std::string>& words) {
  if (words.empty() || words[0] != "build")
    return false;
  return std::any_of(words.begin(), words.end(), [](const std::string& w) {
    return w == "--dockerfile" || w.rfind("--dockerfile=", 0) == 0;
  });
}

int run_dockerfile_build(const std::vector<std::string>& words) {
  for (auto& w : words)
    if (w == "--help" || w == "-h") {
      std::cout << usage_text;
      return 0;
    }
  auto parsed = parse_args({words.begin() + 1, words.end()},
                           {"dockerfile", "context", "name", "version", "kind", "build-arg", "rest",
                            "state-dir", "store", "under"},
                           {"network", "no-cache"});
  if (!parsed)
    return usage(parsed.err().message);
  auto& p = *parsed;
  if (!p.positional.empty())
    return usage("--dockerfile takes no DIR (use --context)");
  if (!p.has("name") || !p.has("version"))
    return usage("needs --name and --version");
  if (p.has("state-dir") && p.has("store"))
    return usage("give --state-dir or --store, not both");
  auto kind = p.get("kind", "base");
  if (auto st = layers::validate_kind(kind); !st || kind == "snapshot")
    return usage("--kind must be base, workspace or toolkit");
  for (auto st : {layers::validate_name(p.get("name")), layers::validate_version(p.get("version"))})
    if (!st)
      return usage(st.err().message);
  std::map<std::string, std::string> build_args;
  for (auto& kv : p.all("build-arg")) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return usage("--build-arg " + kv + ": expected KEY=VALUE");
    build_args[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto dockerfile = p.get("dockerfile");
  auto text = sys::read_file(dockerfile);
  if (!text)
    return fail_build({text.err().code, "read Dockerfile: " + text.err().message});
  auto slash = dockerfile.rfind('/');
  auto context = p.get("context", slash == std::string::npos ? "." : dockerfile.substr(0, slash));
  auto root = p.has("store") ? p.get("store") : p.get("state-dir", "/var/lib/dsec") + "/store";
  auto store = layers::store::open(root);
  if (!store)
    return fail_build(store.err());
  build b{p, *store, context, kind, p.has("network"), p.has("no-cache")};

  auto ins = df::parse(*text);
  if (!ins)
    return fail_build(ins.err());
  auto from = df::base_of(*ins, build_args);
  if (!from)
    return fail_build(from.err());
  if (!layers::parse_ref(*from)) {
    if (!registry::looks_like_image_reference(*from))
      return fail_build(invalid_argument(
        "FROM " + *from + ": neither a layer ref (name@version) nor an image reference"
                          " (REGISTRY/REPO:TAG or REPO@sha256:HEX)"));
    auto layer = layer_of_image(b, *from);
    if (!layer)
      return fail_build(layer.err());
    std::cerr << "FROM " << *from << ": layer " << *layer << "\n";
    *from = *layer;
  }
  // The base stack: --under's layers, then FROM's; their configs merged as
  // a sandbox of them gets them.
  std::vector<std::string> stack = p.all("under");
  stack.push_back(*from);
  std::vector<layer_config> configs;
  std::string key;
  for (auto& ref : stack) {
    auto base = b.st.resolve(ref);
    if (!base)
      return fail_build({base.err().code, (ref == *from ? "FROM " : "--under ") + ref + ": "
                                            + base.err().message
                                            + " (the node's store must be this command's:"
                                              " pass --store or --state-dir)"});
    configs.push_back(base->config);
    // One layer keys as its digest (the cache of builds before --under).
    key = key.empty() ? base->digest : layers::sha256_string(key + "\nthen " + base->digest);
  }
  auto plan = df::make_plan(*ins, build_args, merge_layer_configs(configs));
  if (!plan)
    return fail_build(plan.err());
  for (auto& w : plan->warnings)
    std::cerr << "warning: " << w << "\n";

  auto began = std::chrono::steady_clock::now();
  if (auto st = run_steps(b, *plan, stack, key); !st)
    return fail_build(st.err());
  // One layer: the stack flattened, the exec defaults recorded.
  auto t0 = std::chrono::steady_clock::now();
  auto flat_key = layers::sha256_string(key + "\nflatten " + b.kind + "\n"
                                        + json{{"env", plan->config.env},
                                               {"workdir", plan->config.workdir},
                                               {"user", plan->config.user}}.dump());
  auto flat_ref = cache_ref(flat_key);
  expected<layer_info> flat = b.st.resolve(flat_ref);
  if (!b.no_cache && flat && layers::layer_present(b.st, flat->digest)) {
    std::cerr << "Flatten " << stack.size() << " layers: CACHED " << flat_ref << "\n";
  } else {
    if (b.no_cache && flat)
      flat_ref = "build/" + layers::digest_hex(flat_key).substr(0, 32) + "@" + random_suffix();
    std::cerr << "Flatten " << stack.size() << " layers into " << flat_ref << "\n";
    flat = flatten(b, stack, flat_ref, plan->config);
    if (!flat)
      return fail_build(flat.err());
    std::cerr << "  -> " << flat->digest << " (" << elapsed(t0) << ")\n";
  }
  auto out = tag(b, *flat, p.get("name"), p.get("version"));
  if (!out)
    return fail_build(out.err());
  std::cerr << "Built " << out->ref << " in " << elapsed(began) << "\n";
  std::cout << out->ref << " " << out->digest << "\n";
  return 0;
}

} // namespace dsec::cli
