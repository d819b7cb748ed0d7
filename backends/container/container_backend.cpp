// create() as a checklist: sandbox dir, overlay root (detached: init
// attaches it in its own mount namespace, the host's never sees it; see
// launch.cpp), cgroups, control socket with the config queued, clone of init
// into new namespaces and the cgroups, meta file, the ready answer. Every
// step registers its undo on a cleanup stack at once, so a failure at any
// step leaves nothing behind. recover() re-attaches to a sandbox whose node
// restarted, from the meta file in its dir and the root view init holds.
//
// The node is multithreaded, so between clone and exec the child only makes
// raw system calls (fd shuffling and execveat); all sandbox setup happens in
// init, which is single-threaded and static.
#include "backends/container/container_backend.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "backends/container/container_net.hpp"
#include "backends/container/container_sandbox.hpp"
#include "backends/policy/cpu_class.hpp"
#include "backends/container/launch.hpp"
#include "backends/container/sandbox_meta.hpp"
#include "backends/container/launcher_pool.hpp"
#include "backends/policy/seccomp_filter.hpp"
#include "sys/cleanup.hpp"
#include "sys/fs.hpp"

namespace dsec::backends {

namespace proto = init_proto;

namespace {

// How long create() waits for init's answer to `config`. Setup takes about a
// millisecond; a stuck mount (dead network filesystem below a layer) fails
// the create instead of hanging a worker forever.
constexpr int handshake_timeout_ms = 10000;

// Reads one framed answer from init, watching its pidfd too.
status await_ready(int ctl, int pidfd, const std::string& id) {
  std::string in;
  char buf[4096];
  proto::header h;
  while (proto::peek_frame(in, h) == proto::parse::incomplete) {
    pollfd fds[2] = {{ctl, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int n = ::poll(fds, 2, handshake_timeout_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n == 0)
      return {{errc::timeout, "create " + id + ": init did not answer within " +
                                std::to_string(handshake_timeout_ms) + " ms"}};
    auto got = ::recv(ctl, buf, sizeof(buf), MSG_DONTWAIT);
    if (got > 0) {
      in.append(buf, static_cast<size_t>(got));
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    return internal_error("create " + id + ": init exited during setup");
  }
  if (proto::peek_frame(in, h) == proto::parse::invalid)
    return internal_error("create " + id + ": malformed answer from init");
  if (h.type == proto::msg::ready)
    return {};
  proto::reader r(std::string_view(in).substr(proto::header_size, h.length));
  auto msg = r.str();
  if (!r.ok())
    return internal_error("create " + id + ": init setup: malformed answer");
  // A protected path the layers do not have is the caller's mistake.
  if (msg.rfind("protect ", 0) == 0)
    return invalid_argument("create " + id + ": " + msg);
  return internal_error("create " + id + ": init setup: " + msg);
}

// How init joins `cg`: the v2 directory, open, to be born in it (clone3
// CLONE_INTO_CGROUP), and the `tasks` file of every v1 directory, open for
// writing, where the single-threaded child moves itself. Why not
// cgroup.procs: a write there moves a whole thread group and takes the
// host-wide threadgroup lock, whose rcu_sync waits for an expedited RCU
// grace period under cgroup_mutex whenever no other move happened within
// the last grace period: 25-67 ms a create on a busy host, one create at a
// time across the whole host. A thread moving itself skips that lock, and a
// clone into a v2 group takes it only for reading (measured in a probe:
// 4.4-5.0 ms against 12-20 ms from clone to being in all six groups).
expected<std::vector<sys::unique_fd>> open_cgroup_procs(const sys::cgroup& cg) {
  std::vector<sys::unique_fd> fds;
  auto unified = cg.unified_path();
  for (auto& dir : cg.paths()) {
    bool v2 = dir == unified;
    auto path = v2 ? dir : dir + "/tasks";
    fds.emplace_back(v2 ? ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                        : ::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fds.back())
      return sys_error("open", path, errno);
  }
  return fds;
}

class container_backend final : public backend {
 public:
  ~container_backend() override {
    if (net_)
      net_->close_link();
  }

  explicit container_backend(const container_config& cfg)
    : cfg_(cfg), loop_(std::make_shared<io_loop>()) {
    auto img = seal_init_binary(cfg.init_path);
    if (img)
      init_ = std::move(*img);
    else
      init_error_ = img.err();
    // Once per node: libseccomp takes ~0.6 ms to compile the filter.
    auto prog = build_seccomp_program();
    if (prog)
      seccomp_bpf_ = std::move(*prog);
    else if (!init_error_)
      init_error_ = prog.err();
    // Before any sandbox exists: the thread's table starts from the node's.
    // DSEC_FLAT_OFF=template,sysfs turns parts of the launch template off
    // (bench/density.py measures each against its absence).
    const char* off = std::getenv("DSEC_FLAT_OFF");
    std::string flat_off = off ? off : "";
    // DSEC_LAUNCHERS (checked at node start) sets how many (launcher_pool.hpp).
    auto lanes = launchers_env();
    launchers_ = launcher_pool::start(lanes ? *lanes : default_launchers,
                                      flat_off.find("template") == std::string::npos,
                                      flat_off.find("sysfs") == std::string::npos);
    // Once per node: load + verify of the eBPF programs takes ~50-90 ms.
    net_ = net::node_net::start(cfg.node_id, cfg.cgroup_root + "/unified", "dsec/" + cfg.node_id);
  }

  std::string_view name() const override { return "container"; }

  expected<std::shared_ptr<sandbox>> create(const create_params& p) override;
  expected<std::shared_ptr<sandbox>> recover(const std::string& id,
                                             const std::string& dir) override;

 private:
  std::string cgroup_rel(const std::string& id) const {
    return "dsec/" + cfg_.node_id + "/" + id;
  }

  // create() steps, each registering its undo on `undo` at once.
  expected<overlay_root> make_root(const create_params& p, sys::cleanup_stack& undo);
  status make_cgroup(const create_params& p, sandbox_parts& parts, sys::cleanup_stack& undo);
  status start_init(const create_params& p, overlay_root root, sandbox_parts& parts,
                    sys::cleanup_stack& undo);

  expected<std::shared_ptr<sandbox>> adopt(sandbox_parts parts);
  expected<std::shared_ptr<sandbox>> recover_powered_off(const std::string& id,
                                                         const std::string& dir);
  /// Kills what runs in the sandbox's cgroups and removes them.
  void end_processes(const std::string& id, const std::string& dir);
  void remove_leftovers(const std::string& id, const std::string& dir);

  container_config cfg_;
  std::shared_ptr<io_loop> loop_;
  launch_image init_;
  std::unique_ptr<launcher_pool> launchers_; ///< null: launch from the calling thread
  std::string seccomp_bpf_; ///< raw sock_filter program sent in every config
  std::shared_ptr<net::node_net> net_; ///< eBPF allow-lists, denial counters, bridge
  error init_error_;
};

expected<overlay_root> container_backend::make_root(const create_params& p,
                                                   sys::cleanup_stack& undo) {
  auto slash = p.dir.find_last_of('/');
  if (slash > 0)
    if (auto st = sys::make_dirs(p.dir.substr(0, slash)); !st)
      return st.err();
  // disk_mb: on the quota volume the sandbox dir is a subvolume limited to
  // it, so the upper and work dirs below are charged to the sandbox.
  if (p.boot_again) {
    // The files of a powered-off sandbox: its quota subvolume, upper and
    // work directory as they were. A failed boot leaves them so, marker
    // included; what it made in the directory goes.
    if (!sys::exists(p.dir + "/" + powered_off_marker))
      return invalid_argument("boot " + p.id + " again: it was not powered off");
    if (cfg_.quota)
      (void)cfg_.quota->grow_if_low();
    undo.push([dir = p.dir] { (void)remove_boot_files(dir); });
    return mount_overlay(p.dir, p.lower_dirs, true);
  }
  if (cfg_.quota) {
    // A volume close to its current size grows first (on this worker
    // thread; the node's growth thread does the same and logs failures).
    (void)cfg_.quota->grow_if_low();
    if (auto st = cfg_.quota->make_limited_dir(p.dir, static_cast<uint64_t>(p.spec.disk_mb) << 20);
        !st)
      return st.err();
  } else if (::mkdir(p.dir.c_str(), 0700) != 0) {
    return sys_error("mkdir", p.dir, errno, errno == EEXIST ? errc::conflict : errc::internal);
  }
  undo.push([dir = p.dir] { (void)sys::remove_tree(dir); });
  // Nothing to unmount on failure: both mounts are detached and go with
  // their last descriptor (the node's, and init's once it is killed).
  return mount_overlay(p.dir, p.lower_dirs);
}

status container_backend::make_cgroup(const create_params& p, sandbox_parts& parts,
                                      sys::cleanup_stack& undo) {
  auto cg = sys::create_cgroup_v1(cfg_.cgroup_root, cgroup_rel(p.id));
  if (!cg)
    return cg.err();
  parts.cgroup = std::move(*cg);
  undo.push([c = parts.cgroup.get()] { (void)c->remove(); });
  return parts.cgroup->apply({p.spec.cpu, p.spec.memory_mb << 20, p.spec.pids});
}

// The config is queued on the connection before init exists, and the
// clone joins the cgroups itself before it execs: init never waits for the
// node, and it is inside the cgroups before its cgroup namespace and first
// child exist. The meta file is written while init sets itself up.
status container_backend::start_init(const create_params& p, overlay_root root,
                                     sandbox_parts& parts, sys::cleanup_stack& undo) {
  auto sock = make_control_socket(p.dir);
  if (!sock)
    return sock.err();
  parts.ctl = std::move(sock->client);
  // A sandbox with an allow-list gets eth0 at create: it mounts a sysfs of
  // its own network namespace, where /sys/class/net shows it. Loopback-only
  // sandboxes share the template's (its lo only).
  // The launcher first: the config says which template init starts in.
  std::optional<launcher_pool::lease> launcher;
  if (launchers_)
    launcher.emplace(launchers_->acquire());
  bool in_template = launcher && (*launcher)->in_template();
  bool shared_sysfs = launcher && (*launcher)->has_sysfs() && p.spec.network.allow.empty();
  auto frame = proto::encode(proto::config_msg{p.id, p.dir + "/rootfs", seccomp_bpf_,
                                               p.spec.protect.readonly, p.spec.protect.hidden,
                                               true, in_template, shared_sysfs});
  if (::send(parts.ctl.get(), frame.data(), frame.size(), MSG_NOSIGNAL) != ssize_t(frame.size()))
    return sys_error("send config to init of", p.id, errno);
  auto join = open_cgroup_procs(*parts.cgroup);
  if (!join)
    return join.err();
  std::vector<int> join_fds;
  for (auto& fd : *join)
    join_fds.push_back(fd.get());
  auto child = launcher ? (*launcher)->launch(init_, sock->listener.get(), join_fds, &root,
                                              shared_sysfs)
                        : launch_init(init_, sock->listener.get(), join_fds, &root);
  launcher.reset(); // the lane is free for the next create while init sets up
  if (!child)
    return child.err();
  // Init has its own copies now; ours of the mount it attaches must not pin
  // the sandbox root past init's life. The node view is the sandbox's, and
  // closes before the directory goes on failure.
  root.mount.reset();
  parts.rootfs = std::move(root.node_view);
  undo.push([&parts] { parts.rootfs.reset(); });
  parts.pid = child->pid;
  parts.pidfd = std::move(child->pidfd);
  undo.push([fd = parts.pidfd.get()] { kill_and_reap(fd); });
  if (auto st = write_meta(p.dir, {parts.pid, 0, cfg_.node_id, p.spec.env}); !st)
    return st;
  return await_ready(parts.ctl.get(), parts.pidfd.get(), p.id);
}

expected<std::shared_ptr<sandbox>> container_backend::create(const create_params& p) {
  if (init_error_)
    return init_error_;
  if (auto st = check_params(p); !st)
    return st.err();
  if (auto st = check_network(*net_, p.id, p.spec.network); !st)
    return st.err();
  // `parts` first: the undos hold pointers into it (cgroup, pidfd) and must
  // run before it is destroyed.
  sandbox_parts parts;
  sys::cleanup_stack undo;
  parts.id = p.id;
  parts.dir = p.dir;
  parts.env = p.spec.env;
  auto root = make_root(p, undo);
  if (!root)
    return root.err();
  if (auto st = make_cgroup(p, parts, undo); !st)
    return st.err();
  if (auto st = start_init(p, std::move(*root), parts, undo); !st)
    return st.err();
  // A fresh group is latency already; batch applies before the first exec,
  // not before: init's setup in the idle dsec-batch would wait for every
  // other task on a busy host (a create timed out at load 46).
  if (p.spec.cpu_class != "latency")
    if (auto st = move_cgroup_to_class(*parts.cgroup, p.spec.cpu_class); !st)
      return error{st.err().code, "create " + p.id + ": " + st.err().message};
  if (auto st = join_network(*net_, p.id, p.spec.network, parts, &undo); !st)
    return st.err();
  undo.commit(); // from here on the sandbox owns it all; its destroy() undoes
  if (p.boot_again)
    ::unlink((p.dir + "/" + powered_off_marker).c_str());
  return adopt(std::move(parts));
}

expected<std::shared_ptr<sandbox>> container_backend::adopt(sandbox_parts parts) {
  auto sb = std::make_shared<container_sandbox>(loop_, std::move(parts));
  if (auto st = sb->start(); !st) {
    (void)sb->destroy();
    return st.err();
  }
  return std::shared_ptr<sandbox>(std::move(sb));
}

expected<std::shared_ptr<sandbox>> container_backend::recover(const std::string& id,
                                                              const std::string& dir) {
  if (sys::exists(dir + "/" + powered_off_marker))
    return recover_powered_off(id, dir);
  auto meta = read_meta(dir);
  if (meta && meta->node_id != cfg_.node_id)
    return invalid_argument("recover " + id + ": sandbox belongs to node " + meta->node_id);
  auto pidfd = meta ? open_init(*meta, id) : expected<sys::unique_fd>(meta.err());
  auto ctl = pidfd ? connect_control_socket(dir) : expected<sys::unique_fd>(pidfd.err());
  if (!ctl) {
    // A node that died mid-create (no meta) or a sandbox whose init is gone:
    // release what is left so the node's restart leaves nothing behind.
    if (sys::exists(dir))
      remove_leftovers(id, dir);
    return not_found("recover " + id + ": " + ctl.err().message + "; leftovers removed");
  }
  sandbox_parts parts;
  parts.id = id;
  parts.dir = dir;
  parts.pid = meta->pid;
  parts.reap = false; // init's parent was the previous node process
  parts.env = meta->env;
  parts.pidfd = std::move(*pidfd);
  parts.ctl = std::move(*ctl);
  parts.cgroup = open_sandbox_cgroup(cfg_.cgroup_root, cfg_.node_id, id);
  auto root = reopen_root(*meta, parts.pidfd.get(), dir, id);
  if (!root) {
    remove_leftovers(id, dir);
    return not_found(root.err().message + "; leftovers removed");
  }
  parts.rootfs = std::move(*root);
  // The policy died with the previous node process (and its bridge with
  // it): the sandbox comes back loopback-only, with fresh counters.
  if (auto st = join_network(*net_, id, {}, parts, nullptr); !st)
    return st.err();
  return adopt(std::move(parts));
}

// A node that died while powering a sandbox off may have left some of it
// running: end it, keep the files.
expected<std::shared_ptr<sandbox>> container_backend::recover_powered_off(const std::string& id,
                                                                          const std::string& dir) {
  end_processes(id, dir);
  (void)remove_boot_files(dir);
  sandbox_parts parts;
  parts.id = id;
  parts.dir = dir;
  parts.reap = false;
  auto sb = std::make_shared<container_sandbox>(loop_, std::move(parts));
  sb->mark_powered_off();
  return std::shared_ptr<sandbox>(std::move(sb));
}

void container_backend::end_processes(const std::string& id, const std::string& dir) {
  auto cg = open_sandbox_cgroup(cfg_.cgroup_root, cfg_.node_id, id);
  for (pid_t pid : cg->processes()) {
    sys::unique_fd fd{static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))};
    if (fd)
      kill_and_reap(fd.get());
  }
  (void)cg->remove();
  // Only a sandbox of the old layout has its root mounted on the host.
  auto rootfs = dir + "/rootfs";
  if (::umount2(rootfs.c_str(), 0) != 0)
    ::umount2(rootfs.c_str(), MNT_DETACH);
}

void container_backend::remove_leftovers(const std::string& id, const std::string& dir) {
  end_processes(id, dir);
  (void)sys::remove_tree(dir);
}

} // namespace

std::unique_ptr<backend> make_container_backend(const container_config& cfg) {
  return std::make_unique<container_backend>(cfg);
}

} // namespace dsec::backends
