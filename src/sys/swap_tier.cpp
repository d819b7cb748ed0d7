// dsec's swap tier: the attach/detach protocol of swap_tier.hpp, the swap
// file, zswap's parameters and pause's way past zswap.
#include "sys/swap_tier.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/swap.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "sys/fs.hpp"
#include "sys/host_lock.hpp"
#include "sys/zram.hpp"

namespace dsec::sys {

namespace {

const std::string zswap_dir = "/sys/module/zswap/parameters";

std::mutex current_m;
std::weak_ptr<swap_tier> current_tier;

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

std::string zswap_get(const std::string& name) {
  auto t = read_file(zswap_dir + "/" + name);
  return t ? trimmed(*t) : std::string{};
}

status zswap_put(const std::string& name, const std::string& value) {
  if (auto st = write_text(zswap_dir + "/" + name, value); !st)
    return error{st.err().code, "set zswap " + name + " to " + value + ": " + st.err().message};
  return {};
}

zswap_params zswap_now() {
  return {zswap_get("enabled"), zswap_get("compressor"), zswap_get("max_pool_percent")};
}

/// Compressor and pool first, enabled last: zswap never runs with half of them.
status zswap_apply(const zswap_params& p) {
  if (auto st = zswap_put("compressor", p.compressor); !st)
    return st;
  if (auto st = zswap_put("max_pool_percent", p.max_pool_percent); !st)
    return st;
  return zswap_put("enabled", p.enabled);
}

int64_t inode_of(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_ino) : -1;
}

std::vector<swap_entry> swaps_now() {
  auto t = read_file("/proc/swaps");
  return parse_proc_swaps(t ? *t : "");
}

bool swapped_on(const std::string& path) {
  for (auto& e : swaps_now())
    if (e.path == path)
      return true;
  return false;
}

/// The record's file is ours and swapped on (same path, same inode).
bool file_live(const swap_tier_record& r) {
  return !r.file.empty() && inode_of(r.file) == r.file_ino && swapped_on(r.file);
}

std::optional<swap_tier_record> load(const std::string& path) {
  auto t = read_file(path);
  return t ? parse_swap_tier_record(*t) : std::nullopt;
}

status store(const std::string& path, const swap_tier_record& r) {
  return write_file_atomic(path, format_swap_tier_record(r), 0644, durability::process_crash);
}

/// dsec's zram device per its record (so it is not taken for the host's swap).
std::string dsec_zram(const std::string& run_dir) {
  auto t = read_file(run_dir + "/zram");
  auto r = t ? parse_zram_record(*t) : std::nullopt;
  return r ? "/dev/" + r->device : std::string{};
}

/// Makes the swap file at `path` (`bytes`, allocated, with a swap header) and
/// records it before the swapon, so a node killed in between leaves a file
/// the next one finds and removes. Returns the inode or why not.
expected<int64_t> make_file(const std::string& path, int64_t bytes, const std::string& rec_path,
                            swap_tier_record& rec, int priority) {
  ::unlink(path.c_str()); // a leftover of ours (the record named it, not swapped on)
  unique_fd fd{::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (!fd)
    return sys_error("create the swap file", path, errno);
  auto fail = [&](error e) {
    ::unlink(path.c_str());
    return e;
  };
  // Allocated, not sparse: swapon refuses a file with holes.
  if (int err = ::posix_fallocate(fd.get(), 0, bytes); err != 0)
    return fail(sys_error("fallocate the swap file", path, err));
  unsigned char uuid[16];
  if (::getrandom(uuid, sizeof uuid, 0) != sizeof uuid)
    return fail(sys_error("getrandom for the swap uuid of", path, errno));
  uuid[6] = (uuid[6] & 0x0f) | 0x40, uuid[8] = (uuid[8] & 0x3f) | 0x80; // v4
  auto page = make_swap_header(bytes, static_cast<size_t>(::sysconf(_SC_PAGESIZE)), uuid,
                               "dsec-swap");
  if (::pwrite(fd.get(), page.data(), page.size(), 0) != static_cast<ssize_t>(page.size())
      || ::fsync(fd.get()) != 0)
    return fail(sys_error("write the swap header to", path, errno));
  fd.reset();
  rec.file = path, rec.file_bytes = bytes, rec.file_ino = inode_of(path);
  if (auto st = store(rec_path, rec); !st)
    return fail(st.err());
  int flags = SWAP_FLAG_PREFER | ((priority << SWAP_FLAG_PRIO_SHIFT) & SWAP_FLAG_PRIO_MASK);
  if (::swapon(path.c_str(), flags) != 0) {
    auto err = errno; // EINVAL: a filesystem without swap files (tmpfs, btrfs CoW)
    rec.file.clear(), rec.file_bytes = 0, rec.file_ino = 0;
    (void)store(rec_path, rec);
    return fail(sys_error("swapon", path, err));
  }
  return rec.file_ino;
}

void prune(swap_tier_record& r, const std::string& node) {
  r.users.erase(std::remove_if(r.users.begin(), r.users.end(),
                               [&](const swap_tier_user& u) {
                                 return u.node == node || !process_alive(u.pid, u.start_time);
                               }),
                r.users.end());
}

/// The tier's own swaps and dsec's zram are not the host's.
std::string foreign_swap(const swap_tier_record* rec, const std::string& run_dir) {
  auto zram = dsec_zram(run_dir);
  for (auto& e : swaps_now())
    if (e.path != zram && !(rec && e.path == rec->file))
      return e.path;
  return {};
}

} // namespace

std::string swap_tier::recorded_file(const std::string& run_dir) {
  auto r = load(run_dir + "/swaptier");
  return r ? r->file : std::string{};
}

std::shared_ptr<swap_tier> swap_tier::current() {
  std::lock_guard<std::mutex> g(current_m);
  return current_tier.lock();
}

expected<std::shared_ptr<swap_tier>> swap_tier::attach(const swap_tier_options& o) {
  auto t = std::make_shared<swap_tier>();
  t->opts_ = o;
  bool want_zswap = o.compressor != "off";
  if (want_zswap) {
    if (auto st = parse_zswap_compressor(o.compressor); !st)
      return st.err();
    if (auto st = check_zswap_pool_percent(o.pool_percent); !st)
      return st.err();
  }
  if (o.file_mb <= 0 && !o.zram_active) {
    t->what_ = "swap tier: off (no swap file and no zram: the node manages no swap)";
    return t;
  }
  if (o.file_mb <= 0 && !want_zswap) {
    // Asks nothing of the tier: it does not join another node's either (that
    // node's last clean stop still takes it down).
    t->what_ = "swap tier: off (--swap-file-mb 0 and --zswap-compressor off)";
    return t;
  }
  std::string zswap_note;
  if (want_zswap && !exists(zswap_dir + "/enabled")) {
    want_zswap = false;
    zswap_note = "this kernel has no zswap";
  } else if (want_zswap) {
    auto crypto = read_file("/proc/crypto");
    if (auto st = zswap_compressor_available(o.compressor, crypto ? *crypto : ""); !st)
      return st.err();
  }
  auto lock = lock_host_file(o.run_dir, "swaptier.lock");
  if (!lock)
    return lock.err();
  auto rec_path = o.run_dir + "/swaptier";
  auto loaded = load(rec_path);
  swap_tier_record rec = loaded ? *loaded : swap_tier_record{};
  bool mine = std::any_of(rec.users.begin(), rec.users.end(),
                          [&](const swap_tier_user& u) { return u.node == o.node; });
  prune(rec, o.node);
  if (!rec.file.empty() && !file_live(rec)) {
    // Ours but not swapped on (a node died between fallocate and swapon, or an
    // operator swapped it off): remove it, make it anew if asked.
    if (inode_of(rec.file) == rec.file_ino)
      ::unlink(rec.file.c_str());
    rec.file.clear(), rec.file_bytes = 0, rec.file_ino = 0;
  }
  auto planned = o.dir + "/swapfile";
  if (auto other = foreign_swap(&rec, o.run_dir); !other.empty()) {
    t->what_ = "swap tier: off (the host has swap " + other + ", using it)";
    if (rec.users.empty() && rec.file.empty() && !rec.zswap)
      ::unlink(rec_path.c_str());
    return t;
  }
  std::string file_note;
  bool made_file = false;
  if (rec.file.empty() && o.file_mb > 0) {
    if (auto st = make_dirs(o.dir, 0700); !st)
      return error{st.err().code, "swap tier: " + st.err().message};
    struct statvfs vfs{};
    if (::statvfs(o.dir.c_str(), &vfs) != 0)
      return sys_error("statvfs", o.dir, errno);
    if (auto st = check_swap_file_mb(o.file_mb, int64_t(vfs.f_bavail) * int64_t(vfs.f_frsize), o.dir);
        !st)
      return st.err();
    auto made = make_file(planned, o.file_mb << 20, rec_path, rec, o.priority);
    if (!made)
      file_note = "no swap file: " + made.err().message;
    else
      made_file = true;
  }
  std::string zswap_verb;
  if (want_zswap && (!rec.file.empty() || o.zram_active)) {
    // Taken with pause's lock: a pause elsewhere has zswap off for a moment,
    // and the parameters below must not switch it back under it.
    auto plock = lock_host_file(o.run_dir, "swaptier.pause.lock");
    if (!rec.zswap) {
      rec.saved = zswap_now();
      rec.set = {"Y", o.compressor, std::to_string(o.pool_percent)};
      zswap_verb = "set";
    } else {
      zswap_verb = mine ? "taken back" : "joined";
    }
    if (auto st = zswap_apply(rec.set); !st) {
      (void)zswap_apply(rec.saved);
      zswap_note = st.err().message;
      rec.zswap = false;
    } else {
      rec.zswap = true;
    }
  }
  if (rec.file.empty() && !rec.zswap) {
    if (rec.users.empty())
      ::unlink(rec_path.c_str());
    t->what_ = "swap tier: off (" + (file_note.empty() ? "no swap file" : file_note)
               + (zswap_note.empty() ? "" : "; " + zswap_note) + ")";
    return t;
  }
  rec.users.push_back({o.node, ::getpid(), process_start_time(::getpid())});
  if (auto st = store(rec_path, rec); !st)
    std::fprintf(stderr, "dsec node %s: swap tier: %s\n", o.node.c_str(), st.err().message.c_str());
  t->file_ = rec.file;
  t->zswap_ = rec.zswap;
  t->compressor_ = rec.zswap ? rec.set.compressor : std::string{};
  std::string w = "swap tier:";
  if (!rec.file.empty())
    w += std::string{made_file ? " made" : mine ? " took back" : " joined"} + " swap file " + rec.file + " ("
         + std::to_string(rec.file_bytes >> 20) + " MiB, swap priority "
         + std::to_string(o.priority) + ")";
  else
    w += " no swap file" + (file_note.empty() ? std::string{} : " (" + file_note + ")");
  if (rec.zswap)
    w += "; zswap " + zswap_verb + ": " + rec.set.compressor + ", pool up to "
         + rec.set.max_pool_percent + "% of RAM (was enabled=" + rec.saved.enabled + " "
         + rec.saved.compressor + " " + rec.saved.max_pool_percent + "%, put back by the last "
         + "node out)";
  else
    w += "; zswap untouched" + (zswap_note.empty() ? std::string{} : " (" + zswap_note + ")");
  if (rec.zswap)
    w += std::string{"; pause goes past zswap, to "} + (rec.file.empty() ? "zram" : "the file");
  w += "; record " + rec_path;
  t->what_ = w;
  std::lock_guard<std::mutex> g(current_m);
  current_tier = t;
  return t;
}

status swap_tier::detach() {
  if (!active())
    return {};
  file_.clear(), zswap_ = false, compressor_.clear();
  {
    std::lock_guard<std::mutex> g(current_m);
    if (current_tier.lock().get() == this)
      current_tier.reset();
  }
  auto lock = lock_host_file(opts_.run_dir, "swaptier.lock");
  if (!lock)
    return lock.err();
  auto rec_path = opts_.run_dir + "/swaptier";
  auto rec = load(rec_path);
  if (!rec)
    return {}; // gone (removed by hand): nothing of ours to put back
  prune(*rec, opts_.node);
  if (!rec->users.empty())
    return store(rec_path, *rec);
  if (file_live(*rec)) {
    if (::swapoff(rec->file.c_str()) != 0) {
      auto err = errno; // ENOMEM: what it holds does not fit in RAM; keep it
      (void)store(rec_path, *rec);
      return sys_error("swapoff", rec->file, err);
    }
  }
  if (!rec->file.empty() && inode_of(rec->file) == rec->file_ino) {
    ::unlink(rec->file.c_str());
    ::rmdir(rec->file.substr(0, rec->file.rfind('/')).c_str()); // when empty
  }
  if (rec->zswap) {
    auto plock = lock_host_file(opts_.run_dir, "swaptier.pause.lock");
    if (auto st = zswap_apply(rec->saved); !st) {
      rec->file.clear();
      (void)store(rec_path, *rec);
      return st;
    }
  }
  ::unlink(rec_path.c_str());
  return {};
}

swap_tier::direct_guard::~direct_guard() {
  if (lock_ && !restore_.empty())
    (void)zswap_put("enabled", restore_);
}

std::optional<swap_tier::direct_guard> swap_tier::pause_direct() const {
  if (!zswap_)
    return std::nullopt;
  auto lock = lock_host_file(opts_.run_dir, "swaptier.pause.lock");
  if (!lock)
    return std::nullopt;
  auto now = zswap_get("enabled");
  if (now != "Y")
    return std::nullopt; // already off (an operator's doing): leave it be
  if (!zswap_put("enabled", "N"))
    return std::nullopt;
  return direct_guard{std::move(*lock), "Y"};
}

namespace {

int64_t meminfo_bytes(const std::string& text, const char* key) {
  auto at = text.find(std::string{"\n"} + key + ":");
  if (at == std::string::npos)
    return 0;
  return std::atoll(text.c_str() + at + std::string{key}.size() + 2) * 1024;
}

} // namespace

std::string swap_tier::health_json() const {
  auto mi = read_file("/proc/meminfo");
  std::string m = mi ? "\n" + *mi : std::string{};
  int64_t used = 0, size = 0;
  for (auto& e : swaps_now())
    if (!file_.empty() && e.path == file_)
      used = e.used_kb * 1024, size = e.size_kb * 1024;
  std::string note;
  for (char ch : what_) {
    if (ch == '"' || ch == '\\')
      note += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20)
      note += ch;
  }
  return "\"swap_tier\":{\"active\":" + std::string(active() ? "true" : "false") + ",\"file\":\""
         + file_ + "\",\"file_bytes\":" + std::to_string(size)
         + ",\"file_used_bytes\":" + std::to_string(used) + ",\"zswap_compressor\":\""
         + compressor_ + "\",\"zswap_pool_bytes\":" + std::to_string(meminfo_bytes(m, "Zswap"))
         + ",\"zswap_stored_bytes\":" + std::to_string(meminfo_bytes(m, "Zswapped"))
         + ",\"note\":\"" + note + "\"}";
}

std::string swap_tier::metrics_text(const std::string& node) const {
  if (!active())
    return {};
  auto mi = read_file("/proc/meminfo");
  std::string m = mi ? "\n" + *mi : std::string{};
  int64_t used = 0;
  for (auto& e : swaps_now())
    if (!file_.empty() && e.path == file_)
      used = e.used_kb * 1024;
  std::string out;
  auto labels = "{node=\"" + node + "\"} ";
  auto add = [&](const char* name, const char* help, int64_t v) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " gauge\n" + name
           + labels + std::to_string(v) + "\n";
  };
  add("dsec_swap_file_used_bytes", "Bytes the swap tier's disk file holds.", used);
  add("dsec_zswap_pool_bytes", "RAM zswap's compressed pool takes (host-wide).",
      meminfo_bytes(m, "Zswap"));
  add("dsec_zswap_stored_bytes", "Uncompressed bytes zswap holds (host-wide).",
      meminfo_bytes(m, "Zswapped"));
  return out;
}

} // namespace dsec::sys
