// The node's mount cache: every EROFS layer image is mounted once per node,
// read-only, under `<mount_root>/<hex digest>`, and shared by all sandboxes
// that stack it (so its page cache is shared too). Mounts are refcounted: the
// first acquire mounts, the last release unmounts and removes the directory.
//
// Mounts outlive the node process on purpose: sandboxes survive a node
// restart, and their overlays keep using the layer mounts. After a restart,
// adopt_existing() takes over the mounts it finds under mount_root in
// /proc/self/mountinfo with refcount 0; each recovered sandbox then calls
// acquire() for its layers, which finds the mount and only counts. Mounts no
// sandbox re-acquires can be dropped with release_unused().
//
// mount(2) is called directly with the image file as source (file-backed
// EROFS, no loop device); mount(8) would create a loop device per image.
// A chunked layer (metadata image + data blob, layers/blob_device.hpp) is
// mounted with `-o device=<store>/blobs/sha256-<data hex>.blob`, the blob the
// image names; kernel 6.18 opens it as a file too (checked by hand and by
// test/integration/layers_mount_test.cpp), and reads only touched blocks.
// Thread-safe: one mutex guards the table, mount and umount run outside it,
// and concurrent acquires of one digest wait for the single mount in flight.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "core/error.hpp"
#include "core/types.hpp"

namespace dsec::layers {

/// Refcounted read-only mounts of layer images, one per digest per node.
class mount_cache {
 public:
  // -- constructors -----------------------------------------------------------

  /// A cache mounting under `mount_root` (created on first acquire). Does not
  /// touch existing mounts; call adopt_existing() after a restart.
  explicit mount_cache(std::string mount_root);

  /// Leaves mounts in place (sandboxes may outlive the node process); call
  /// unmount_all() for a clean shutdown that also stops the sandboxes.
  ~mount_cache() = default;

  mount_cache(const mount_cache&) = delete;
  mount_cache& operator=(const mount_cache&) = delete;

  // -- mounting ---------------------------------------------------------------

  /// Mounts `layer`'s image at `blob_path` unless already mounted, counts one
  /// more user and returns the mount directory. Errors: invalid_argument for a
  /// bad digest, not_found if the image file (or a chunked layer's data blob,
  /// looked up next to it) is missing, internal if mount(2)
  /// fails (message names the image, the directory and errno). Blocking.
  expected<std::string> acquire(const layer_info& layer, const std::string& blob_path);

  /// Drops one user of `digest`; at zero, unmounts and removes the directory.
  /// Releasing an unknown digest or one at zero is a no-op. An unmount that
  /// fails (EBUSY: something still uses it) keeps the entry at refcount 0 and
  /// returns the error; a later acquire reuses the mount.
  status release(const std::string& digest);

  /// Takes the erofs mounts found at `<mount_root>/<64 hex>` in
  /// /proc/self/mountinfo (left by a previous node process) with refcount 0,
  /// and removes empty leftover directories that are not mounted. Returns how
  /// many mounts were adopted.
  expected<size_t> adopt_existing();

  /// Unmounts every mount with refcount 0 (e.g. adopted ones that no recovered
  /// sandbox re-acquired). Returns the first failure; the others are still tried.
  status release_unused();

  /// Unmounts everything regardless of refcounts (node shutdown after all
  /// sandboxes are stopped). Returns the first failure; the others are still tried.
  status unmount_all();

  // -- queries ----------------------------------------------------------------

  /// Number of digests currently mounted (in use or adopted).
  size_t mounted() const;

  /// Current refcount of `digest` (0 if unknown or adopted and unused).
  size_t refcount(const std::string& digest) const;

  /// The directory `digest` is (or would be) mounted at; empty for a bad digest.
  std::string mount_dir(const std::string& digest) const;

  /// The mount root as given.
  const std::string& mount_root() const { return root_; }

 private:
  enum class state { mounting, mounted, unmounting };

  struct entry {
    state st = state::mounting;
    size_t refs = 0;
  };

  status unmount_locked_entry(std::unique_lock<std::mutex>& guard, const std::string& hex);

  std::string root_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, entry> entries_; // by hex digest
};

} // namespace dsec::layers
