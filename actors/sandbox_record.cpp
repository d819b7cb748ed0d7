// The one recovery record per sandbox (see sandbox_record.hpp).
#include "actors/sandbox_record.hpp"

#include <unistd.h>

#include <array>
#include <iostream>
#include <mutex>

#include "actors/node_context.hpp"
#include "core/ttl.hpp"
#include "sys/fs.hpp"

namespace dsec {

namespace {

/// The lock of sandbox `id`'s record: one of a fixed set, by hash, so a node
/// of thousands of sandboxes needs no table that grows and shrinks with them.
std::mutex& record_lock(const std::string& id) {
  static std::array<std::mutex, 64> locks;
  return locks[std::hash<std::string>{}(id) % locks.size()];
}

status write_locked(const node_context& ctx, const json_codec::sandbox_record& rec) {
  // No fsync (~5 ms here, as much as the whole create): a host crash kills the
  // sandbox with the record, so surviving a node crash is all it needs.
  return sys::write_file_atomic(ctx.record_path(rec.id), json_codec::encode(rec), 0600,
                                sys::durability::process_crash);
}

expected<json_codec::sandbox_record> read_locked(const node_context& ctx, const std::string& id) {
  auto text = sys::read_file(ctx.record_path(id));
  if (!text)
    return text.err().code == errc::not_found
             ? error{errc::not_found, "no record (the node died while creating it)"}
             : text.err();
  auto rec = json_codec::decode_record(*text);
  if (rec && rec->id != id)
    return invalid_argument("its record names sandbox " + rec->id);
  return rec;
}

} // namespace

status keep_new_record(const node_context& ctx, const std::string& id, const sandbox_spec& spec,
                       int64_t created_at_ms, const std::vector<std::string>& digests,
                       const std::string& exec_workdir, const std::string& exec_user) {
  json_codec::sandbox_record rec;
  rec.id = id;
  rec.spec = spec;
  rec.created_at_ms = created_at_ms;
  rec.expires_at_ms = spec.ttl_s > 0 ? created_at_ms + spec.ttl_s * 1000 : 0;
  rec.digests = digests;
  rec.exec_workdir = exec_workdir;
  rec.exec_user = exec_user;
  return write_sandbox_record(ctx, rec);
}

status write_sandbox_record(const node_context& ctx, const json_codec::sandbox_record& rec) {
  std::lock_guard<std::mutex> g(record_lock(rec.id));
  return write_locked(ctx, rec);
}

status update_sandbox_record(const node_context& ctx, const std::string& id,
                             const std::function<void(json_codec::sandbox_record&)>& change) {
  std::lock_guard<std::mutex> g(record_lock(id));
  auto rec = read_locked(ctx, id);
  if (!rec)
    return rec.err();
  change(*rec);
  return write_locked(ctx, *rec);
}

expected<json_codec::sandbox_record> read_sandbox_record(const node_context& ctx,
                                                         const std::string& id,
                                                         const std::string& who) {
  std::lock_guard<std::mutex> g(record_lock(id));
  auto rec = read_locked(ctx, id);
  if (!rec)
    return rec;
  auto old = ctx.sandbox_dir(id) + "/" + ttl::file_name;
  if (!sys::exists(old))
    return rec;
  auto text = sys::read_file(old);
  std::string why = text ? std::string{} : text.err().message;
  if (text)
    json_codec::merge_ttl_file(*rec, *text, &why);
  if (!why.empty())
    std::cout << who << "sandbox " << id << ": " << old << ": " << why
              << "; its record's expiry holds" << std::endl;
  // One record from here on; the old file goes only once the new record is
  // in place (a crash between the two reads the same state twice).
  if (auto st = write_locked(ctx, *rec); !st)
    std::cout << who << "sandbox " << id << ": fold " << old << " into its record: "
              << st.err().message << std::endl;
  else
    ::unlink(old.c_str());
  return rec;
}

// Declared in sandbox_ops.hpp, for sandbox_update.cpp: the class a PATCH
// moved the sandbox to, in its record (the spec keeps the class it was
// created with).
status write_record(const node_context& ctx, const std::string& id, const sandbox_spec& spec,
                    int64_t, const std::vector<std::string>&, const std::string& cpu_class) {
  return update_sandbox_record(ctx, id, [&](json_codec::sandbox_record& rec) {
    rec.cpu_class = cpu_class == spec.cpu_class ? std::string{} : cpu_class;
  });
}

} // namespace dsec
