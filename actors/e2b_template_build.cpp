// One E2B template build, on a thread of its own (e2b_templates.hpp): the
// base resolved to a layer (a template, an alias, or an image the node
// pulls), the uploaded COPY files laid out in a build context, the steps
// written as a Dockerfile, and `dsec layer build --dockerfile` run against
// this node, its output lines the build's log. On success every tag of the
// build names the built layer, in memory and in the store's record.
#include "actors/e2b_templates.hpp"

#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/e2b_codec.hpp"
#include "core/clock.hpp"
#include "core/host_port.hpp"
#include "core/layer_config.hpp"
#include "core/image_reference.hpp"
#include "layers/aliases.hpp"
#include "layers/tar_apply.hpp"
#include "registry/image_index.hpp"
#include "sys/fs.hpp"
#include "sys/http_client.hpp"
#include "sys/process.hpp"

namespace dsec::e2b {

expected<sys::http_client> node_client(const node_config& cfg) {
  auto hp = parse_host_port(cfg.rest);
  if (!hp)
    return hp.err();
  auto host = hp->first == "0.0.0.0" ? std::string{"127.0.0.1"}
              : hp->first == "::"    ? std::string{"::1"}
                                     : hp->first;
  sys::http_client client{host, hp->second};
  if (!cfg.api_keys.empty())
    client.add_header("X-API-Key", cfg.api_keys.front());
  return client;
}

namespace {

using nlohmann::json;

/// What the build thread knows of its build.
struct run {
  template_registry& reg;
  build_job job;
  std::vector<int> step_of; // Dockerfile step (1-based, after FROM) -> SDK step

  void log(const std::string& level, const std::string& msg) {
    std::lock_guard<std::mutex> lock{reg.mutex};
    reg.builds[job.build_id].logs.push_back({now_ms(), level, msg});
  }

  void fail(const std::string& msg, const std::string& step) {
    std::lock_guard<std::mutex> lock{reg.mutex};
    auto& b = reg.builds[job.build_id];
    b.logs.push_back({now_ms(), "error", msg});
    b.status = "error";
    b.reason = msg;
    b.step = step;
  }
};

/// Whether this node's REST port still answers /healthz (false once it stops).
bool node_answers(const node_config& cfg) {
  auto client = node_client(cfg);
  if (!client)
    return false;
  auto res = client->request("GET", "/healthz", {}, "application/json", std::chrono::seconds(5));
  return res && res->status == 200;
}

std::string rest_address(const node_config& cfg) {
  auto hp = parse_host_port(cfg.rest);
  if (!hp || (hp->first != "0.0.0.0" && hp->first != "::"))
    return cfg.rest;
  return (hp->first == "::" ? "[::1]:" : "127.0.0.1:") + std::to_string(hp->second);
}

/// The layer an image becomes on this node: its record if the store has
/// one, else a pull by the node (a create naming the image, destroyed at
/// once), as `dsec layer build` does for FROM.
expected<std::string> layer_of_image(run& r, const std::string& text) {
  auto ref = registry::parse_image_reference(text);
  if (!ref)
    return ref.err();
  auto& st = *r.job.ctx->store;
  auto known = registry::find_image(st, ref->str());
  if (!known)
    return known.err();
  if (*known)
    return (*known)->layer;
  r.log("info", "Pulling " + ref->str() + " on the node");
  auto client = node_client(r.job.ctx->config);
  if (!client)
    return client.err();
  json spec = {{"image", text}, {"ttl_s", 600}, {"labels", {{"dsec-build", "1"}}},
               {"network", {{"mode", "none"}}}};
  auto res = client->request("POST", "/v1/sandboxes", spec.dump(), "application/json",
                             std::chrono::minutes(30));
  if (!res)
    return res.err();
  auto j = json::parse(res->body, nullptr, false);
  if (res->status != 201 || j.is_discarded()) {
    std::string msg = j.is_discarded() ? res->body.substr(0, 300)
                                       : j.value("error", json::object()).value("message", "");
    return error{errc::invalid_argument, "pull " + text + ": " + msg};
  }
  (void)client->request("DELETE", "/v1/sandboxes/" + j.value("id", ""));
  known = registry::find_image(st, ref->str());
  if (!known)
    return known.err();
  if (!*known)
    return not_found("pull " + text + ": the node has no record of the image after the pull");
  return (*known)->layer;
}

/// The base: its layer refs (bottom first; a built-in template such as
/// `base` has several), and for a template built here its start and ready
/// commands (empty for an image, an alias or a built-in template).
struct base_of {
  std::vector<std::string> layers;
  std::string start_cmd;
  std::string ready_cmd;
};

expected<base_of> base_layer(run& r) {
  auto& s = r.job.start;
  if (!s.from_image.empty()) {
    auto l = layer_of_image(r, s.from_image);
    if (!l)
      return l.err();
    return base_of{{*l}, {}, {}};
  }
  auto tn = parse_template_name(s.from_template, "fromTemplate");
  if (!tn)
    return tn.err();
  {
    std::lock_guard<std::mutex> lock{r.reg.mutex};
    auto t = r.reg.templates.find(tn->name);
    if (t != r.reg.templates.end()) {
      auto tag = t->second.find(tn->tag.empty() ? default_tag : tn->tag);
      if (tag != t->second.end())
        return base_of{{tag->second.layer}, tag->second.start_cmd, tag->second.ready_cmd};
    }
  }
  if (tn->tag.empty()) {
    auto aliases = layers::read_aliases(r.job.store_root);
    if (!aliases)
      return aliases.err();
    if (auto it = aliases->find(tn->name); it != aliases->end())
      return base_of{{it->second}, {}, {}};
    if (auto l = template_layers(tn->name); l && tn->name.find('@') == std::string::npos)
      return base_of{*l, {}, {}};
  }
  return not_found("fromTemplate " + s.from_template.substr(0, 100)
                   + ": no such template on this node");
}

/// Lays out COPY step `i` under `ctx`: the upload unpacked in x<i>, the
/// matches of its source moved into s<i>.
expected<copy_layout> lay_out_copy(const std::string& root, const std::string& ctx, size_t i,
                                   const template_step& s) {
  auto where = "step " + std::to_string(i + 1) + " (COPY " + s.args[0] + ")";
  auto tar = template_files_path(root, s.files_hash);
  struct stat st;
  if (::stat(tar.c_str(), &st) != 0)
    return not_found(where + ": its files (hash " + s.files_hash + ") were never uploaded");
  auto x = ctx + "/x" + std::to_string(i);
  auto dir = "s" + std::to_string(i);
  for (auto& d : {x, ctx + "/" + dir})
    if (auto made = sys::make_dirs(d); !made)
      return made.err();
  // The SDK gzips its tar by default; a plain tar is taken as well.
  auto plain = ctx + "/x" + std::to_string(i) + ".tar";
  auto gz = sys::run_command({"sh", "-c", "gzip -dc < \"$1\" > \"$2\" 2>/dev/null || cp \"$1\" \"$2\"",
                              "sh", tar, plain});
  if (!gz || gz->exit_code != 0)
    return internal_error(where + ": unpack the upload");
  layers::apply_stats stats;
  layers::apply_options opts;
  opts.whiteouts = false;
  opts.keep_owner = false;
  if (auto ok = layers::apply_tar(plain, x, "upload of " + where, stats, opts); !ok)
    return ok.err();
  ::unlink(plain.c_str());
  auto pattern = x + "/" + s.args[0];
  glob_t g{};
  int rc = ::glob(pattern.c_str(), GLOB_NOSORT | GLOB_NOESCAPE, nullptr, &g);
  std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
  ::globfree(&g);
  if (matches.empty())
    return not_found(where + ": the source matches no file in the uploaded context");
  struct stat first;
  bool single_file = matches.size() == 1 && ::lstat(matches[0].c_str(), &first) == 0
                     && !S_ISDIR(first.st_mode);
  auto target = copy_target_of(s.args[0], s.args[1], single_file);
  for (auto& m : matches) {
    auto name = target.rename ? target.entry_name : m.substr(m.rfind('/') + 1);
    auto to = ctx + "/" + dir + "/" + name;
    if (::rename(m.c_str(), to.c_str()) != 0)
      return internal_error(where + ": move " + m + ": " + std::strerror(errno));
  }
  return copy_layout{dir, target.dest_dir};
}

/// Runs argv with stdout and stderr into a pipe; each line goes to `line`.
/// The child dies with this thread. Returns its exit status.
int run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              const std::function<void(const std::string&)>& line) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return -1;
  std::vector<char*> cargv, cenv;
  for (auto& a : argv)
    cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (auto& e : env)
    cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    // SAFETY: only async-signal-safe calls between fork and exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return -1;
  }
  std::string buf;
  char chunk[4096];
  for (;;) {
    auto n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    buf.append(chunk, static_cast<size_t>(n));
    for (size_t nl; (nl = buf.find('\n')) != std::string::npos; buf.erase(0, nl + 1))
      if (nl > 0)
        line(buf.substr(0, nl));
  }
  if (!buf.empty())
    line(buf);
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
}

std::string short_id(const std::string& id) {
  std::string out;
  for (char c : id)
    if (c != '-' && out.size() < 8)
      out += c;
  return out;
}

void build(run& r) {
  auto& job = r.job;
  auto root = job.store_root;
  template_build snapshot;
  {
    std::lock_guard<std::mutex> lock{r.reg.mutex};
    snapshot = r.reg.builds[job.build_id];
  }
  sys::scoped_tree work;
  work.path = root + "/tmp/e2b-build-" + job.build_id;
  auto ctx = work.path + "/context";
  if (auto made = sys::make_dirs(ctx); !made)
    return r.fail(made.err().message, "base");
  auto base = base_layer(r);
  if (!base)
    return r.fail("base: " + base.err().message, "base");
  // The Dockerfile's FROM is the top layer; the builder stacks the rest
  // under it (--under), so the template holds all of them.
  const std::string& from = base->layers.back();
  std::vector<layer_config> configs;
  for (auto& l : base->layers) {
    auto info = job.ctx->store->resolve(l);
    if (!info)
      return r.fail("base " + l + ": " + info.err().message, "base");
    configs.push_back(info->config);
  }
  std::string shown;
  for (auto& l : base->layers)
    shown += (shown.empty() ? "" : " + ") + l;
  r.log("info", "FROM " + shown);
  // A child of a template with a start command starts, on E2B, from the
  // parent's snapshot, whose start process runs: here the child runs the
  // parent's commands, unless it sets its own.
  if (inherit_start(job.start, base->start_cmd, base->ready_cmd))
    r.log("info", "Start and ready commands of " + job.start.from_template + ": \""
                    + job.start.start_cmd + "\", \"" + job.start.ready_cmd + "\"");
  std::map<size_t, copy_layout> copies;
  for (size_t i = 0; i < job.start.steps.size(); ++i)
    if (job.start.steps[i].type == "COPY") {
      auto l = lay_out_copy(root, ctx, i, job.start.steps[i]);
      if (!l)
        return r.fail(l.err().message, std::to_string(i + 1));
      copies[i] = *l;
    }
  auto dockerfile = make_dockerfile(job.start, from, merge_layer_configs(configs).user, copies,
                                    r.step_of);
  if (!dockerfile)
    return r.fail(dockerfile.err().message, "base");
  auto path = work.path + "/Dockerfile";
  if (auto w = sys::write_file_atomic(path, *dockerfile, 0644, sys::durability::process_crash); !w)
    return r.fail(w.err().message, "base");
  auto version = snapshot.tags.front().substr(0, 55) + "." + short_id(job.build_id);
  auto layer = "e2b/" + snapshot.template_name + "@" + version;
  std::vector<std::string> argv{"/proc/self/exe", "layer", "build", "--dockerfile", path,
                                "--context", ctx, "--name", "e2b/" + snapshot.template_name,
                                "--version", version, "--store", root,
                                "--rest", rest_address(job.ctx->config),
                                // E2B's build steps reach the network (apt, pip).
                                "--network"};
  for (size_t i = 0; i + 1 < base->layers.size(); ++i)
    argv.insert(argv.end(), {"--under", base->layers[i]});
  if (job.start.force)
    argv.push_back("--no-cache");
  std::vector<std::string> env{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  if (!job.ctx->config.api_keys.empty())
    env.push_back("DSEC_API_KEY=" + job.ctx->config.api_keys.front());
  std::string step = "base", last;
  int rc = run_child(argv, env, [&](const std::string& l) {
    if (l.rfind("Step ", 0) == 0) {
      auto n = std::atoi(l.c_str() + 5);
      if (n >= 1 && static_cast<size_t>(n) <= r.step_of.size())
        step = std::to_string(r.step_of[n - 1]);
    } else if (l.rfind("Flatten", 0) == 0) {
      step = "finalize";
    }
    last = l;
    r.log("info", l);
  });
  if (rc != 0) {
    const std::string prefix = "dsec layer build: ";
    auto msg = last.rfind(prefix, 0) == 0 ? last.substr(prefix.size()) : last;
    // The node's port closing under the builder is the node stopping: say so
    // rather than the builder's connection error.
    if (msg.find("[unavailable]") != std::string::npos && !node_answers(job.ctx->config)) {
      r.fail(interrupted_reason, step);
      std::lock_guard<std::mutex> lock{r.reg.mutex};
      r.reg.builds[job.build_id].interrupted_at_load = true; // its steps: reaped at start
      return;
    }
    return r.fail(msg.empty() ? "the build exited with status " + std::to_string(rc) : msg, step);
  }
  // E2B runs the start command at build time and fails a build whose start
  // or ready command fails; so does this check (e2b_start_check.cpp).
  template_start t{snapshot.template_name, job.start.start_cmd, job.start.ready_cmd};
  if (!t.empty())
    if (auto st = check_start_in_build(job.ctx->config, layer, t,
                                       [&r](const std::string& l) { r.log("info", l); });
        !st)
      return r.fail(st.err().message, "finalize");
  template_map all;
  {
    std::lock_guard<std::mutex> lock{r.reg.mutex};
    if (!r.reg.load_error.empty())
      return r.fail(r.reg.load_error, "finalize"); // never written over
    for (auto& t : snapshot.tags)
      r.reg.templates[snapshot.template_name][t] =
        template_tag{job.build_id,        layer,
                     now_ms(),            snapshot.cpu,
                     snapshot.memory_mb,  job.start.start_cmd,
                     job.start.ready_cmd};
    all = r.reg.templates;
  }
  if (auto w = write_templates(root, all); !w)
    return r.fail("record the template: " + w.err().message, "finalize");
  std::lock_guard<std::mutex> lock{r.reg.mutex};
  auto& b = r.reg.builds[job.build_id];
  b.logs.push_back({now_ms(), "info", "Template " + snapshot.template_name + " is layer " + layer});
  b.status = "ready";
}

} // namespace

std::string template_files_path(const std::string& root, const std::string& hash) {
  return root + "/e2b_template_files/" + hash + ".tar";
}

void start_template_build(template_registry& reg, build_job job) {
  {
    std::lock_guard<std::mutex> lock{reg.mutex};
    auto& b = reg.builds[job.build_id];
    b.status = "building";
    b.logs.push_back({now_ms(), "info", "Build " + job.build_id + " started"});
  }
  std::thread([&reg, job = std::move(job)]() mutable {
    run r{reg, std::move(job), {}};
    record_builds(reg); // `building`: after a restart, an interrupted build
    build(r);
    record_builds(reg); // `ready` or `error`
  }).detach();
}

} // namespace dsec::e2b
