// dsec's zram swap device: pure helpers (mm_stat, /proc/swaps, the swap
// header, the record) and the attach/detach protocol described in zram.hpp.
#include "sys/zram.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/swap.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "sys/fd.hpp"
#include "sys/fs.hpp"
#include "sys/host_lock.hpp"

namespace dsec::sys {

// -- pure helpers -----------------------------------------------------------

std::optional<zram_stats> parse_mm_stat(std::string_view text) {
  std::istringstream in{std::string{text}};
  int64_t v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int n = 0;
  while (n < 8 && (in >> v[n]))
    ++n;
  if (n < 3)
    return std::nullopt;
  return zram_stats{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
}

std::vector<swap_entry> parse_proc_swaps(std::string_view text) {
  std::vector<swap_entry> out;
  std::istringstream in{std::string{text}};
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (header) {
      header = false;
      if (line.rfind("Filename", 0) == 0)
        continue;
    }
    std::istringstream l{line};
    swap_entry e;
    std::string type;
    if (l >> e.path >> type >> e.size_kb >> e.used_kb >> e.priority)
      out.push_back(std::move(e));
  }
  return out;
}

int64_t default_zram_mb(int64_t ram_bytes) {
  int64_t mb = (ram_bytes >> 20) / 4;
  return std::clamp<int64_t>(mb, 64, 8192);
}

std::string make_swap_header(int64_t bytes, size_t page_size, const unsigned char uuid[16],
                             std::string_view label) {
  // struct swap_header (include/linux/swap.h): 1024 bytes of boot block,
  // then version, last_page, nr_badpages (u32 each), uuid[16],
  // volume_name[16], padding; "SWAPSPACE2" ends the page.
  std::string page(page_size, '\0');
  auto put32 = [&](size_t off, uint32_t v) { std::memcpy(&page[off], &v, 4); };
  put32(1024, 1);
  put32(1028, static_cast<uint32_t>(bytes / static_cast<int64_t>(page_size) - 1));
  put32(1032, 0);
  std::memcpy(&page[1036], uuid, 16);
  std::memcpy(&page[1052], label.data(), std::min<size_t>(label.size(), 16));
  std::memcpy(&page[page_size - 10], "SWAPSPACE2", 10);
  return page;
}

std::string format_zram_record(const zram_record& r) {
  std::string out = "device " + r.device + "\ndiskseq " + std::to_string(r.diskseq)
                    + "\ndisksize " + std::to_string(r.disksize) + "\n";
  for (auto& u : r.users)
    out += format_user_line(u);
  return out;
}

std::optional<zram_record> parse_zram_record(std::string_view text) {
  zram_record r;
  std::istringstream in{std::string{text}};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l{line};
    std::string key;
    l >> key;
    if (key == "device")
      l >> r.device;
    else if (key == "diskseq")
      l >> r.diskseq;
    else if (key == "disksize")
      l >> r.disksize;
    else if (key == "user") {
      zram_user u;
      if (read_user_fields(l, u))
        r.users.push_back(std::move(u));
    }
  }
  // Only "zramN" names a device of ours: the record never leads elsewhere.
  if (r.device.size() < 5 || r.device.compare(0, 4, "zram") != 0
      || r.device.find_first_not_of("0123456789", 4) != std::string::npos)
    return std::nullopt;
  return r;
}

// -- the device -------------------------------------------------------------

namespace {

const std::string control = "/sys/class/zram-control";

std::string block(const std::string& dev) { return "/sys/block/" + dev; }

int64_t read_int(const std::string& path) {
  auto t = read_file(path);
  return t ? std::atoll(t->c_str()) : -1;
}

bool alive(const zram_user& u) { return process_alive(u.pid, u.start_time); }

bool swapped_on(const std::string& dev) {
  auto t = read_file("/proc/swaps");
  if (!t)
    return false;
  for (auto& e : parse_proc_swaps(*t))
    if (e.path == "/dev/" + dev)
      return true;
  return false;
}

/// The device still is the one the record names: same number, same diskseq.
bool same_device(const zram_record& r) {
  return exists(block(r.device)) && read_int(block(r.device) + "/diskseq") == r.diskseq;
}

/// Resets and hot-removes `dev` (not swapped on). Best effort.
void remove_device(const std::string& dev) {
  (void)write_text(block(dev) + "/reset", "1");
  (void)write_text(control + "/hot_remove", dev.substr(4));
}

status store(const std::string& path, const zram_record& r);

/// A new device of `bytes`, swapped on; its record (without users) or why not.
/// The record is written at `rec_path` before the swapon, so a node killed
/// in between leaves a device the next one finds and remakes, never an
/// unrecorded swap it would take for the host's.
expected<zram_record> make_device(const zram_options& o, int64_t bytes, std::string& algo,
                                  const std::string& rec_path) {
  auto idx = read_file(control + "/hot_add");
  if (!idx)
    return idx.err();
  zram_record r;
  r.device = "zram" + std::to_string(std::atoi(idx->c_str()));
  auto fail = [&](error e) {
    remove_device(r.device);
    return e;
  };
  algo = "default";
  if (write_text(block(r.device) + "/comp_algorithm", o.algorithm))
    algo = o.algorithm;
  if (auto st = write_text(block(r.device) + "/disksize", std::to_string(bytes)); !st)
    return fail(st.err());
  r.disksize = read_int(block(r.device) + "/disksize");
  r.diskseq = read_int(block(r.device) + "/diskseq");
  auto path = "/dev/" + r.device;
  {
    unsigned char uuid[16];
    if (::getrandom(uuid, sizeof uuid, 0) != sizeof uuid)
      return fail(sys_error("getrandom for the swap uuid of", path, errno));
    uuid[6] = (uuid[6] & 0x0f) | 0x40, uuid[8] = (uuid[8] & 0x3f) | 0x80; // v4
    auto page = make_swap_header(r.disksize, static_cast<size_t>(::sysconf(_SC_PAGESIZE)), uuid,
                                 "dsec-zram");
    unique_fd fd{::open(path.c_str(), O_WRONLY | O_CLOEXEC)};
    if (!fd)
      return fail(sys_error("open", path, errno));
    if (::pwrite(fd.get(), page.data(), page.size(), 0) != static_cast<ssize_t>(page.size())
        || ::fsync(fd.get()) != 0)
      return fail(sys_error("write the swap header to", path, errno));
  }
  if (auto st = store(rec_path, r); !st)
    return fail(st.err());
  int flags = SWAP_FLAG_PREFER | ((o.priority << SWAP_FLAG_PRIO_SHIFT) & SWAP_FLAG_PRIO_MASK)
              | SWAP_FLAG_DISCARD;
  if (::swapon(path.c_str(), flags) != 0) {
    auto err = errno;
    ::unlink(rec_path.c_str());
    return fail(sys_error("swapon", path, err));
  }
  return r;
}

/// Holds <run_dir>/zram.lock (flock, exclusive) while it lives.
struct run_lock {
  unique_fd fd;
  static expected<run_lock> take(const std::string& dir) {
    auto fd = lock_host_file(dir, "zram.lock");
    if (!fd)
      return fd.err();
    return run_lock{std::move(*fd)};
  }
};

std::optional<zram_record> load(const std::string& path) {
  auto t = read_file(path);
  return t ? parse_zram_record(*t) : std::nullopt;
}

status store(const std::string& path, const zram_record& r) {
  return write_file_atomic(path, format_zram_record(r), 0644, durability::process_crash);
}

/// Drops entries of dead processes and of `node` (about to be re-added or
/// leaving).
void prune(zram_record& r, const std::string& node) {
  r.users.erase(std::remove_if(r.users.begin(), r.users.end(),
                               [&](const zram_user& u) { return u.node == node || !alive(u); }),
                r.users.end());
}

} // namespace

std::shared_ptr<zram_swap> zram_swap::attach(const zram_options& o) {
  auto z = std::make_shared<zram_swap>();
  z->opts_ = o;
  auto off = [&](std::string why) {
    z->what_ = "zram: off (" + why + ")";
    return z;
  };
  if (o.size_mb <= 0)
    return off("--zram-mb 0");
  if (!exists(control + "/hot_add"))
    return off("this kernel has no zram: no " + control);
  auto lock = run_lock::take(o.run_dir);
  if (!lock)
    return off(lock.err().message);
  auto rec_path = o.run_dir + "/zram";
  auto rec = load(rec_path);
  if (rec && !same_device(*rec))
    rec.reset(); // the device went (reboot, hot_remove by hand): the record is stale
  auto swaps_text = read_file("/proc/swaps");
  for (auto& e : parse_proc_swaps(swaps_text ? *swaps_text : "")) {
    bool ours = (rec && e.path == "/dev/" + rec->device)
                || std::find(o.also_ours.begin(), o.also_ours.end(), e.path) != o.also_ours.end();
    if (!ours)
      return off("the host has swap " + e.path + ", using it");
  }
  zram_user me{o.node, ::getpid(), process_start_time(::getpid())};
  std::string verb = "joined";
  std::string algo;
  if (rec && !swapped_on(rec->device)) {
    // Ours but not swapped on (a node died between mkswap and swapon, or an
    // operator swapped it off): make it anew.
    remove_device(rec->device);
    rec.reset();
  }
  if (rec) {
    bool mine = std::any_of(rec->users.begin(), rec->users.end(),
                            [&](const zram_user& u) { return u.node == o.node; });
    verb = mine ? "took back" : "joined";
  } else {
    auto made = make_device(o, o.size_mb << 20, algo, rec_path);
    if (!made)
      return off("cannot make a zram swap: " + made.err().message);
    rec = std::move(*made);
    verb = "made";
  }
  prune(*rec, o.node);
  rec->users.push_back(me);
  if (auto st = store(rec_path, *rec); !st)
    std::fprintf(stderr, "dsec node %s: zram: %s\n", o.node.c_str(), st.err().message.c_str());
  z->device_ = rec->device;
  z->what_ = "zram: " + verb + " " + rec->device + " (" + std::to_string(rec->disksize >> 20)
             + " MiB" + (algo.empty() ? "" : ", " + algo) + ", swap priority "
             + std::to_string(o.priority) + ", record " + rec_path + ")";
  return z;
}

status zram_swap::detach() {
  if (device_.empty())
    return {};
  auto dev = std::exchange(device_, std::string{});
  auto lock = run_lock::take(opts_.run_dir);
  if (!lock)
    return lock.err();
  auto rec_path = opts_.run_dir + "/zram";
  auto rec = load(rec_path);
  if (!rec || rec->device != dev || !same_device(*rec))
    return {}; // someone else's now: never touch it
  prune(*rec, opts_.node);
  if (!rec->users.empty())
    return store(rec_path, *rec);
  auto path = "/dev/" + dev;
  if (swapped_on(dev) && ::swapoff(path.c_str()) != 0) {
    auto err = errno; // ENOMEM: what it holds does not fit in RAM; keep it
    (void)store(rec_path, *rec);
    return sys_error("swapoff", path, err);
  }
  remove_device(dev);
  ::unlink(rec_path.c_str());
  return {};
}

int64_t zram_swap::disksize() const {
  return device_.empty() ? 0 : std::max<int64_t>(0, read_int(block(device_) + "/disksize"));
}

zram_stats zram_swap::stats() const {
  if (device_.empty())
    return {};
  auto t = read_file(block(device_) + "/mm_stat");
  auto s = t ? parse_mm_stat(*t) : std::nullopt;
  return s ? *s : zram_stats{};
}

std::string zram_swap::health_json() const {
  auto s = stats();
  std::string note;
  for (char ch : what_) {
    if (ch == '"' || ch == '\\')
      note += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20)
      note += ch;
  }
  return "\"zram\":{\"active\":" + std::string(active() ? "true" : "false") + ",\"device\":\""
         + device_ + "\",\"disksize_bytes\":" + std::to_string(disksize())
         + ",\"stored_bytes\":" + std::to_string(s.orig_data_size)
         + ",\"compressed_bytes\":" + std::to_string(s.compr_data_size)
         + ",\"memory_bytes\":" + std::to_string(s.mem_used_total) + ",\"note\":\"" + note
         + "\"}";
}

std::string zram_swap::metrics_text(const std::string& node) const {
  if (device_.empty())
    return {};
  auto s = stats();
  std::string out;
  auto labels = "{node=\"" + node + "\",device=\"" + device_ + "\"} ";
  auto add = [&](const char* name, const char* help, int64_t v) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " gauge\n" + name
           + labels + std::to_string(v) + "\n";
  };
  add("dsec_zram_disksize_bytes", "Size of the node's zram swap (uncompressed capacity).",
      disksize());
  add("dsec_zram_stored_bytes", "Uncompressed bytes the zram swap holds.", s.orig_data_size);
  add("dsec_zram_compressed_bytes", "Compressed size of what the zram swap holds.",
      s.compr_data_size);
  add("dsec_zram_memory_bytes", "RAM the zram swap takes now (allocator overhead included).",
      s.mem_used_total);
  return out;
}

} // namespace dsec::sys
