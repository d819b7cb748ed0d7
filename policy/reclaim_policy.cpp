// Idle detection, reclaim order and memory admission (see reclaim_policy.hpp).
#include "policy/reclaim_policy.hpp"

#include <algorithm>
#include <sstream>

namespace dsec::reclaim {

std::vector<std::string> pick_samples(const std::map<std::string, tracked>& running,
                                      const tunables& tun) {
  std::vector<std::pair<int64_t, const std::string*>> by_age;
  by_age.reserve(running.size());
  for (auto& [id, t] : running)
    by_age.emplace_back(t.last_cpu_ns < 0 ? -1 : t.last_sample_ms, &id);
  size_t n = std::min(by_age.size(), tun.max_samples_per_pass);
  auto older = [](auto& a, auto& b) {
    return a.first != b.first ? a.first < b.first : *a.second < *b.second;
  };
  if (n < by_age.size())
    std::nth_element(by_age.begin(), by_age.begin() + static_cast<std::ptrdiff_t>(n),
                     by_age.end(), older);
  by_age.resize(n);
  std::sort(by_age.begin(), by_age.end(), older);
  std::vector<std::string> out;
  out.reserve(n);
  for (auto& [age, id] : by_age)
    out.push_back(*id);
  return out;
}

void observe(tracked& t, const usage_sample& s, int64_t now_ms, const tunables& tun) {
  bool first = t.last_cpu_ns < 0;
  if (!first) {
    int64_t elapsed_ns = std::max<int64_t>(0, now_ms - t.last_sample_ms) * 1000000;
    int64_t grew = s.cpu_ns - t.last_cpu_ns;
    bool busy = grew > static_cast<int64_t>(static_cast<double>(elapsed_ns) * tun.idle_cpu_share);
    if (busy) {
      t.idle_since_ms = 0;
      t.resident_after_reclaim = -1; // the next idle stretch may reclaim it again
    } else if (t.idle_since_ms == 0) {
      t.idle_since_ms = t.last_sample_ms; // quiet since the previous sample
    }
  }
  t.last_cpu_ns = s.cpu_ns;
  t.last_sample_ms = now_ms;
  t.resident_bytes = s.resident_bytes;
  t.swap_bytes = s.swap_bytes;
  if (t.resident_after_reclaim >= 0)
    t.resident_after_reclaim = std::min(t.resident_after_reclaim, s.resident_bytes);
}

bool is_idle(const tracked& t, int64_t now_ms, const tunables& tun) {
  return t.idle_since_ms > 0 && now_ms - t.idle_since_ms >= tun.idle_ms;
}

bool wants_reclaim(const tracked& t, int64_t now_ms, const tunables& tun) {
  if (!is_idle(t, now_ms, tun) || t.resident_bytes <= 0)
    return false;
  return t.resident_after_reclaim < 0
         || t.resident_bytes > t.resident_after_reclaim + tun.regrow_bytes;
}

void record_reclaim(tracked& t, int64_t freed) {
  freed = std::max<int64_t>(0, freed);
  t.reclaimed_bytes += freed;
  t.resident_after_reclaim = std::max<int64_t>(0, t.resident_bytes - freed);
  t.resident_bytes = t.resident_after_reclaim;
}

std::vector<std::string> pick(const std::map<std::string, tracked>& all, int64_t now_ms,
                              const tunables& tun, size_t max) {
  std::vector<std::pair<std::string, const tracked*>> c;
  for (auto& [id, t] : all)
    if (wants_reclaim(t, now_ms, tun))
      c.emplace_back(id, &t);
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) {
    if (a.second->resident_bytes != b.second->resident_bytes)
      return a.second->resident_bytes > b.second->resident_bytes;
    if (a.second->idle_since_ms != b.second->idle_since_ms)
      return a.second->idle_since_ms < b.second->idle_since_ms;
    return a.first < b.first;
  });
  std::vector<std::string> out;
  for (size_t i = 0; i < c.size() && i < max; ++i)
    out.push_back(c[i].first);
  return out;
}

int64_t reclaimable_bytes(const std::map<std::string, tracked>& all, int64_t now_ms,
                          const tunables& tun) {
  int64_t sum = 0;
  for (auto& [id, t] : all)
    if (wants_reclaim(t, now_ms, tun))
      sum += t.resident_bytes;
  return sum;
}

host_memory parse_meminfo(std::string_view text) {
  host_memory h;
  bool total = false, avail = false;
  std::istringstream in{std::string{text}};
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemTotal:")
      h.total_mb = kb / 1024, total = true;
    else if (key == "MemAvailable:")
      h.available_mb = kb / 1024, avail = true;
    else if (key == "SwapTotal:")
      h.swap_total_mb = kb / 1024;
    else if (key == "SwapFree:")
      h.swap_free_mb = kb / 1024;
  }
  h.known = total && avail;
  return h;
}

int64_t expected_need_mb(int64_t memory_mb, int64_t mean_resident_mb) {
  return std::min(memory_mb, std::max(need_floor_mb, mean_resident_mb));
}

admission decide(const admission_input& in, const admission_limits& lim) {
  admission a;
  if (!in.host.known) {
    // Nothing measured yet (the first sample is under way): sample first;
    // if sampling failed too, admit rather than refuse blind.
    a.v = in.reclaim_tried ? verdict::admit : verdict::reclaim_first;
    return a;
  }
  a.available_mb = in.host.available_mb - in.reserved_mb;
  if (lim.overcommit > 0) {
    a.cap_mb = static_cast<int64_t>(lim.overcommit
                                    * static_cast<double>(in.host.total_mb + in.host.swap_total_mb));
    if (in.committed_mb + in.memory_mb > a.cap_mb) {
      a.v = verdict::refuse_overcommit;
      return a;
    }
  }
  if (a.available_mb - lim.headroom_mb >= in.need_mb) {
    a.v = verdict::admit;
    return a;
  }
  a.v = in.reclaim_tried ? verdict::refuse_memory : verdict::reclaim_first;
  return a;
}

std::string refusal_message(const std::string& node, const admission_input& in,
                            const admission_limits& lim, const admission& a) {
  if (a.v == verdict::refuse_overcommit)
    return "create: node " + node + " has " + std::to_string(in.committed_mb)
           + " MiB of memory limits committed, a " + std::to_string(in.memory_mb)
           + " MiB sandbox would pass its overcommit cap of " + std::to_string(a.cap_mb)
           + " MiB memory; retry later or elsewhere";
  return "create: node " + node + " has " + std::to_string(std::max<int64_t>(0, a.available_mb))
         + " MiB of memory available" + (in.reclaim_tried ? " after reclaiming idle sandboxes" : "")
         + ", needs " + std::to_string(in.need_mb) + " MiB plus "
         + std::to_string(lim.headroom_mb) + " MiB headroom; retry later or elsewhere";
}

int64_t free_for_sandboxes_mb(const host_memory& host, int64_t reserved_mb,
                              const admission_limits& lim) {
  return std::max<int64_t>(0, host.available_mb - reserved_mb - lim.headroom_mb);
}

} // namespace dsec::reclaim
