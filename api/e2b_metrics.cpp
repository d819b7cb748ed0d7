// Sandbox metrics history and E2B's metric answers (e2b_metrics.hpp).
#include "api/e2b_metrics.hpp"

#include <sys/stat.h>

#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace dsec::e2b {

namespace {

using nlohmann::json;

std::string iso_ms(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char frac[16];
  std::snprintf(frac, sizeof(frac), ".%03dZ", static_cast<int>(ms % 1000));
  return std::string{buf} + frac;
}

json metric_json(const metric_sample& s) {
  const auto& m = s.m;
  return json{{"timestamp", iso_ms(m.timestamp_ms)},
              {"timestampUnix", m.timestamp_ms / 1000},
              {"cpuCount", m.cpu_count},
              {"cpuUsedPct", m.cpu_used_pct},
              {"memUsed", m.mem_used},
              {"memTotal", m.mem_total},
              {"diskUsed", s.disk_used},
              {"diskTotal", s.disk_total}};
}

} // namespace

int64_t disk_bytes(const std::string& dir, size_t max_entries) {
  namespace fs = std::filesystem;
  struct stat top {};
  if (::lstat(dir.c_str(), &top) != 0)
    return 0;
  int64_t total = static_cast<int64_t>(top.st_blocks) * 512;
  std::error_code ec;
  fs::recursive_directory_iterator it{dir, fs::directory_options::skip_permission_denied, ec};
  size_t seen = 0;
  for (; !ec && it != fs::recursive_directory_iterator{} && seen < max_entries;
       it.increment(ec), ++seen) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0)
      continue;
    if (st.st_dev != top.st_dev) { // a mount below (the sandbox's root): not its disk
      it.disable_recursion_pending();
      continue;
    }
    total += static_cast<int64_t>(st.st_blocks) * 512;
  }
  return total;
}

void metrics_history::add(const std::string& id, const metric_sample& m) {
  std::lock_guard<std::mutex> g{m_};
  auto& q = samples_[id];
  // Samples arrive in time order but an on-demand one may race a tick.
  auto at = q.end();
  while (at != q.begin() && std::prev(at)->m.timestamp_ms > m.m.timestamp_ms)
    --at;
  q.insert(at, m);
  while (q.size() > max_samples)
    q.pop_front();
}

std::vector<metric_sample> metrics_history::range(const std::string& id,
                                                   std::optional<int64_t> from_ms,
                                                   std::optional<int64_t> to_ms) const {
  std::lock_guard<std::mutex> g{m_};
  std::vector<metric_sample> out;
  auto it = samples_.find(id);
  if (it == samples_.end())
    return out;
  for (auto& m : it->second)
    if ((!from_ms || m.m.timestamp_ms >= *from_ms) && (!to_ms || m.m.timestamp_ms <= *to_ms))
      out.push_back(m);
  return out;
}

std::optional<metric_sample> metrics_history::latest(const std::string& id) const {
  std::lock_guard<std::mutex> g{m_};
  auto it = samples_.find(id);
  if (it == samples_.end() || it->second.empty())
    return std::nullopt;
  return it->second.back();
}

bool metrics_history::claim(const std::string& id) {
  std::lock_guard<std::mutex> g{m_};
  return sampled_.insert(id).second;
}

void metrics_history::forget(const std::string& id) {
  std::lock_guard<std::mutex> g{m_};
  samples_.erase(id);
  sampled_.erase(id);
}

std::string encode_metric_list(const std::vector<metric_sample>& v) {
  json arr = json::array();
  for (auto& m : v)
    arr.push_back(metric_json(m));
  return arr.dump();
}

std::string encode_metric_map(const std::map<std::string, metric_sample>& m) {
  json obj = json::object();
  for (auto& [id, s] : m)
    obj[id] = metric_json(s);
  return json{{"sandboxes", obj}}.dump();
}

expected<std::vector<std::string>> parse_metric_ids(const std::map<std::string, std::string>& q) {
  for (auto& [k, v] : q)
    if (k != "sandbox_ids")
      return invalid_argument("sandbox metrics: query parameter " + k.substr(0, 64)
                              + " is not implemented by dsec (it takes sandbox_ids)");
  auto it = q.find("sandbox_ids");
  if (it == q.end() || it->second.empty())
    return invalid_argument("sandbox metrics: sandbox_ids (a comma list of sandbox ids) is "
                            "required");
  std::vector<std::string> ids;
  size_t pos = 0;
  const auto& s = it->second;
  while (pos <= s.size()) {
    auto comma = s.find(',', pos);
    if (comma == std::string::npos)
      comma = s.size();
    auto id = s.substr(pos, comma - pos);
    pos = comma + 1;
    if (id.empty())
      continue;
    if (ids.size() == 100)
      return invalid_argument("sandbox metrics: at most 100 sandbox_ids");
    ids.push_back(std::move(id));
  }
  if (ids.empty())
    return invalid_argument("sandbox metrics: sandbox_ids names no sandbox");
  return ids;
}

} // namespace dsec::e2b
