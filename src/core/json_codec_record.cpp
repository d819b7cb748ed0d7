// The sandbox record a node keeps on disk for each running sandbox
// (json_codec.hpp, sandbox_record): a spec written so that parse_spec reads
// it back, a record decoder tolerant of fields a newer node may add, and the
// fold of a version 1 node's separate ttl.json into the one record.
#include <nlohmann/json.hpp>

#include "core/json_codec.hpp"
#include "core/json_codec_fields.hpp"
#include "core/spec_fields.hpp"
#include "core/ttl.hpp"
#include "core/validate.hpp"

namespace dsec::json_codec {

using nlohmann::json;

namespace {

json spec_to_json(const sandbox_spec& s) {
  json j = json::object();
  write_shown(j, s, audience::json, json(nullptr));
  // Special (core/spec_fields.hpp): parse_spec reads either form back.
  j["network"] = s.network.allow.empty() ? json{{"mode", "none"}}
                                         : json{{"allow", s.network.allow}};
  if (!s.network.deny.empty())
    j["network"]["deny"] = s.network.deny;
  return j;
}

// Records hold epoch milliseconds: whole numbers well inside a double's 2^53.
constexpr int64_t max_record_ms = int64_t{1} << 52;

} // namespace

std::string encode(const sandbox_spec& spec) { return dump(spec_to_json(spec)); }

std::string encode(const sandbox_record& rec) {
  json j{{"version", record_version},
         {"id", rec.id},
         {"spec", spec_to_json(rec.spec)},
         {"created_at_ms", rec.created_at_ms},
         {"expires_at_ms", rec.expires_at_ms},
         {"digests", rec.digests},
         {"paused_at_ms", rec.paused_at_ms},
         {"ttl_left_ms", rec.ttl_left_ms}};
  if (!rec.cpu_class.empty())
    j["cpu_class"] = rec.cpu_class;
  if (!rec.exec_workdir.empty())
    j["exec_workdir"] = rec.exec_workdir;
  if (!rec.exec_user.empty())
    j["exec_user"] = rec.exec_user;
  return dump(j);
}

expected<sandbox_record> decode_record(std::string_view body) {
  auto j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("record: not a JSON object");
  sandbox_record r;
  if (auto st = get_string(j, "id", r.id); !st)
    return invalid_argument("record: " + st.err().message);
  if (r.id.empty())
    return invalid_argument("record: id is missing");
  auto it = j.find("spec");
  if (it == j.end() || !it->is_object())
    return invalid_argument("record " + r.id + ": spec is missing or not an object");
  json known = json::object();
  // The spec fields this version knows; a record's spec may carry more.
  for (auto* key : field_names<sandbox_spec>())
    if (auto f = it->find(key); f != it->end())
      known[key] = *f;
  if (auto st = spec_from(known, r.spec); !st)
    return invalid_argument("record " + r.id + ": spec: " + st.err().message);
  status st;
  if (!(st = get_int(j, "created_at_ms", r.created_at_ms, 0, max_record_ms))
      || !(st = get_int(j, "expires_at_ms", r.expires_at_ms, 0, max_record_ms))
      || !(st = get_string_list(j, "digests", r.digests, spec_limits::max_layers))
      || !(st = get_string(j, "cpu_class", r.cpu_class))
      || !(st = get_string(j, "exec_workdir", r.exec_workdir))
      || !(st = get_string(j, "exec_user", r.exec_user))
      || !(st = get_int(j, "paused_at_ms", r.paused_at_ms, 0, max_record_ms))
      || !(st = get_int(j, "ttl_left_ms", r.ttl_left_ms, 0, max_record_ms))
      || (!r.cpu_class.empty() && !(st = validate_cpu_class(r.cpu_class))))
    return invalid_argument("record " + r.id + ": " + st.err().message);
  if (r.created_at_ms == 0)
    return invalid_argument("record " + r.id + ": created_at_ms is missing");
  if (r.digests.size() != r.spec.layers.size())
    return invalid_argument("record " + r.id + ": " + std::to_string(r.digests.size())
                            + " digests for " + std::to_string(r.spec.layers.size()) + " layers");
  return r;
}

void merge_ttl_file(sandbox_record& rec, std::string_view ttl_json_body, std::string* why) {
  auto f = ttl::decode(ttl_json_body);
  if (!f) {
    if (why)
      *why = f.err().message;
    return;
  }
  rec.paused_at_ms = f->paused_at_ms;
  rec.ttl_left_ms = f->paused_at_ms != 0 ? f->left_ms : 0;
  rec.expires_at_ms = f->paused_at_ms != 0 ? 0 : f->expires_at_ms;
}

} // namespace dsec::json_codec
