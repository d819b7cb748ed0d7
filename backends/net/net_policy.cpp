// The node side of the eBPF programs: load + attach once, one policy and
// one counter entry per sandbox, the host-address deny set, and the table of
// syscalls whose refusals count as denials.
#include "backends/net/net_policy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <mutex>
#include <set>

#include "backends/net/sec_maps.h"
#include "dsec_sec.skel.h"
#include "sys/fd.hpp"
#include "sys/fs.hpp"

namespace dsec::net {

namespace {

// -- what counts as a denial ---------------------------------------------------

// THE list of counted syscalls. Kind "syscall": every call the seccomp filter
// (backends/policy/seccomp_filter.cpp, `denied`, plus clone with namespace
// flags and the refused ioctls) answers with EPERM; keep it in step with that
// file. clone3 is left out: the filter answers ENOSYS by design (glibc falls
// back to clone). Kind "file": calls that change files, counted when they
// fail with EPERM, EACCES or EROFS (read-only layers, protected paths).
struct counted {
  const char* name;
  uint32_t kind;
  int path_arg;  ///< index of the path argument, -1 = none
  int flags_arg; ///< index of the open flags, -1 = not an open
  bool how = false;
};

constexpr counted counted_syscalls[] = {
  // seccomp refusals
  {"mount", DSEC_SYSCALL, -1, -1}, {"umount2", DSEC_SYSCALL, -1, -1},
  {"pivot_root", DSEC_SYSCALL, -1, -1}, {"ptrace", DSEC_SYSCALL, -1, -1},
  {"bpf", DSEC_SYSCALL, -1, -1}, {"kexec_load", DSEC_SYSCALL, -1, -1},
  {"kexec_file_load", DSEC_SYSCALL, -1, -1}, {"keyctl", DSEC_SYSCALL, -1, -1},
  {"add_key", DSEC_SYSCALL, -1, -1}, {"request_key", DSEC_SYSCALL, -1, -1},
  {"unshare", DSEC_SYSCALL, -1, -1}, {"setns", DSEC_SYSCALL, -1, -1},
  {"perf_event_open", DSEC_SYSCALL, -1, -1}, {"userfaultfd", DSEC_SYSCALL, -1, -1},
  {"io_uring_setup", DSEC_SYSCALL, -1, -1}, {"io_uring_enter", DSEC_SYSCALL, -1, -1},
  {"io_uring_register", DSEC_SYSCALL, -1, -1}, {"open_by_handle_at", DSEC_SYSCALL, -1, -1},
  {"name_to_handle_at", DSEC_SYSCALL, -1, -1}, {"init_module", DSEC_SYSCALL, -1, -1},
  {"finit_module", DSEC_SYSCALL, -1, -1}, {"delete_module", DSEC_SYSCALL, -1, -1},
  {"swapon", DSEC_SYSCALL, -1, -1}, {"swapoff", DSEC_SYSCALL, -1, -1},
  {"reboot", DSEC_SYSCALL, -1, -1}, {"acct", DSEC_SYSCALL, -1, -1},
  {"quotactl", DSEC_SYSCALL, -1, -1}, {"fsopen", DSEC_SYSCALL, -1, -1},
  {"fsconfig", DSEC_SYSCALL, -1, -1}, {"fsmount", DSEC_SYSCALL, -1, -1},
  {"fspick", DSEC_SYSCALL, -1, -1}, {"move_mount", DSEC_SYSCALL, -1, -1},
  {"open_tree", DSEC_SYSCALL, -1, -1}, {"mount_setattr", DSEC_SYSCALL, -1, -1},
  {"settimeofday", DSEC_SYSCALL, -1, -1}, {"clock_settime", DSEC_SYSCALL, -1, -1},
  {"clock_adjtime", DSEC_SYSCALL, -1, -1}, {"adjtimex", DSEC_SYSCALL, -1, -1},
  {"lookup_dcookie", DSEC_SYSCALL, -1, -1}, {"clone", DSEC_SYSCALL, -1, -1},
  {"ioctl", DSEC_SYSCALL, -1, -1}, {"process_vm_readv", DSEC_SYSCALL, -1, -1},
  {"process_vm_writev", DSEC_SYSCALL, -1, -1}, {"pidfd_getfd", DSEC_SYSCALL, -1, -1},
  {"syslog", DSEC_SYSCALL, -1, -1}, {"iopl", DSEC_SYSCALL, -1, -1},
  {"ioperm", DSEC_SYSCALL, -1, -1},
  // file changes
  {"open", DSEC_FILE, 0, 1}, {"openat", DSEC_FILE, 1, 2}, {"openat2", DSEC_FILE, 1, 2, true},
  {"creat", DSEC_FILE, 0, -1}, {"truncate", DSEC_FILE, 0, -1},
  {"unlink", DSEC_FILE, 0, -1}, {"unlinkat", DSEC_FILE, 1, -1}, {"rmdir", DSEC_FILE, 0, -1},
  {"mkdir", DSEC_FILE, 0, -1}, {"mkdirat", DSEC_FILE, 1, -1},
  {"rename", DSEC_FILE, 0, -1}, {"renameat", DSEC_FILE, 1, -1}, {"renameat2", DSEC_FILE, 1, -1},
  {"link", DSEC_FILE, 1, -1}, {"linkat", DSEC_FILE, 3, -1},
  {"symlink", DSEC_FILE, 1, -1}, {"symlinkat", DSEC_FILE, 2, -1},
  {"mknod", DSEC_FILE, 0, -1}, {"mknodat", DSEC_FILE, 1, -1},
  {"chmod", DSEC_FILE, 0, -1}, {"fchmodat", DSEC_FILE, 1, -1}, {"fchmodat2", DSEC_FILE, 1, -1},
  {"fchmod", DSEC_FILE, -1, -1}, {"chown", DSEC_FILE, 0, -1}, {"lchown", DSEC_FILE, 0, -1},
  {"fchownat", DSEC_FILE, 1, -1}, {"fchown", DSEC_FILE, -1, -1},
  {"utimes", DSEC_FILE, 0, -1}, {"utimensat", DSEC_FILE, 1, -1},
  {"setxattr", DSEC_FILE, 0, -1}, {"lsetxattr", DSEC_FILE, 0, -1},
  {"fsetxattr", DSEC_FILE, -1, -1}, {"removexattr", DSEC_FILE, 0, -1},
  {"lremovexattr", DSEC_FILE, 0, -1}, {"fremovexattr", DSEC_FILE, -1, -1},
};

// libbpf's messages go to stderr by default; keep the last warning so a
// failed load can say why ("failed to find BTF", "Operation not permitted").
std::mutex log_m;
std::string last_log;

int capture_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG)
    return 0;
  char buf[512];
  int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  std::lock_guard<std::mutex> g(log_m);
  last_log.assign(buf);
  while (!last_log.empty() && (last_log.back() == '\n' || last_log.back() == ' '))
    last_log.pop_back();
  return n;
}

error load_error(const char* step, int err) {
  std::lock_guard<std::mutex> g(log_m);
  auto msg = std::string{"eBPF "} + step + ": " + std::strerror(err);
  if (!last_log.empty())
    msg += " (libbpf: " + last_log + ")";
  return unavailable(msg);
}

void to_words(const addr16& a, __u32 out[4]) { std::memcpy(out, a.data(), 16); }

dsec_rule make_rule(const rule& r) {
  dsec_rule k{};
  for (int i = 0; i < 4; ++i) {
    int bits = std::max(0, std::min(32, r.prefix - 32 * i));
    k.mask[i] = bits == 0 ? 0 : htonl(bits == 32 ? 0xffffffffu : ~(0xffffffffu >> bits));
  }
  __u32 a[4];
  to_words(r.addr, a);
  for (int i = 0; i < 4; ++i)
    k.addr[i] = a[i] & k.mask[i];
  k.port = htons(r.port);
  k.action = r.deny ? DSEC_RULE_DENY : DSEC_RULE_ALLOW;
  return k;
}

std::string syscall_name(uint32_t nr) {
  char* n = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, static_cast<int>(nr));
  std::string s = n ? n : "#" + std::to_string(nr);
  std::free(n);
  return s;
}

std::string describe(const dsec_event& e) {
  switch (e.kind) {
  case DSEC_NET: {
    addr16 a;
    std::memcpy(a.data(), e.addr, 16);
    auto host = format_addr(a);
    if (host.find(':') != std::string::npos)
      host = "[" + host + "]";
    return "net " + host + ":" + std::to_string(ntohs(e.port));
  }
  case DSEC_SYSCALL:
    return "syscall " + syscall_name(e.nr);
  case DSEC_FILE: {
    std::string path(e.path, strnlen(e.path, sizeof(e.path)));
    return "file " + (path.empty() ? syscall_name(e.nr) : path);
  }
  default:
    return "unknown";
  }
}

status fill_syscall_table(dsec_sec_bpf* skel) {
  for (auto& c : counted_syscalls) {
    int nr = seccomp_syscall_resolve_name(c.name);
    if (nr < 0 || nr >= DSEC_MAX_SYSCALL)
      continue; // not on this architecture (e.g. open on arm64)
    uint32_t v = c.kind;
    if (c.path_arg >= 0)
      v |= uint32_t(c.path_arg + 1) << 4;
    if (c.flags_arg >= 0)
      v |= uint32_t(c.flags_arg + 1) << 8;
    if (c.how)
      v |= DSEC_FLAGS_HOW;
    __u32 key = static_cast<__u32>(nr);
    if (bpf_map__update_elem(skel->maps.syscall_kind, &key, sizeof(key), &v, sizeof(v), BPF_ANY))
      return load_error("fill syscall table", errno);
  }
  return {};
}

} // namespace

// -- loading ---------------------------------------------------------------------

expected<std::unique_ptr<policy_engine>> policy_engine::load(const std::string& attach_dir,
                                                             uint32_t sandbox_level) {
  libbpf_set_print(capture_log);
  if (auto st = sys::make_dirs(attach_dir, 0755); !st)
    return unavailable("eBPF attach: " + st.err().message);
  sys::unique_fd cg{::open(attach_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!cg)
    return sys_error("eBPF attach: open", attach_dir, errno, errc::unavailable);
  auto* skel = dsec_sec_bpf__open();
  if (!skel)
    return load_error("open", errno);
  std::unique_ptr<policy_engine> eng{new policy_engine(skel)};
  skel->rodata->sandbox_level = sandbox_level;
  if (dsec_sec_bpf__load(skel))
    return load_error("load", errno);
  if (auto st = fill_syscall_table(skel); !st)
    return st.err();
  struct {
    bpf_program* prog;
    bpf_link** link;
  } socket_hooks[] = {
    {skel->progs.dsec_connect4, &skel->links.dsec_connect4},
    {skel->progs.dsec_connect6, &skel->links.dsec_connect6},
    {skel->progs.dsec_sendmsg4, &skel->links.dsec_sendmsg4},
    {skel->progs.dsec_sendmsg6, &skel->links.dsec_sendmsg6},
  };
  // Links attach with multi semantics: other programs on the same cgroup (a
  // second node, systemd) keep running; ours must also allow.
  for (auto& h : socket_hooks) {
    *h.link = bpf_program__attach_cgroup(h.prog, cg.get());
    if (!*h.link)
      return load_error("attach to cgroup", errno);
  }
  skel->links.dsec_sys_exit = bpf_program__attach(skel->progs.dsec_sys_exit);
  if (!skel->links.dsec_sys_exit)
    return load_error("attach sys_exit", errno);
  if (auto st = eng->set_host_addresses(host_addresses()); !st)
    return st.err();
  return eng;
}

policy_engine::~policy_engine() { dsec_sec_bpf__destroy(skel_); }

// -- per sandbox -------------------------------------------------------------------

status policy_engine::put(uint64_t cgroup_id, const std::vector<rule>& rules) {
  if (rules.size() > DSEC_MAX_RULES)
    return invalid_argument("network.allow: " + std::to_string(rules.size())
                            + " rules after resolving domains; at most "
                            + std::to_string(DSEC_MAX_RULES));
  auto stats = std::make_unique<dsec_stats>();
  std::memset(stats.get(), 0, sizeof(*stats));
  __u64 key = cgroup_id;
  if (bpf_map__update_elem(skel_->maps.stats, &key, sizeof(key), stats.get(), sizeof(*stats),
                           BPF_NOEXIST)
      && errno != EEXIST)
    return sys_error("eBPF counters of cgroup", std::to_string(cgroup_id), errno);
  auto pol = std::make_unique<dsec_policy>();
  std::memset(pol.get(), 0, sizeof(*pol));
  static uint32_t generation = 0;
  pol->generation = __atomic_add_fetch(&generation, 1, __ATOMIC_RELAXED);
  pol->n = static_cast<__u32>(rules.size());
  for (size_t i = 0; i < rules.size(); ++i)
    pol->rules[i] = make_rule(rules[i]);
  if (bpf_map__update_elem(skel_->maps.policies, &key, sizeof(key), pol.get(), sizeof(*pol),
                           BPF_ANY))
    return sys_error("eBPF policy of cgroup", std::to_string(cgroup_id), errno);
  return {};
}

void policy_engine::erase(uint64_t cgroup_id) {
  __u64 key = cgroup_id;
  bpf_map__delete_elem(skel_->maps.policies, &key, sizeof(key), 0);
  bpf_map__delete_elem(skel_->maps.stats, &key, sizeof(key), 0);
}

bool policy_engine::has(uint64_t cgroup_id) const {
  __u64 key = cgroup_id;
  auto pol = std::make_unique<dsec_policy>();
  return bpf_map__lookup_elem(skel_->maps.policies, &key, sizeof(key), pol.get(), sizeof(*pol),
                              0)
         == 0;
}

denial_counts policy_engine::denials(uint64_t cgroup_id) const {
  denial_counts out;
  __u64 key = cgroup_id;
  auto s = std::make_unique<dsec_stats>();
  if (bpf_map__lookup_elem(skel_->maps.stats, &key, sizeof(key), s.get(), sizeof(*s), 0) != 0)
    return out;
  out.network = static_cast<int64_t>(s->net);
  out.syscall = static_cast<int64_t>(s->syscall);
  out.file = static_cast<int64_t>(s->file);
  uint64_t n = std::min<uint64_t>(s->head, DSEC_RECENT);
  for (uint64_t i = s->head - n; i < s->head; ++i)
    out.recent.push_back(describe(s->recent[i % DSEC_RECENT]));
  return out;
}

status policy_engine::set_host_addresses(const std::vector<addr16>& addrs) {
  std::set<addr16> want(addrs.begin(), addrs.end());
  __u8 one = 1;
  for (auto& a : want) {
    __u32 key[4];
    to_words(a, key);
    if (bpf_map__update_elem(skel_->maps.host_addrs, key, sizeof(key), &one, 1, BPF_ANY))
      return sys_error("eBPF host address", format_addr(a), errno);
  }
  // Drop addresses the host no longer has.
  std::vector<addr16> stale;
  __u32 cur[4], next[4];
  void* prev = nullptr;
  while (bpf_map__get_next_key(skel_->maps.host_addrs, prev, next, sizeof(next)) == 0) {
    addr16 a;
    std::memcpy(a.data(), next, 16);
    if (!want.count(a))
      stale.push_back(a);
    std::memcpy(cur, next, sizeof(cur));
    prev = cur;
  }
  for (auto& a : stale) {
    __u32 key[4];
    to_words(a, key);
    bpf_map__delete_elem(skel_->maps.host_addrs, key, sizeof(key), 0);
  }
  return {};
}

// -- helpers -------------------------------------------------------------------------

expected<uint64_t> cgroup_id_of(const std::string& v2_dir) {
  struct stat st;
  if (::stat(v2_dir.c_str(), &st) != 0)
    return sys_error("stat", v2_dir, errno);
  return static_cast<uint64_t>(st.st_ino);
}

std::vector<addr16> host_addresses() {
  std::vector<addr16> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    return out;
  for (auto* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr)
      continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      out.push_back(v4_mapped(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      addr16 a;
      std::memcpy(a.data(), &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16);
      out.push_back(a);
    }
  }
  ::freeifaddrs(list);
  return out;
}

} // namespace dsec::net

namespace dsec::net {

status policy_engine::set_dns_server(const addr16& addr, uint16_t port) {
  dsec_dns_server v{};
  std::memcpy(v.addr, addr.data(), 16);
  v.port = htons(port);
  __u32 zero = 0;
  if (bpf_map__update_elem(skel_->maps.dns_server, &zero, sizeof(zero), &v, sizeof(v), BPF_ANY))
    return sys_error("eBPF dns server", format_addr(addr), errno);
  return {};
}

} // namespace dsec::net
