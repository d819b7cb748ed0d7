// Placement scoring and ordering (see placement_policy.hpp).
#include "policy/placement_policy.hpp"

#include <algorithm>
#include <functional>
#include <set>

#include "policy/reclaim_policy.hpp"

namespace dsec::placement {

namespace {

bool candidate(const member_info& m) { return m.state == "alive" && m.accepting; }

double clamp01(double x) { return x < 0 ? 0 : (x > 1 ? 1 : x); }

/// What the sandbox is expected to use on a node that has measured nothing
/// of it yet (the peer's mean resident does not travel in the gossip).
int64_t need_mb(const sandbox_spec& spec) { return reclaim::expected_need_mb(spec.memory_mb, 0); }

} // namespace

double score(const member_info& m, const sandbox_spec& spec, int64_t placed, bool local,
             int64_t best_free_mb) {
  double locality = 0;
  if (!spec.layers.empty()) {
    std::set<std::string> held(m.layers.begin(), m.layers.end());
    size_t hit = 0;
    for (auto& l : spec.layers)
      hit += held.count(l);
    locality = static_cast<double>(hit) / static_cast<double>(spec.layers.size());
  }
  // free_memory_mb is what the node's admission still gives new sandboxes
  // (reclaim::free_for_sandboxes_mb), and a sandbox needs what admission
  // expects it to use, not its limit (nodes admit by measured memory).
  int64_t free_after = m.free_memory_mb - need_mb(spec);
  double memory = best_free_mb > 0 ? clamp01(static_cast<double>(free_after) / best_free_mb) : 0;
  double cpu = 1 - clamp01(m.cpu_load);
  double spread = 1.0 / (1.0 + static_cast<double>(m.sandboxes + m.creating + placed) / 16.0);
  double s = 0.5 * locality + memory + cpu + spread + (local ? 0.05 : 0);
  if (free_after < 0)
    s -= 10; // does not fit by the last report: last resort only
  return s;
}

std::vector<std::string> plan(const std::vector<member_info>& view, const std::string& self_id,
                              const sandbox_spec& spec,
                              const std::map<std::string, int64_t>& placed, const policy& pol,
                              std::mt19937_64& rng) {
  std::vector<const member_info*> all, others;
  const member_info* self = nullptr;
  for (auto& m : view) {
    if (!candidate(m))
      continue;
    all.push_back(&m);
    if (m.id == self_id)
      self = &m;
    else
      others.push_back(&m);
  }
  if (all.empty())
    return {};
  // The sample: this node plus k-1 others at random (partial Fisher-Yates).
  size_t want = std::min(pol.k, all.size()) - (self ? 1 : 0);
  for (size_t i = 0; i < want && i < others.size(); ++i) {
    std::uniform_int_distribution<size_t> pick{i, others.size() - 1};
    std::swap(others[i], others[pick(rng)]);
  }
  std::vector<const member_info*> sample(others.begin(),
                                         others.begin() + std::min(want, others.size()));
  std::vector<const member_info*> rest(others.begin() + sample.size(), others.end());
  if (self)
    sample.push_back(self);
  int64_t best_free = best_free_after(all, spec);
  auto by_score = [&](const std::vector<const member_info*>& v) {
    return order_by_score(v, self_id, spec, placed, best_free);
  };
  auto order = by_score(sample);
  for (auto& id : by_score(rest))
    order.push_back(id);
  if (order.size() > pol.max_attempts)
    order.resize(pol.max_attempts);
  return order;
}

int64_t best_free_after(const std::vector<const member_info*>& candidates,
                        const sandbox_spec& spec) {
  int64_t best = 0;
  for (auto* m : candidates)
    best = std::max(best, m->free_memory_mb - need_mb(spec));
  return best;
}

std::vector<std::string> order_by_score(const std::vector<const member_info*>& ids,
                                        const std::string& self_id, const sandbox_spec& spec,
                                        const std::map<std::string, int64_t>& placed,
                                        int64_t best_free_mb) {
  std::vector<std::pair<double, const member_info*>> scored;
  scored.reserve(ids.size());
  for (auto* m : ids) {
    auto it = placed.find(m->id);
    scored.emplace_back(score(*m, spec, it == placed.end() ? 0 : it->second, m->id == self_id,
                              best_free_mb),
                        m);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  out.reserve(scored.size());
  for (auto& [s, m] : scored)
    out.push_back(m->id);
  return out;
}

std::vector<std::string> rendezvous(const std::vector<member_info>& view, const std::string& key) {
  std::vector<std::pair<size_t, std::string>> ranked;
  std::hash<std::string> h;
  for (auto& m : view)
    if (candidate(m))
      ranked.emplace_back(h(m.id + "\x1f" + key), m.id);
  std::sort(ranked.begin(), ranked.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> ids;
  for (auto& [w, id] : ranked)
    ids.push_back(id);
  return ids;
}

} // namespace dsec::placement
