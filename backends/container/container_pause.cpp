// Pause, resume, the changes and the CPU class of a container sandbox.
//
// Pause freezes every process of the sandbox (cgroup freezer: they stop
// where they are, their files and sockets stay) and then asks the kernel to
// page out what they map (process_madvise MADV_PAGEOUT over each process's
// mappings, sys/page_out.hpp) and has the kernel reclaim the rest of the
// memory cgroup (tmpfs, page cache: cgroup::reclaim_all_memory); the limits
// stay as they are (memsw caps RAM + swap at memory_mb). Clean file pages
// are dropped at once (layer pages shared with other sandboxes too: they
// come back from the local EROFS image when touched), anonymous and tmpfs
// memory goes to swap when the node has any. With the node's swap tier
// (sys/swap_tier.hpp: a disk file, zswap in front) pause sends the frozen
// sandbox's pages past zswap straight to the file: zswap on this kernel keeps
// random pages at full size in RAM, the file does not (a 200 MiB holder gave
// back 66% through zswap, ~100% to the file, bench/reclaim_bench.py). Without
// the tier they go to zram. Resume thaws; pages come back as they are touched. A paused sandbox costs no CPU and, with
// swap, little memory; its state is intact.
//
// The changes of a sandbox are its overlayfs upper directory: new and
// changed files, whiteouts (0:0 character devices) for deletions and the
// trusted.overlay.opaque xattr on directories that replaced a lower one:
// exactly the form overlayfs reads back when the directory, made into an
// EROFS image, becomes a lower layer of another sandbox.
#include <string>

#include "backends/container/container_sandbox.hpp"
#include "backends/policy/cpu_class.hpp"
#include "sys/fs.hpp"
#include "sys/page_out.hpp"
#include "sys/swap_tier.hpp"

namespace dsec::backends {

status container_sandbox::pause() {
  std::lock_guard<std::mutex> once(destroy_m_);
  if (channel_->gone())
    return unavailable("pause " + parts_.id + ": sandbox is gone");
  if (!parts_.cgroup)
    return internal_error("pause " + parts_.id + ": no cgroup to freeze");
  if (auto st = freeze_in_class(*parts_.cgroup); !st) // batch tasks freeze at normal priority
    return error{st.err().code, "pause " + parts_.id + ": " + st.err().message};
  // The page-out takes what the processes map (their heap, mapped files);
  // reclaim_all_memory then takes what no process maps: tmpfs files
  // (/dev/shm is shmem: it goes to swap) and the page cache of the upper's
  // files (/tmp and the rest: written back and dropped). Measured on a 200 MiB holder (64 MiB random + 136 MiB text, half
  // heap, half a /dev/shm file): the page-out alone frees the heap only
  // (73 MiB left); force_empty after it, once the memcg statistics are
  // fresh, frees all but ~1 MiB (bench/reclaim_bench.py compares them).
  // Best effort: a paused sandbox that kept memory is still paused.
  auto tier = sys::swap_tier::current();
  auto direct = tier ? tier->pause_direct() : std::nullopt; // zswap off until the scope ends
  sys::page_out(parts_.cgroup->processes());
  if (!parts_.cgroup->reclaim_all_memory())
    (void)parts_.cgroup->squeeze_memory(0);
  return {};
}

std::optional<bool> container_sandbox::frozen() const {
  if (off_ || !parts_.cgroup)
    return std::nullopt;
  return parts_.cgroup->frozen();
}

status container_sandbox::resume() {
  std::lock_guard<std::mutex> once(destroy_m_);
  if (channel_->gone())
    return unavailable("resume " + parts_.id + ": sandbox is gone");
  if (!parts_.cgroup)
    return internal_error("resume " + parts_.id + ": no cgroup to thaw");
  if (auto st = parts_.cgroup->freeze(false); !st)
    return error{st.err().code, "resume " + parts_.id + ": " + st.err().message};
  return {};
}

// Power off: the marker first, so a node that dies half-way finds the
// files kept (recover() ends what still runs and keeps the directory), then
// the teardown of destroy() without the directory. The quota subvolume, the
// upper and the work directory stay; the cgroups, init's namespaces, the
// network state and the memory go.
status container_sandbox::power_off() {
  std::lock_guard<std::mutex> once(destroy_m_);
  if (channel_->gone())
    return unavailable("pause " + parts_.id + " without memory: sandbox is gone");
  auto marker = parts_.dir + "/" + powered_off_marker;
  if (auto st = sys::write_file_atomic(marker, "files kept; the next resume boots again\n", 0600,
                                       sys::durability::process_crash);
      !st)
    return error{st.err().code, "pause " + parts_.id + " without memory: " + st.err().message};
  status first;
  (void)tear_down(true, first);
  off_ = true;
  if (!first)
    return error{first.err().code,
                 "pause " + parts_.id + " without memory: " + first.err().message};
  return {};
}

expected<std::string> container_sandbox::changes_dir() {
  if (channel_->gone())
    return unavailable("snapshot " + parts_.id + ": sandbox is gone");
  return parts_.dir + "/upper";
}

status container_sandbox::set_cpu_class(const std::string& cls) {
  // destroy_m_: pause, resume and destroy take it too, so a class change
  // never races a freeze or a teardown.
  std::lock_guard<std::mutex> once(destroy_m_);
  if (channel_->gone())
    return unavailable("set cpu class of " + parts_.id + ": sandbox is gone");
  if (!parts_.cgroup)
    return internal_error("set cpu class of " + parts_.id + ": no cgroup");
  if (auto st = move_cgroup_to_class(*parts_.cgroup, cls); !st)
    return error{st.err().code, parts_.id + ": " + st.err().message};
  return {};
}

} // namespace dsec::backends
