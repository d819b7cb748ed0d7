// SPDX-License-Identifier: GPL-2.0
/* The kernel half of dsec's per-sandbox network allow-lists and denial
 * counters. Loaded once per node (net_policy.cpp) and attached once, with
 * BPF_F_ALLOW_MULTI, to the node's v2 cgroup parent dsec/<node>: every
 * sandbox's v2 directory lies below it, so each program runs for every
 * sandbox socket, finds the sandbox by the cgroup id of its ancestor at
 * `sandbox_level`, and lets sockets of cgroups it does not know through.
 *
 *  - cgroup/connect4, connect6, sendmsg4, sendmsg6: allow loopback, refuse the
 *    host's own addresses whatever the list says, allow a destination whose
 *    first matching rule of the sandbox's policy allows, refuse (EPERM) and
 *    count the rest (a deny rule's match included).
 *    connect4 alone would be bypassed by IPv6 sockets to ::ffff:a.b.c.d and by
 *    unconnected UDP sendto, hence all four.
 *  - tp_btf/sys_exit: a syscall of a known sandbox that failed with EPERM
 *    (syscall kind: what the seccomp filter refuses) or EPERM/EACCES/EROFS
 *    (file kind: file-modifying calls) is counted, with the path for `recent`.
 *    The errno test comes first, so the common successful syscall costs one
 *    compare.
 */
#include "vmlinux.h"

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "sec_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* Level of a sandbox's v2 directory below the v2 root (dsec/<node>/<id> = 3);
 * set before load. */
const volatile __u32 sandbox_level = 3;

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct dsec_policy);
} policies SEC(".maps");

/* The node's DNS resolver (bridge gateway, port 53 in network order), set
 * after load: the one host address a sandbox with rules may reach, and only
 * on that port. Zero port = no resolver yet. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct dsec_dns_server);
} dns_server SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);
  __type(value, struct dsec_stats);
} stats SEC(".maps");

/* The host's own addresses (16-byte keys): never reachable from a sandbox. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32[4]);
  __type(value, __u8);
} host_addrs SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, DSEC_MAX_SYSCALL);
  __type(key, __u32);
  __type(value, __u32);
} syscall_kind SEC(".maps");

#define EPERM 1
#define EACCES 13
#define EROFS 30
#define O_WRONLY 01
#define O_RDWR 02
#define O_CREAT 0100
#define O_TRUNC 01000

static __always_inline struct dsec_event *next_event(struct dsec_stats *s) {
  __u64 i = __sync_fetch_and_add(&s->head, 1);
  return &s->recent[i % DSEC_RECENT];
}

static __always_inline int is_local(const __u32 a[4]) {
  /* ::1 */
  if (a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == bpf_htonl(1))
    return 1;
  /* ::ffff:127.0.0.0/8 and ::ffff:0.0.0.0/8 (both the sandbox's own netns) */
  if (a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff)) {
    __u32 first = bpf_ntohl(a[3]) >> 24;
    return first == 127 || first == 0;
  }
  return 0;
}

/* 1 = allow, 0 = refuse (the kernel returns EPERM). */
static __always_inline int check(__u32 a[4], __u16 port) {
  __u64 cg = bpf_get_current_ancestor_cgroup_id(sandbox_level);
  struct dsec_policy *p = bpf_map_lookup_elem(&policies, &cg);
  if (!p)
    return 1; /* not a sandbox of this node */
  if (is_local(a))
    return 1;
  __u32 zero = 0;
  struct dsec_dns_server *d = bpf_map_lookup_elem(&dns_server, &zero);
  if (d && d->port && port == d->port && p->n > 0 && a[0] == d->addr[0] && a[1] == d->addr[1] &&
      a[2] == d->addr[2] && a[3] == d->addr[3])
    return 1;
  if (!bpf_map_lookup_elem(&host_addrs, (__u32(*)[4])a)) {
    __u32 n = p->n;
    for (__u32 i = 0; i < DSEC_MAX_RULES; i++) {
      if (i >= n)
        break;
      struct dsec_rule *r = &p->rules[i];
      if ((a[0] & r->mask[0]) == r->addr[0] && (a[1] & r->mask[1]) == r->addr[1] &&
          (a[2] & r->mask[2]) == r->addr[2] && (a[3] & r->mask[3]) == r->addr[3] &&
          (r->port == 0 || r->port == port)) {
        if (r->action == DSEC_RULE_DENY)
          break; /* network.deny: refused and counted below */
        return 1;
      }
    }
  }
  struct dsec_stats *s = bpf_map_lookup_elem(&stats, &cg);
  if (s) {
    __sync_fetch_and_add(&s->net, 1);
    struct dsec_event *e = next_event(s);
    e->kind = DSEC_NET;
    e->nr = 0;
    e->addr[0] = a[0];
    e->addr[1] = a[1];
    e->addr[2] = a[2];
    e->addr[3] = a[3];
    e->port = port;
    e->path[0] = 0;
  }
  return 0;
}

static __always_inline int check4(struct bpf_sock_addr *ctx) {
  __u32 a[4] = {0, 0, bpf_htonl(0xffff), ctx->user_ip4};
  return check(a, (__u16)ctx->user_port);
}

static __always_inline int check6(struct bpf_sock_addr *ctx) {
  __u32 a[4] = {ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]};
  return check(a, (__u16)ctx->user_port);
}

SEC("cgroup/connect4")
int dsec_connect4(struct bpf_sock_addr *ctx) { return check4(ctx); }

SEC("cgroup/connect6")
int dsec_connect6(struct bpf_sock_addr *ctx) { return check6(ctx); }

SEC("cgroup/sendmsg4")
int dsec_sendmsg4(struct bpf_sock_addr *ctx) { return check4(ctx); }

SEC("cgroup/sendmsg6")
int dsec_sendmsg6(struct bpf_sock_addr *ctx) { return check6(ctx); }

static __always_inline unsigned long arg_of(struct pt_regs *regs, __u32 i) {
  switch (i) {
  case 0: return regs->di;
  case 1: return regs->si;
  case 2: return regs->dx;
  case 3: return regs->r10;
  case 4: return regs->r8;
  default: return regs->r9;
  }
}

SEC("tp_btf/sys_exit")
int BPF_PROG(dsec_sys_exit, struct pt_regs *regs, long ret) {
  if (ret != -EPERM && ret != -EACCES && ret != -EROFS)
    return 0;
  __u32 nr = (__u32)regs->orig_ax;
  __u32 *kp = bpf_map_lookup_elem(&syscall_kind, &nr);
  if (!kp || *kp == 0)
    return 0;
  __u32 k = *kp;
  __u32 kind = k & DSEC_KIND_MASK;
  if (kind == DSEC_SYSCALL && ret != -EPERM)
    return 0;
  __u64 cg = bpf_get_current_ancestor_cgroup_id(sandbox_level);
  struct dsec_stats *s = bpf_map_lookup_elem(&stats, &cg);
  if (!s)
    return 0;
  __u32 fa = DSEC_FLAGS_ARG(k);
  if (kind == DSEC_FILE && fa) {
    __u64 flags = arg_of(regs, fa - 1);
    if (k & DSEC_FLAGS_HOW) {
      __u64 how_flags = 0;
      bpf_probe_read_user(&how_flags, sizeof(how_flags), (void *)flags);
      flags = how_flags;
    }
    if (!(flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)))
      return 0; /* a refused read is not a file-modification denial */
  }
  if (kind == DSEC_FILE)
    __sync_fetch_and_add(&s->file, 1);
  else
    __sync_fetch_and_add(&s->syscall, 1);
  struct dsec_event *e = next_event(s);
  e->kind = kind == DSEC_FILE ? DSEC_FILE : DSEC_SYSCALL;
  e->nr = nr;
  e->port = 0;
  e->path[0] = 0;
  __u32 pa = DSEC_PATH_ARG(k);
  if (pa)
    bpf_probe_read_user_str(e->path, sizeof(e->path), (void *)arg_of(regs, pa - 1));
  return 0;
}
