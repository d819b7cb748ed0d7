// Named egress sources: the node's map from a name a task author writes
// (`pypi`, `npm`, `apt`, `goproxy`, ...) to the allow-list entries it opens,
// typically the team's mirrors. Read once at node start from
// `--egress-sources FILE`, a JSON object:
//
//   {"pypi": ["pypi.mirror.internal:443", "10.8.0.0/16:443"],
//    "npm":  ["registry.npm.mirror.internal:443"]}
//
// A name is 1-32 characters of [a-z0-9_-] starting with a letter; it never
// contains ':' so it can stand beside "host:port" entries in one list
// (`{"allow": ["pypi", "10.0.0.5:443"]}`). Each entry is an allow-list entry
// (core/allow_list.hpp). The file is the whole truth: a malformed one stops
// the node at start with the line and field named.
//
// The installed set is process-wide (one node per process); its digest goes
// with gossip so a node with another file is visible in GET /v1/nodes.
// Pure: the standard library and nlohmann::json.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/allow_list.hpp"
#include "core/error.hpp"

namespace dsec::net {

/// The parsed sources file.
struct egress_sources {
  /// name -> its entries as written (each valid per parse_allow_entry).
  std::map<std::string, std::vector<std::string>> by_name;
  /// name -> the same entries as parse_allow_entry parsed them at load, so
  /// a name expands without parsing its entries again.
  std::map<std::string, std::vector<allow_entry>> parsed;
  /// "sha256-like" stable digest of the canonical content (16 hex digits of
  /// FNV-1a 64 over the sorted names and entries); "" when no file was given.
  std::string digest;
};

/// True for a string shaped like a source name (no ':', [a-z][a-z0-9_-]*).
bool is_source_name(std::string_view s);

/// Parses the file's text; `origin` names it in errors. Errors
/// (invalid_argument) name the line and the field:
/// `egress sources FILE line 3: "pypi"[1]: "x:99999": port out of range`.
expected<egress_sources> parse_egress_sources(std::string_view text, const std::string& origin);

/// Reads and parses FILE.
expected<egress_sources> load_egress_sources(const std::string& path);

/// Installs the node's sources (node start; tests).
void install_egress_sources(egress_sources s);

/// The installed sources (empty without --egress-sources).
egress_sources installed_egress_sources();

/// "known: apt, npm, pypi" or "none are configured on this node
/// (dsec node --egress-sources FILE)": the tail of unknown-name errors.
std::string known_sources_text();

/// Expands `name` into its parsed entries; unknown names are an
/// invalid_argument listing the known ones.
expected<std::vector<allow_entry>> expand_source(const std::string& name);

/// One parsed allow-list entry and the egress source it came from ("" for
/// entries written as addresses or domains).
struct sourced_entry {
  allow_entry entry;
  std::string source;
};

/// parse_allow_list, keeping which source each entry came from.
expected<std::vector<sourced_entry>> parse_allow_list_sourced(
  const std::vector<std::string>& allow);

/// The DNS upstream the node resolves allowed names through
/// (`--dns-upstream HOST:PORT`); "" = the first nameserver of the host's
/// /etc/resolv.conf.
void set_dns_upstream(std::string host_port);
std::string dns_upstream();

} // namespace dsec::net
