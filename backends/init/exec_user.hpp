// Who an exec runs as: a user given by name or number ("app", "1000",
// "app:staff", "1000:1000") resolved against the sandbox's own /etc/passwd
// and /etc/group, never the host's (init reads them inside the sandbox
// root). Header-only and exception-free, for dsec-init and its unit test.
//
// As Docker does: a name must be in passwd; a bare uid need not be (its gid
// is then the passwd entry's if there is one, else 0); a group part, name or
// number, replaces the primary gid. Supplementary groups are the groups
// whose member list names the user (none for a uid without a name).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsec::init {

/// A resolved exec user.
struct exec_identity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  /// The passwd entry's home directory ("" for a uid without an entry).
  std::string home;
};

namespace user_detail {

/// A decimal id below 2^32-1, or false.
inline bool parse_id(std::string_view s, uint32_t& out) {
  if (s.empty() || s.size() > 10)
    return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v >= 0xffffffffull)
    return false;
  out = uint32_t(v);
  return true;
}

/// The `n`th ':'-separated field of `line` (0-based).
inline std::string_view field(std::string_view line, int n) {
  for (int i = 0; i < n; ++i) {
    auto c = line.find(':');
    if (c == std::string_view::npos)
      return {};
    line.remove_prefix(c + 1);
  }
  return line.substr(0, line.find(':'));
}

/// Calls `fn(line)` for each non-empty, non-comment line; stops when it returns true.
template <class Fn>
void each_line(std::string_view text, Fn fn) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line[0] != '#' && fn(line))
      return;
  }
}

} // namespace user_detail

/// Resolves `spec` against the texts of /etc/passwd and /etc/group; returns
/// "" and fills `out`, or the reason it cannot ("no user \"bob\" in the
/// sandbox's /etc/passwd").
inline std::string resolve_exec_user(std::string_view spec, std::string_view passwd,
                                     std::string_view group, exec_identity& out) {
  using namespace user_detail;
  out = exec_identity{};
  auto colon = spec.find(':');
  auto user = spec.substr(0, colon);
  auto grp = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  if (user.empty() || (colon != std::string_view::npos && grp.empty()))
    return "bad user \"" + std::string(spec) + "\"";
  uint32_t id = 0;
  bool numeric = parse_id(user, id);
  bool found = false;
  std::string name;
  each_line(passwd, [&](std::string_view line) {
    uint32_t uid = 0, gid = 0;
    if (!parse_id(field(line, 2), uid) || !parse_id(field(line, 3), gid))
      return false;
    if (numeric ? uid != id : field(line, 0) != user)
      return false;
    found = true;
    out.uid = uid;
    out.gid = gid;
    out.home = std::string(field(line, 5));
    name = std::string(field(line, 0));
    return true;
  });
  if (!found) {
    if (!numeric)
      return "no user \"" + std::string(user) + "\" in the sandbox's /etc/passwd";
    out.uid = id;
  }
  if (!grp.empty()) {
    uint32_t gid = 0;
    if (parse_id(grp, gid)) {
      out.gid = gid;
    } else {
      bool gfound = false;
      each_line(group, [&](std::string_view line) {
        uint32_t g = 0;
        if (field(line, 0) != grp || !parse_id(field(line, 2), g))
          return false;
        out.gid = g;
        gfound = true;
        return true;
      });
      if (!gfound)
        return "no group \"" + std::string(grp) + "\" in the sandbox's /etc/group";
    }
  }
  out.groups.push_back(out.gid);
  if (!name.empty())
    each_line(group, [&](std::string_view line) {
      uint32_t g = 0;
      if (!parse_id(field(line, 2), g))
        return false;
      auto members = field(line, 3);
      while (!members.empty()) {
        auto comma = members.find(',');
        if (members.substr(0, comma) == name && g != out.gid)
          out.groups.push_back(g);
        members.remove_prefix(comma == std::string_view::npos ? members.size() : comma + 1);
      }
      return false;
    });
  return {};
}

} // namespace dsec::init
