/* The layout of the maps shared by dsec_sec.bpf.c (the kernel side) and
 * net_policy.cpp (the node side). Plain C with fixed-width types only, so
 * both compilers lay the structs out alike. Addresses are 16 bytes in network
 * order; IPv4 is stored v4-mapped (::ffff:a.b.c.d) so one rule format and one
 * loop cover connect4, connect6 to v4-mapped addresses, and the send hooks.
 * Ports are network order.
 */
#ifndef DSEC_SEC_MAPS_H
#define DSEC_SEC_MAPS_H

/* Rules per sandbox: the allow-list entries after domains were resolved, plus
 * the DNS rules. A lookup walks at most this many; 128 keeps the map value
 * under 5 KiB and the walk under a microsecond. */
#define DSEC_MAX_RULES 128
/* Denied targets kept per sandbox for `recent`. */
#define DSEC_RECENT 16
#define DSEC_PATH_MAX 96
/* Syscall numbers the kind table covers (x86_64 tops out near 460). */
#define DSEC_MAX_SYSCALL 512

/* One destination rule: (addr & mask) == addr, port 0 = any port. The
 * first rule that matches decides: DSEC_RULE_ALLOW lets the connect or send
 * through, DSEC_RULE_DENY refuses and counts it (network.deny; the node
 * orders rules so E2B's precedence holds, backends/net/deny_list.hpp). */
#define DSEC_RULE_ALLOW 0
#define DSEC_RULE_DENY 1
struct dsec_rule {
  __u32 addr[4];
  __u32 mask[4];
  __u16 port;
  __u16 action;
};

/* The policy of one sandbox, keyed by the cgroup id of its v2 directory. */
struct dsec_policy {
  __u32 n;
  __u32 generation;
  struct dsec_rule rules[DSEC_MAX_RULES];
};

enum dsec_kind { DSEC_NET = 1, DSEC_SYSCALL = 2, DSEC_FILE = 3 };

/* One denial for `recent`: net (addr, port), syscall (nr), file (nr, path). */
struct dsec_event {
  __u32 kind;
  __u32 nr;
  __u32 addr[4];
  __u16 port;
  __u16 pad;
  char path[DSEC_PATH_MAX];
};

/* Counters of one sandbox; `head` counts events ever recorded, the ring
 * holds the last DSEC_RECENT at recent[i % DSEC_RECENT]. */
struct dsec_stats {
  __u64 net;
  __u64 syscall;
  __u64 file;
  __u64 head;
  struct dsec_event recent[DSEC_RECENT];
};

/* Value of the syscall kind table (array indexed by syscall number):
 * bits 0-1 the kind (0 none, DSEC_SYSCALL counted on -EPERM, DSEC_FILE
 * counted on -EPERM/-EACCES/-EROFS), bits 4-7 path argument index + 1,
 * bits 8-11 open flags argument index + 1 (only write opens count),
 * bit 12: the flags argument points to a struct open_how (openat2). */
#define DSEC_KIND_MASK 0x3u
#define DSEC_PATH_ARG(v) ((((v) >> 4) & 0xfu))
#define DSEC_FLAGS_ARG(v) ((((v) >> 8) & 0xfu))
#define DSEC_FLAGS_HOW 0x1000u

/* The node's DNS resolver: address (16 bytes, network order) and port
 * (network order); the one host destination sandboxes with rules reach. */
struct dsec_dns_server {
  __u32 addr[4];
  __u16 port;
  __u16 pad;
};

#endif
