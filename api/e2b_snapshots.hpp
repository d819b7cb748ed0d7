// E2B's snapshots and fork on dsec's snapshot layers, the pure half: the
// request and answer shapes of POST /sandboxes/{id}/snapshots, GET
// /snapshots, DELETE /templates/{id} and POST /sandboxes/{id}/fork, and the
// store's record of E2B snapshots (<store>/e2b_snapshots.json).
//
// A snapshot is a dsec snapshot layer (the sandbox's file changes, taken
// while it is briefly paused) plus the layers below it. E2B names a snapshot
// by one id that a create's templateID takes, so the record maps that id to
// the whole layer stack; it outlives the sandbox, as E2B's does. Deleting a
// snapshot removes the record; the layer stays in the store (running
// sandboxes may sit on it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec::e2b {

/// One E2B snapshot: its id (the templateID that creates from it), names,
/// the sandbox it was taken of, and the layers a sandbox made from it gets.
struct snapshot_record {
  std::string id;
  std::vector<std::string> names;
  std::string sandbox_id;
  std::vector<std::string> layers;
  int64_t created_at_ms = 0;
};

/// Snapshot id -> record.
using snapshot_map = std::map<std::string, snapshot_record>;

/// The name of a POST .../snapshots body ("" when it has none). A name is
/// 1-64 of [a-z0-9._-] starting with a letter or digit (dsec has no teams
/// nor tags); anything else is invalid_argument naming it.
[[nodiscard]] expected<std::string> parse_snapshot_request(std::string_view body);

/// The id of a new snapshot: its name, else "snap-<ms>-<8 hex>" from `ms`
/// and `random`.
std::string snapshot_id_of(const std::string& name, int64_t ms, uint32_t random);

/// E2B's SnapshotInfo: {"snapshotID", "names"}.
std::string encode_snapshot(const snapshot_record& r);

/// GET /snapshots: sandboxID, name (an id or a name), limit, nextToken.
struct snapshot_query {
  std::string sandbox_id;
  std::string name;
  size_t limit = 100;
  size_t offset = 0;
};

[[nodiscard]] expected<snapshot_query> parse_snapshot_query(
  const std::map<std::string, std::string>& q);

/// The page of `all` that `q` selects, newest first, as a JSON array; sets
/// `next_token` when more follow.
std::string encode_snapshot_page(const snapshot_map& all, const snapshot_query& q,
                                 std::string& next_token);

/// POST .../fork: how many forks (1-100, default 1) and their TTL in
/// seconds (default 15, E2B's).
struct fork_request {
  int32_t count = 1;
  int64_t timeout_s = 15;
};

/// The most forks one call makes.
constexpr int32_t max_forks = 100;

[[nodiscard]] expected<fork_request> parse_fork(std::string_view body);

/// One fork's outcome: the sandbox as encode_sandbox answers it, or an
/// error's HTTP status and message.
struct fork_outcome {
  std::string sandbox_json;
  int status = 0;
  std::string message;
};

/// E2B's SandboxForkResult array: {"sandbox": ...} or {"error": {code, message}}.
std::string encode_fork_results(const std::vector<fork_outcome>& v);

// -- the store's record (blocking, small file reads and writes) ---------------

/// The E2B snapshots recorded in the store at `root`; none without a record.
/// A corrupt record is an error naming its path.
[[nodiscard]] expected<snapshot_map> read_snapshots(const std::string& root);

/// Adds or replaces `r` (an existing name moves to the new layers, as E2B
/// gives an existing snapshot name a new build). Atomic (rename).
[[nodiscard]] status put_snapshot(const std::string& root, const snapshot_record& r);

/// Removes snapshot `id`; false if there was none.
[[nodiscard]] expected<bool> remove_snapshot(const std::string& root, const std::string& id);

} // namespace dsec::e2b
