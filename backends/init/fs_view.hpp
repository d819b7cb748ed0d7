// The sandbox's filesystem view, the mount steps dsec-init runs on itself
// in its new mount namespace (setup_namespaces in setup.cpp calls them in
// order): one scratch tmpfs behind /dev, /dev/shm and every mask; /proc with
// runc's masked and read-only paths and the sandbox's own boot id; a
// read-only /sys (the node's shared tree or a sysfs of its own); the spec's
// hidden and read-only paths. Each step returns an empty string on success
// or a message naming operation, object and errno.
#pragma once

#include <string>
#include <vector>

namespace dsec::init {

/// Returns the message of a step that failed.
#define TRY(expr)                                                              \
  do {                                                                         \
    std::string e_ = (expr);                                                   \
    if (!e_.empty())                                                           \
      return e_;                                                               \
  } while (0)

/// mount(2), its failure named.
std::string do_mount(const char* src, const std::string& dst, const char* type,
                     unsigned long flags, const char* data);

/// In the launch template: makes the scratch tmpfs and attaches it on "/",
/// where the sandbox's root then goes on top of it.
std::string park_scratch_on_template();

/// Closes the scratch tmpfs once every clone of it is attached (in the
/// template it stays, parked under the root; elsewhere it dissolves).
void close_scratch();

/// /dev from the scratch tmpfs (device nodes, links, /dev/pts, /dev/shm).
/// Makes the scratch tmpfs first unless parked.
std::string setup_dev(const std::string& root);

/// A new /proc: masked files and directories, the boot id, read-only parts.
std::string setup_proc(const std::string& root);

/// init_proto::sysfs_tree_fd is still open (setup_sys closes it).
extern bool sysfs_tree_open;

/// /sys read-only: a clone of the node's shared tree when `shared`, else a
/// sysfs of its own with runc's masks.
std::string setup_sys(const std::string& root, bool shared);

/// The spec's hidden paths (covered empty) then its read-only trees, each
/// resolved inside `rootfs`.
std::string setup_protect(const std::string& rootfs, const std::vector<std::string>& readonly,
                          const std::vector<std::string>& hidden);

} // namespace dsec::init
