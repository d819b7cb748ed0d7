// create() of a VM sandbox: the layer images behind the node's EROFS mounts,
// the sandbox dir, its upper disk (<dir>/upper.img, a copy of the node's
// pristine image of disk_mb: upper_disk.hpp), then up to three boots: two socketpairs (control channel
// with `config` already queued, file channel), QEMU, and a wait for the
// agent's `ready` within the boot deadline. A guest that does not answer in
// time (under TCG a microvm occasionally hangs calibrating its clock;
// tsc_early_khz on the command line makes that rare) is killed and booted
// again; after the last attempt the error says what each one did. On any
// failure nothing remains: QEMU is killed and reaped, the dir removed.
// Before anything, a create waits for the node's accelerator decision
// (vm_accel.hpp; usually made long before); a node that stops kills the
// guest being booted or restored (inflight.hpp) and the create fails with
// "node is stopping" instead of booting again.
#include "backends/vm/vm_backend.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <fstream>
#include <iostream>

#include "backends/channel/io_loop.hpp"
#include "backends/policy/seccomp_filter.hpp"
#include "backends/channel/protocol.hpp"
#include "backends/vm/initramfs.hpp"
#include "backends/vm/qemu.hpp"
#include "backends/vm/upper_disk.hpp"
#include "backends/vm/vm_sandbox.hpp"
#include "backends/vm/vm_template.hpp"
#include "sys/cleanup.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace proto = init_proto;

namespace {

constexpr int boot_attempts = 3;

std::string find_on_path(const std::string& name) {
  const char* path = ::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t i = 0;
  while (i <= p.size()) {
    auto j = p.find(':', i);
    if (j == std::string::npos)
      j = p.size();
    auto cand = p.substr(i, j - i) + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0)
      return cand;
    i = j + 1;
  }
  return {};
}

// The TSC rate of the host in kHz, for tsc_early_khz= (TCG guests see the
// host's TSC); 0 if unknown.
long host_tsc_khz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("cpu MHz", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos)
        return std::lround(std::atof(line.c_str() + colon + 1) * 1000);
    }
  return 0;
}

// The image file behind the EROFS mount at `dir` (file-backed mount: the
// file; loop device: its backing file).
expected<std::string> layer_image(const std::string& dir, const std::string& id) {
  std::string src;
  bool found = false;
  for (auto& m : sys::mounts())
    if (m.point == dir) {
      found = m.fstype == "erofs";
      src = m.source;
    }
  if (!found)
    return invalid_argument("create " + id + ": layer dir " + dir +
                            " is not an EROFS mount; VM backends need EROFS layers");
  if (src.rfind("/dev/loop", 0) == 0) {
    auto back = sys::read_file("/sys/block/" + src.substr(5) + "/loop/backing_file");
    if (!back)
      return back.err();
    src = back->substr(0, back->find('\n'));
  }
  struct stat st;
  if (::stat(src.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return internal_error("create " + id + ": layer image " + src + " of " + dir +
                          " is not a readable file");
  return src;
}

enum class boot_result { ready, setup_failed, no_answer, qemu_exited };

// Waits for init's answer to `config`, watching QEMU's pidfd.
boot_result await_ready(int ctl, int pidfd, int timeout_ms, std::string& why) {
  std::string in;
  char buf[4096];
  proto::header h;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (proto::peek_frame(in, h) == proto::parse::incomplete) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0)
      return boot_result::no_answer;
    pollfd fds[2] = {{ctl, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int n = ::poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR)
      continue;
    if (fds[0].revents & POLLIN) {
      auto got = ::recv(ctl, buf, sizeof buf, MSG_DONTWAIT);
      if (got > 0)
        in.append(buf, static_cast<size_t>(got));
      continue;
    }
    if (fds[1].revents & POLLIN)
      return boot_result::qemu_exited;
  }
  if (proto::peek_frame(in, h) == proto::parse::invalid) {
    why = "malformed answer from the guest agent";
    return boot_result::setup_failed;
  }
  if (h.type == proto::msg::ready)
    return boot_result::ready;
  proto::reader r(std::string_view(in).substr(proto::header_size, h.length));
  why = r.str();
  return boot_result::setup_failed;
}

/// What both VM backends of a node share.
struct vm_shared {
  vm_config cfg;
  std::string initrd, kernel, seccomp;
  std::shared_ptr<io_loop> loop;
  std::shared_ptr<template_cache> templates;
  std::shared_ptr<vm_accel> accel;
  std::shared_ptr<inflight_qemus> inflight;
};

class vm_backend final : public backend {
 public:
  vm_backend(std::string name, bool microvm, const vm_shared& sh)
    : name_(std::move(name)), microvm_(microvm), cfg_(sh.cfg), initrd_(sh.initrd),
      kernel_(sh.kernel), seccomp_(sh.seccomp), loop_(sh.loop), templates_(sh.templates),
      accel_(sh.accel), inflight_(sh.inflight), tsc_khz_(host_tsc_khz()) {}

  std::string_view name() const override { return name_; }

  expected<std::shared_ptr<sandbox>> create(const create_params& p) override;

  expected<std::shared_ptr<sandbox>> recover(const std::string& id,
                                             const std::string& dir) override {
    // QEMU dies with the node (PR_SET_PDEATHSIG): nothing to re-attach to.
    (void)sys::remove_tree(dir);
    return not_found("recover " + id + ": " + name_ +
                     " sandboxes do not survive a node restart; leftovers removed");
  }

 private:
  int boot_timeout_ms(bool kvm) const {
    if (const char* env = ::getenv("DSEC_VM_BOOT_TIMEOUT_S"); env && std::atof(env) > 0)
      return static_cast<int>(std::atof(env) * 1000);
    if (kvm)
      return 15000;
    return microvm_ ? 30000 : 90000;
  }

  machine_spec machine(const create_params& p, const std::vector<std::string>& disks,
                       bool kvm) const {
    machine_spec m;
    m.microvm = microvm_;
    m.kvm = kvm;
    m.qemu = cfg_.qemu;
    m.kernel = kernel_;
    m.initrd = initrd_;
    m.mem_mb = std::max<int64_t>(p.spec.memory_mb, 128);
    m.upper = p.dir + "/upper.img";
    m.cpus = std::max(1, static_cast<int>(std::ceil(p.spec.cpu)));
    m.cpus = std::min<int>(m.cpus, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
    m.disks = disks;
    m.console_log = p.dir + "/console.log";
    m.append = "console=ttyS0 quiet loglevel=3 panic=-1 reboot=t rdinit=/init "
               "dsec.layers=" + std::to_string(disks.size()) +
               " dsec.disk_mb=" + std::to_string(disk_mb(p));
    if (tsc_khz_ > 0 && !kvm)
      m.append += " tsc_early_khz=" + std::to_string(tsc_khz_);
    return m;
  }

  static int64_t disk_mb(const create_params& p) { return std::max<int64_t>(p.spec.disk_mb, 16); }

  // Everything a guest's memory image depends on: its template key (the
  // command line names the upper disk's size).
  std::string template_key(const machine_spec& m) const {
    std::string k = name_ + (m.kvm ? "|kvm" : "|tcg") + "|mem=" + std::to_string(m.mem_mb) +
                    "|cpus=" + std::to_string(m.cpus) + "|" + m.kernel + "|" + m.initrd + "|" +
                    m.append;
    for (auto& d : m.disks)
      k += "|" + d;
    return k;
  }

  expected<std::shared_ptr<sandbox>> finish(const create_params& p, vm_parts parts,
                                            sys::cleanup_stack& undo);
  status clone_from_template(const create_params& p, vm_parts& parts);
  expected<std::shared_ptr<sandbox>> boot(const create_params& p, vm_parts& parts,
                                          const std::string& config, sys::cleanup_stack& undo);

  std::string name_;
  bool microvm_;
  vm_config cfg_;
  std::string initrd_, kernel_, seccomp_;
  std::shared_ptr<io_loop> loop_;
  std::shared_ptr<template_cache> templates_;
  std::shared_ptr<vm_accel> accel_;
  std::shared_ptr<inflight_qemus> inflight_;
  long tsc_khz_;
};

// Fresh channels for one guest, `config` queued on the control one.
status open_channels(vm_parts& parts, const std::string& config) {
  int ctl[2], files[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
    return sys_error("socketpair", "control channel of " + parts.id, errno);
  parts.ctl_node.reset(ctl[0]);
  parts.ctl_guest.reset(ctl[1]);
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, files) != 0)
    return sys_error("socketpair", "file channel of " + parts.id, errno);
  parts.files_node.reset(files[0]);
  parts.files_guest.reset(files[1]);
  if (!config.empty() && ::send(parts.ctl_node.get(), config.data(), config.size(),
                                MSG_NOSIGNAL) != static_cast<ssize_t>(config.size()))
    return sys_error("send config to the guest of", parts.id, errno);
  return {};
}

// A spare's log becomes the sandbox's: renamed if the spare dir is on the
// sandboxes' filesystem (true: QEMU writes on into it), else copied.
bool adopt_log(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) == 0)
    return true;
  auto text = sys::read_file(from);
  (void)sys::write_file_atomic(to, text ? *text : std::string(), 0600,
                               sys::durability::process_crash);
  return false;
}

// A taken spare becomes this sandbox's guest: its channels, QEMU, upper
// disk and logs. The upper is renamed into the sandbox dir (QEMU keeps
// writing the same file); if it cannot be, it stays in the spare dir and
// the sandbox removes it when destroyed. QEMU's stderr stays on the spare's
// (copied) file; its console is pointed at the sandbox's.
status adopt_spare(vm_spare& s, vm_parts& parts) {
  parts.machine = s.machine;
  parts.machine.console_log = parts.dir + "/console.log";
  if (::rename(s.machine.upper.c_str(), (parts.dir + "/upper.img").c_str()) == 0)
    parts.machine.upper = parts.dir + "/upper.img";
  s.machine.upper.clear(); // the sandbox's now
  parts.qemu = std::move(s.qemu);
  parts.ctl_node = std::move(s.ctl_node);
  parts.ctl_guest = std::move(s.ctl_guest);
  parts.files_node = std::move(s.files_node);
  parts.files_guest = std::move(s.files_guest);
  (void)adopt_log(s.log, parts.dir + "/qemu.log");
  if (adopt_log(s.machine.console_log, parts.machine.console_log))
    return {};
  qmp_client q(parts.qemu.qmp.get(), parts.qemu.qmp_ready);
  auto r = q.command(R"({"execute":"chardev-change","arguments":{"id":"serial0","backend":)"
                     R"({"type":"file","data":{"out":")" + parts.machine.console_log +
                     R"(","append":true}}}})");
  parts.qemu.qmp_ready = q.ready();
  if (!r)
    return error{r.err().code, "move the console to " + parts.machine.console_log + ": " +
                                 r.err().message};
  return {};
}

// The template for this machine (made now by booting, if it is the first),
// then its spare if one is ready (identity only), else a clone of it:
// restore, identity. Any failure: nothing of the clone remains and the
// caller boots instead.
status vm_backend::clone_from_template(const create_params& p, vm_parts& parts) {
  int timeout = boot_timeout_ms(parts.machine.kvm);
  inflight_qemus::guard watch; // the template's QEMU, then the clone's
  auto key = template_key(parts.machine);
  for (auto& r : p.spec.protect.readonly)
    key += "|ro=" + r;
  for (auto& h : p.spec.protect.hidden)
    key += "|hidden=" + h;
  auto t = templates_->get(
    key,
    [&](const std::string& dir) -> expected<std::shared_ptr<vm_template>> {
      auto pristine = pristine_upper(cfg_.work_dir, disk_mb(p));
      if (!pristine)
        return pristine.err();
      auto tconfig = proto::encode(proto::config_msg{"dsec-template", "/newroot", seccomp_,
                                                     p.spec.protect.readonly,
                                                     p.spec.protect.hidden});
      return make_vm_template(
        parts.machine, key, dir, tconfig, *pristine,
        [&](int ctl, int pidfd) -> status {
          std::string why;
          auto r = await_ready(ctl, pidfd, timeout, why);
          if (r == boot_result::ready)
            return {};
          if (r == boot_result::setup_failed)
            return internal_error("guest setup: " + why);
          return unavailable(r == boot_result::no_answer
                               ? "the guest agent did not answer within " +
                                   std::to_string(timeout / 1000) + " s"
                               : "qemu exited");
        },
        [&](int pidfd) { watch = inflight_->watch(pidfd); });
    },
    timeout + 10000);
  watch.reset();
  if (inflight_->stopping())
    return inflight_qemus::stopping_error("create " + p.id);
  if (!t)
    return unavailable("no template");
  auto fail = [&](const std::string& step, const error& e) -> error {
    if (parts.qemu.pidfd)
      stop_qemu(parts.qemu);
    if (!parts.machine.upper.empty()) // <dir>/upper.img or a spare's left in the spare dir
      ::unlink(parts.machine.upper.c_str());
    ::truncate(parts.machine.console_log.c_str(), 0);
    if (inflight_->stopping()) // killed on purpose: the template is fine
      return inflight_qemus::stopping_error("create " + p.id);
    auto why = "clone " + p.id + " of template " + t->dir + ": " + step + ": " + e.message;
    templates_->drop(key, why);
    std::cerr << "dsec node: " << why << "; creating by a normal boot" << std::endl;
    return error{e.code, why};
  };
  if (auto spare = templates_->take_spare(key, 3000)) {
    auto st = adopt_spare(*spare, parts);
    spare.reset();
    watch = inflight_->watch(parts.qemu.pidfd.get());
    if (!st)
      return fail("take a spare", st.err());
    if (auto st = send_guest_identity(parts.files_node.get(), parts.qemu.pidfd.get(), timeout,
                                      p.id);
        !st)
      return fail("identity (spare)", st.err());
    return {};
  }
  // The clone's agent is set up already: no config, only its identity.
  if (auto st = open_channels(parts, {}); !st)
    return st.err();
  auto q = start_vm_clone(*t, parts.machine, parts.ctl_guest.get(), parts.files_guest.get(),
                          p.dir + "/upper.img", p.dir + "/qemu.log", timeout,
                          [&](int pidfd) { watch = inflight_->watch(pidfd); });
  if (!q)
    return fail("restore", q.err());
  parts.qemu = std::move(*q);
  if (auto st = send_guest_identity(parts.files_node.get(), parts.qemu.pidfd.get(), timeout, p.id);
      !st)
    return fail("identity", st.err());
  watch.reset();
  if (inflight_->stopping()) // killed between the last step and now
    return fail("identity", inflight_qemus::stopping_error("create " + p.id));
  return {};
}

expected<std::shared_ptr<sandbox>> vm_backend::create(const create_params& p) {
  if (auto st = check_params(p); !st)
    return st.err();
  auto what = "create " + p.id;
  // The guest has no network device: an allow-list (addresses, domains or
  // egress source names) would be accepted and open nothing.
  if (!p.spec.network.allow.empty())
    return invalid_argument(what + ": network.allow is not supported by the " + name_
                            + " backend (its guest has no network; allow-lists, egress source "
                              "names and DNS need the container backend)");
  if (inflight_->stopping())
    return inflight_qemus::stopping_error(what);
  // Decided at node start; only the first creates after it may wait.
  auto accel = accel_->wait(accel_->max_wait_ms());
  if (inflight_->stopping())
    return inflight_qemus::stopping_error(what);
  if (!accel.refused.empty())
    return unavailable(what + ": " + name_ + ": " + accel.refused);
  std::vector<std::string> disks;
  for (auto& dir : p.lower_dirs) {
    auto img = layer_image(dir, p.id);
    if (!img)
      return img.err();
    disks.push_back(*img);
  }
  auto slash = p.dir.find_last_of('/');
  if (slash > 0)
    if (auto st = sys::make_dirs(p.dir.substr(0, slash)); !st)
      return st.err();
  if (::mkdir(p.dir.c_str(), 0700) != 0)
    return sys_error("mkdir", p.dir, errno, errno == EEXIST ? errc::conflict : errc::internal);
  sys::cleanup_stack undo;
  undo.push([dir = p.dir] { (void)sys::remove_tree(dir); });
  vm_parts parts;
  parts.id = p.id;
  parts.dir = p.dir;
  parts.env = p.spec.env;
  parts.inflight = inflight_;
  parts.node_id = cfg_.node_id;
  parts.machine = machine(p, disks, accel.kvm);
  auto config = proto::encode(proto::config_msg{p.id, "/newroot", seccomp_,
                                                p.spec.protect.readonly, p.spec.protect.hidden});
  if (templates_->enabled()) {
    auto cloned = clone_from_template(p, parts);
    if (cloned)
      return finish(p, std::move(parts), undo);
    if (cloned.err().code == errc::invalid_argument || inflight_->stopping())
      return cloned.err();
    parts.machine = machine(p, disks, accel.kvm); // a boot from scratch
  }
  return boot(p, parts, config, undo);
}

// Up to boot_attempts boots of `parts.machine` with `config` queued.
expected<std::shared_ptr<sandbox>> vm_backend::boot(const create_params& p, vm_parts& parts,
                                                    const std::string& config,
                                                    sys::cleanup_stack& undo) {
  std::string attempts;
  int timeout = boot_timeout_ms(parts.machine.kvm);
  auto pristine = pristine_upper(cfg_.work_dir, disk_mb(p));
  if (!pristine)
    return error{pristine.err().code, "create " + p.id + ": " + pristine.err().message};
  for (int attempt = 1; attempt <= boot_attempts; ++attempt) {
    if (inflight_->stopping())
      return inflight_qemus::stopping_error("create " + p.id);
    if (auto st = open_channels(parts, config); !st)
      return st.err();
    // A fresh upper each attempt (a killed guest may have mounted it).
    if (auto st = copy_image(*pristine, parts.machine.upper); !st)
      return error{st.err().code, "create " + p.id + ": upper disk: " + st.err().message};
    auto q = start_qemu(qemu_argv(parts.machine), parts.ctl_guest.get(),
                        parts.files_guest.get(), p.dir + "/qemu.log");
    if (!q)
      return error{q.err().code, "create " + p.id + ": start qemu: " + q.err().message};
    parts.qemu = std::move(*q);
    auto watch = inflight_->watch(parts.qemu.pidfd.get());
    std::string why;
    auto r = await_ready(parts.ctl_node.get(), parts.qemu.pidfd.get(), timeout, why);
    watch.reset();
    if (inflight_->stopping()) {
      stop_qemu(parts.qemu);
      return inflight_qemus::stopping_error("create " + p.id);
    }
    if (r == boot_result::ready)
      break;
    stop_qemu(parts.qemu);
    auto console = log_tail(parts.machine.console_log);
    auto qlog = log_tail(p.dir + "/qemu.log");
    if (r == boot_result::setup_failed) {
      if (why.rfind("protect ", 0) == 0)
        return invalid_argument("create " + p.id + ": " + why);
      return internal_error("create " + p.id + ": guest setup: " + why);
    }
    attempts += " attempt " + std::to_string(attempt) + ": " +
                (r == boot_result::no_answer
                   ? "the guest agent did not answer within " + std::to_string(timeout / 1000) +
                       " s (killed)"
                   : "qemu exited" + (qlog.empty() ? std::string() : " (" + qlog + ")")) +
                (console.empty() ? std::string() : "; console: " + console) + ";";
    ::truncate(parts.machine.console_log.c_str(), 0);
    if (attempt == boot_attempts)
      return error{errc::unavailable, "create " + p.id + ": " + name_ + " did not boot after " +
                                          std::to_string(boot_attempts) + " attempts:" +
                                          attempts};
  }
  return finish(p, std::move(parts), undo);
}

expected<std::shared_ptr<sandbox>> vm_backend::finish(const create_params& p, vm_parts parts,
                                                      sys::cleanup_stack& undo) {
  auto sb = std::make_shared<vm_sandbox>(loop_, std::move(parts));
  if (auto st = sb->start(); !st) {
    (void)sb->destroy();
    return st.err();
  }
  if (p.spec.cpu_class != "latency")
    if (auto st = sb->set_cpu_class(p.spec.cpu_class); !st) {
      (void)sb->destroy();
      return error{st.err().code, "create " + p.id + ": " + st.err().message};
    }
  undo.commit();
  return std::shared_ptr<sandbox>(std::move(sb));
}

// One template cache for both machine types (the key names the type), as
// $DSEC_VM_TEMPLATE_DIR, _TEMPLATES, _SPARES and _SPARE_IDLE_S say.
std::shared_ptr<template_cache> make_template_cache(const vm_config& cfg) {
  std::string tdir = cfg.template_dir;
  if (tdir.empty())
    tdir = ::getenv("DSEC_VM_TEMPLATE_DIR") ? ::getenv("DSEC_VM_TEMPLATE_DIR")
                                             : "/dev/shm/dsec-" + cfg.node_id;
  size_t max_templates = 4;
  if (const char* env = ::getenv("DSEC_VM_TEMPLATES"); env && *env)
    max_templates = std::string_view(env) == "off" ? 0 : static_cast<size_t>(std::atol(env));
  // Ready clones per template (see vm_template.hpp).
  size_t spares = 1;
  if (const char* env = ::getenv("DSEC_VM_SPARES"); env && *env)
    spares = static_cast<size_t>(std::atol(env));
  int64_t spare_idle_ms = 600000;
  if (const char* env = ::getenv("DSEC_VM_SPARE_IDLE_S"); env && std::atof(env) > 0)
    spare_idle_ms = static_cast<int64_t>(std::atof(env) * 1000);
  // A spare restores (~0.5 s under TCG): 30 s covers a loaded machine under
  // either accelerator.
  return std::make_shared<template_cache>(tdir, max_templates, cfg.work_dir + "/spares", spares,
                                          30000, spare_idle_ms);
}

} // namespace

vm_backends make_vm_backends(const vm_config& in) {
  vm_backends out;
  vm_config cfg = in;
  auto refuse = [&out](const std::string& why) {
    out.unavailable["microvm"] = why;
    out.unavailable["vm"] = why;
    return out;
  };
  auto mode = parse_accel_mode(::getenv("DSEC_VM_ACCEL"));
  if (!mode) {
    std::cerr << "dsec node " << cfg.node_id << ": microvm and vm are unavailable: "
              << mode.err().message << std::endl;
    return refuse(mode.err().message);
  }
  if (cfg.qemu.empty())
    cfg.qemu = ::getenv("DSEC_QEMU") ? ::getenv("DSEC_QEMU") : find_on_path("qemu-system-x86_64");
  if (cfg.qemu.empty() || ::access(cfg.qemu.c_str(), X_OK) != 0)
    return refuse("qemu-system-x86_64 not found on this node (install qemu-system-x86)");
  if (cfg.guest_dir.empty())
    cfg.guest_dir = ::getenv("DSEC_GUEST_DIR") ? ::getenv("DSEC_GUEST_DIR") : "/var/lib/dsec/guest";
  auto kernel = cfg.guest_dir + "/vmlinux";
  if (!sys::exists(kernel) || !sys::exists(cfg.guest_dir + "/modules/overlay.ko") ||
      !sys::exists(cfg.guest_dir + "/modules/ext4.ko"))
    return refuse("no guest kernel in " + cfg.guest_dir +
                  " (fetch it with scripts/guest_kernel.sh " + cfg.guest_dir + ")");
  if (auto st = sys::make_dirs(cfg.work_dir); !st)
    return refuse("guest initramfs: " + st.err().message);
  auto initrd = cfg.work_dir + "/initramfs.cpio";
  if (auto st = write_guest_initramfs(initrd, cfg.init_path, cfg.guest_dir + "/modules"); !st)
    return refuse(st.err().message);
  auto prog = build_seccomp_program();
  if (!prog)
    return refuse("seccomp program: " + prog.err().message);
  vm_shared sh;
  sh.initrd = initrd;
  sh.kernel = kernel;
  sh.seccomp = *prog;
  sh.loop = std::make_shared<io_loop>();
  sh.templates = make_template_cache(cfg);
  sh.inflight = std::make_shared<inflight_qemus>();
  sh.inflight->on_cancel([w = std::weak_ptr<template_cache>(sh.templates)] {
    if (auto t = w.lock())
      t->stop();
  });
  kvm_probe_spec probe;
  probe.qemu = cfg.qemu;
  probe.kernel = kernel;
  probe.work_dir = cfg.work_dir;
  if (const char* env = ::getenv("DSEC_VM_KVM_PROBE_S"); env && std::atof(env) > 0)
    probe.deadline_ms = static_cast<int>(std::atof(env) * 1000);
  const char* cache = ::getenv("DSEC_VM_KVM_PROBE_CACHE");
  probe.cache_path = !cache || !*cache           ? "/run/dsec/kvm-probe"
                     : std::string_view(cache) == "off" ? "" : cache;
  // Last: nothing after it may fail (its destructor waits for the probe).
  sh.accel = std::make_shared<vm_accel>(*mode, probe, sh.inflight, "dsec node " + cfg.node_id);
  sh.cfg = cfg;
  out.ready["microvm"] = std::make_shared<vm_backend>("microvm", true, sh);
  out.ready["vm"] = std::make_shared<vm_backend>("vm", false, sh);
  out.accel = sh.accel;
  out.inflight = sh.inflight;
  return out;
}

} // namespace dsec::backends
