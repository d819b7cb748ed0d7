// One container sandbox seen from the node. Exec, stdin, the process table
// and signals go to init over the init_channel (channel_sandbox); an OOM that the memory
// controller signals kills init through it, and init's death is then
// reported as "oom". Files are resolved by the node itself, in-root below an
// O_PATH descriptor of the sandbox's root (files.cpp, fs_ops.cpp). destroy()
// tears everything down in the reverse order of create().
#include "backends/container/container_sandbox.hpp"
#include "backends/container/fs_ops.hpp"
#include "backends/container/launch.hpp"
#include "backends/container/sandbox_meta.hpp"

#include <sys/mount.h>

#include <cerrno>

#include "sys/fs.hpp"

namespace dsec::backends {

namespace {

channel_parts channel_of(sandbox_parts& p) {
  channel_parts c;
  c.id = p.id;
  c.reap = p.reap;
  c.pidfd = std::move(p.pidfd);
  c.ctl = std::move(p.ctl);
  c.env = std::move(p.env);
  // An init of protocol version 1 closes the channel at hello; its
  // listening socket takes a new connection (init_channel::start).
  c.reconnect = [dir = p.dir] { return connect_control_socket(dir); };
  // A recovered init (not our child) may be frozen, its sandbox paused: its
  // hello answer comes when it thaws, and start() must not wait for it.
  c.await_hello = p.reap;
  return c;
}

} // namespace

container_sandbox::container_sandbox(std::shared_ptr<io_loop> loop, sandbox_parts parts)
  : loop_(std::move(loop)), parts_(std::move(parts)),
    root_(std::make_shared<sys::unique_fd>(std::move(parts_.rootfs))) {
  channel_ = std::make_shared<init_channel>(loop_, channel_of(parts_));
}

// The channel's destructor fails what is still pending ("sandbox handle
// released") when this handle is dropped without destroy().
container_sandbox::~container_sandbox() = default;

status container_sandbox::start() {
  // An OOM anywhere in the sandbox takes the whole sandbox: a half-killed
  // sandbox (some process gone, the rest running) gives a trainer a state it
  // cannot reason about; `failed: oom` is one clear signal.
  oom_watch oom;
  if (parts_.cgroup) {
    auto efd = parts_.cgroup->oom_eventfd();
    if (!efd)
      return error{efd.err().code, "watch oom of " + parts_.id + ": " + efd.err().message};
    oom.fd = sys::unique_fd{*efd};
    std::weak_ptr<container_sandbox> weak = shared_from_this();
    oom.counted = [weak] {
      auto self = weak.lock();
      return self && self->parts_.cgroup && self->parts_.cgroup->memory().oom_kills > 0;
    };
  }
  return channel_->start(std::move(oom));
}

// -- files, lifecycle -----------------------------------------------------------

std::shared_ptr<sys::unique_fd> container_sandbox::root_fd() const {
  std::lock_guard<std::mutex> g(m_);
  return root_;
}

status container_sandbox::write_file(const std::string& path, std::string_view data,
                                     uint32_t mode) {
  auto root = root_fd();
  if (!root || !*root)
    return unavailable("write " + path + " in " + parts_.id + ": sandbox destroyed");
  return write_in_root(root->get(), path, data, mode);
}

expected<std::string> container_sandbox::read_file(const std::string& path, size_t max_bytes) {
  auto root = root_fd();
  if (!root || !*root)
    return unavailable("read " + path + " in " + parts_.id + ": sandbox destroyed");
  return read_in_root(root->get(), path, max_bytes);
}

expected<std::vector<fs_entry>> container_sandbox::file_op(const std::string& op,
                                                           const std::string& path,
                                                           const std::string& to, int32_t depth) {
  auto root = root_fd();
  if (!root || !*root)
    return unavailable(op + " " + path + " in " + parts_.id + ": sandbox destroyed");
  return file_op_in_root(root->get(), op, path, to, depth);
}

status container_sandbox::destroy() {
  // A second, concurrent destroy() returns only once the first is done.
  std::lock_guard<std::mutex> once(destroy_m_);
  status first;
  if (!tear_down(false, first) && off_) // powered off: its files are all that is left
    first = sys::remove_tree(parts_.dir);
  off_ = false;
  return first;
}

bool container_sandbox::tear_down(bool keep_files, status& first) {
  if (!channel_->shut())
    return false;
  {
    std::lock_guard<std::mutex> g(m_);
    root_.reset(); // an O_PATH fd on the root would keep the overlay busy
  }
  channel_->kill_init();
  // A paused sandbox's processes die only once thawed (v1 freezer).
  if (parts_.cgroup)
    (void)parts_.cgroup->freeze(false);
  channel_->wait_init();
  auto keep = [&first](status st) {
    if (!st && first)
      first = std::move(st);
  };
  if (parts_.net)
    parts_.net->release(); // policy and counter entries, veth
  if (parts_.cgroup)
    keep(parts_.cgroup->remove());
  // The root went with init's mount namespace and the view above; only a
  // sandbox a node made before roots left the host namespace (recovered)
  // still has it mounted on the host.
  auto rootfs = parts_.dir + "/rootfs";
  if (::umount2(rootfs.c_str(), 0) != 0 && errno != EINVAL && errno != ENOENT) {
    if (::umount2(rootfs.c_str(), MNT_DETACH) != 0 && errno != EINVAL)
      keep(sys_error("umount", rootfs, errno));
  }
  keep(keep_files ? remove_boot_files(parts_.dir) : sys::remove_tree(parts_.dir));
  channel_->fail_pending_later();
  return true;
}

void container_sandbox::mark_powered_off() {
  (void)channel_->shut();
  {
    std::lock_guard<std::mutex> g(m_);
    root_.reset();
  }
  off_ = true;
}

} // namespace dsec::backends
