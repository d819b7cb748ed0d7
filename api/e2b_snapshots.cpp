// E2B snapshot and fork shapes, and the store's record of snapshots
// (e2b_snapshots.hpp).
#include "api/e2b_snapshots.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "api/e2b_codec.hpp"
#include "api/e2b_codec_detail.hpp"
#include "layers/aliases.hpp"

namespace dsec::e2b {

namespace {

using nlohmann::json;

constexpr const char* record_file = "e2b_snapshots.json";
constexpr const char* lock_file = "e2b_snapshots.lock";

std::string record_path(const std::string& root) { return root + "/" + record_file; }

/// Serialises writers of one process; flock (below) those of other nodes
/// that share the store.
std::mutex& record_mutex() {
  static std::mutex m;
  return m;
}

/// An exclusive flock on the store's snapshot lock file, released on scope exit.
class record_lock {
 public:
  explicit record_lock(const std::string& root)
      : fd_(::open((root + "/" + lock_file).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~record_lock() {
    if (fd_ >= 0)
      ::close(fd_); // drops the flock
  }
  record_lock(const record_lock&) = delete;
  record_lock& operator=(const record_lock&) = delete;
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

json record_json(const snapshot_record& r) {
  return json{{"names", r.names},
              {"sandboxID", r.sandbox_id},
              {"layers", r.layers},
              {"createdAt", r.created_at_ms}};
}

status write_all(const std::string& root, const snapshot_map& all) {
  json j = json::object();
  for (auto& [id, r] : all)
    j[id] = record_json(r);
  auto path = record_path(root);
  auto tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(1) << "\n";
    out.flush();
    if (!out)
      return error{errc::internal, "write " + tmp + ": " + std::strerror(errno)};
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto e = errno;
    ::unlink(tmp.c_str());
    return error{errc::internal, "rename " + tmp + " to " + path + ": " + std::strerror(e)};
  }
  return {};
}

bool is_string_list(const json& j) {
  return j.is_array()
         && std::all_of(j.begin(), j.end(), [](const json& v) { return v.is_string(); });
}

} // namespace

expected<std::string> parse_snapshot_request(std::string_view body) {
  auto j = detail::parse_object(body, "create snapshot");
  if (!j)
    return j.err();
  for (auto& [k, v] : j->items())
    if (k != "name" && !v.is_null())
      return invalid_argument("create snapshot: option " + k.substr(0, 100)
                              + " is not implemented by dsec (it takes only name)");
  auto it = j->find("name");
  if (it == j->end() || it->is_null())
    return std::string{};
  if (!it->is_string())
    return invalid_argument("create snapshot: name must be a string");
  auto name = it->get<std::string>();
  if (name.find('/') != std::string::npos || name.find(':') != std::string::npos)
    return invalid_argument("create snapshot: name \"" + name.substr(0, 100)
                            + "\": dsec has no team namespaces nor tags (no '/' or ':')");
  if (auto st = layers::check_alias_name(name); !st)
    return invalid_argument("create snapshot: name \"" + name.substr(0, 100)
                            + "\" must be 1 to 64 of a-z, 0-9, '.', '_' and '-', starting "
                              "with a letter or digit");
  if (template_layers(name)) // a snapshot must not shadow what `base` & co. mean
    return invalid_argument("create snapshot: name \"" + name
                            + "\" is a built-in template of dsec's E2B API");
  return name;
}

std::string snapshot_id_of(const std::string& name, int64_t ms, uint32_t random) {
  if (!name.empty())
    return name;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "snap-%lld-%08x", static_cast<long long>(ms), random);
  return buf;
}

std::string encode_snapshot(const snapshot_record& r) {
  return json{{"snapshotID", r.id}, {"names", r.names}}.dump();
}

expected<snapshot_query> parse_snapshot_query(const std::map<std::string, std::string>& q) {
  snapshot_query out;
  auto number = [](const std::string& v, const char* field, size_t max) -> expected<size_t> {
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument(std::string{"list snapshots: "} + field
                              + " must be a non-negative integer");
    auto n = static_cast<size_t>(std::stoul(v));
    if (n > max)
      return invalid_argument(std::string{"list snapshots: "} + field + " is at most "
                              + std::to_string(max));
    return n;
  };
  for (auto& [k, v] : q) {
    if (k == "sandboxID") {
      out.sandbox_id = v;
    } else if (k == "name") {
      out.name = v;
    } else if (k == "limit") {
      auto n = number(v, "limit", 1000);
      if (!n)
        return n.err();
      out.limit = *n == 0 ? 100 : *n;
    } else if (k == "nextToken") {
      if (v.empty())
        continue;
      auto n = number(v, "nextToken", 100000000);
      if (!n)
        return n.err();
      out.offset = *n;
    } else {
      return invalid_argument("list snapshots: query parameter " + k.substr(0, 64)
                              + " is not implemented by dsec (it takes sandboxID, name, "
                                "limit and nextToken)");
    }
  }
  return out;
}

std::string encode_snapshot_page(const snapshot_map& all, const snapshot_query& q,
                                 std::string& next_token) {
  std::vector<const snapshot_record*> match;
  for (auto& [id, r] : all) {
    if (!q.sandbox_id.empty() && r.sandbox_id != q.sandbox_id)
      continue;
    if (!q.name.empty() && r.id != q.name
        && std::find(r.names.begin(), r.names.end(), q.name) == r.names.end())
      continue;
    match.push_back(&r);
  }
  std::sort(match.begin(), match.end(), [](const snapshot_record* a, const snapshot_record* b) {
    if (a->created_at_ms != b->created_at_ms)
      return a->created_at_ms > b->created_at_ms;
    return a->id < b->id;
  });
  next_token.clear();
  json arr = json::array();
  auto end = std::min(match.size(), q.offset + q.limit);
  for (size_t i = q.offset; i < end; ++i)
    arr.push_back(json::parse(encode_snapshot(*match[i])));
  if (end < match.size())
    next_token = std::to_string(end);
  return arr.dump();
}

expected<fork_request> parse_fork(std::string_view body) {
  auto j = detail::parse_object(body, "fork sandbox");
  if (!j)
    return j.err();
  fork_request out;
  for (auto& [k, v] : j->items()) {
    if (v.is_null())
      continue;
    if (k == "count") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > max_forks)
        return invalid_argument("fork sandbox: count must be an integer from 1 to "
                                + std::to_string(max_forks));
      out.count = v.get<int32_t>();
    } else if (k == "timeout") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 2592000)
        return invalid_argument("fork sandbox: timeout must be an integer number of seconds "
                                "between 0 and 2592000");
      out.timeout_s = v.get<int64_t>();
    } else {
      return invalid_argument("fork sandbox: option " + k.substr(0, 100)
                              + " is not implemented by dsec (it takes count and timeout)");
    }
  }
  return out;
}

std::string encode_fork_results(const std::vector<fork_outcome>& v) {
  json arr = json::array();
  for (auto& o : v) {
    if (!o.sandbox_json.empty())
      arr.push_back(json{{"sandbox", json::parse(o.sandbox_json)}});
    else
      arr.push_back(json{{"error", json{{"code", o.status}, {"message", o.message}}}});
  }
  return arr.dump();
}

// -- the store's record -----------------------------------------------------------

expected<snapshot_map> read_snapshots(const std::string& root) {
  auto path = record_path(root);
  std::ifstream in(path);
  snapshot_map out;
  if (!in)
    return out; // no snapshot taken yet
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = json::parse(ss.str(), nullptr, false);
  auto corrupt = [&](const std::string& why) {
    return error{errc::internal, "E2B snapshot record " + path + " is corrupt: " + why};
  };
  if (j.is_discarded() || !j.is_object())
    return corrupt("not a JSON object");
  for (auto& [id, v] : j.items()) {
    if (!v.is_object() || !is_string_list(v.value("names", json::array()))
        || !is_string_list(v.value("layers", json())) || !v.value("sandboxID", json()).is_string()
        || !v.value("createdAt", json()).is_number_integer())
      return corrupt("entry " + id.substr(0, 100));
    snapshot_record r;
    r.id = id;
    r.names = v["names"].get<std::vector<std::string>>();
    r.layers = v["layers"].get<std::vector<std::string>>();
    r.sandbox_id = v["sandboxID"].get<std::string>();
    r.created_at_ms = v["createdAt"].get<int64_t>();
    out.emplace(id, std::move(r));
  }
  return out;
}

status put_snapshot(const std::string& root, const snapshot_record& r) {
  std::lock_guard<std::mutex> guard{record_mutex()};
  record_lock lock{root};
  if (!lock.ok())
    return error{errc::internal, "lock " + root + "/" + lock_file + ": " + std::strerror(errno)};
  auto all = read_snapshots(root);
  if (!all)
    return all.err();
  (*all)[r.id] = r;
  return write_all(root, *all);
}

expected<bool> remove_snapshot(const std::string& root, const std::string& id) {
  std::lock_guard<std::mutex> guard{record_mutex()};
  record_lock lock{root};
  if (!lock.ok())
    return error{errc::internal, "lock " + root + "/" + lock_file + ": " + std::strerror(errno)};
  auto all = read_snapshots(root);
  if (!all)
    return all.err();
  if (all->erase(id) == 0)
    return false;
  if (auto st = write_all(root, *all); !st)
    return st.err();
  return true;
}

} // namespace dsec::e2b
