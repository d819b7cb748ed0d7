// The one recovery record per sandbox (json_codec::sandbox_record, in
// `<state>/sandboxes/<id>/record.json`): written whole at create, changed in
// place by a PATCH of the CPU class and by every pause, resume and new TTL,
// and read at node start to adopt the sandbox. Every write of one sandbox's
// record goes through here under that sandbox's lock and replaces the file
// atomically (temp + rename), so a PATCH and a pause never lose each other's
// change and a crash leaves the old record or the new one, never a torn one.
// A record a node before version 2 left (record.json beside ttl.json) is
// still adopted: read_sandbox_record folds the TTL file in and rewrites the
// pair as one record. No CAF here: the calls block and run on the worker pool
// or before any actor starts.
#pragma once

#include <functional>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/json_codec.hpp"

namespace dsec {

struct node_context;

/// Blocking: the record of a sandbox just created (running, its TTL from
/// `created_at_ms`); a create that cannot keep one fails.
/// `exec_workdir` and `exec_user` are its layers' exec defaults.
status keep_new_record(const node_context& ctx, const std::string& id, const sandbox_spec& spec,
                       int64_t created_at_ms, const std::vector<std::string>& digests,
                       const std::string& exec_workdir = {}, const std::string& exec_user = {});

/// Blocking: writes `rec` whole as its sandbox's record.
status write_sandbox_record(const node_context& ctx, const json_codec::sandbox_record& rec);

/// Blocking: reads sandbox `id`'s record, applies `change`, writes it back.
/// not_found (and nothing written) if there is no record: the sandbox is
/// being torn down, or was never kept.
status update_sandbox_record(const node_context& ctx, const std::string& id,
                             const std::function<void(json_codec::sandbox_record&)>& change);

/// Blocking, at node start: sandbox `id`'s record, which must name `id`.
/// A version 1 node's ttl.json beside it is folded in, the pair rewritten as
/// one record and the TTL file removed; a corrupt TTL file is logged (lines
/// begin with `who`) and dropped, the record's expiry then holds.
expected<json_codec::sandbox_record> read_sandbox_record(const node_context& ctx,
                                                         const std::string& id,
                                                         const std::string& who);

} // namespace dsec
