// Ring placement (see placement_ring.hpp).
#include "policy/placement_ring.hpp"

#include <algorithm>

#include "policy/reclaim_policy.hpp"

namespace dsec::placement {

namespace {

bool candidate(const member_info& m) { return m.state == "alive" && m.accepting; }

int64_t placed_on(const std::map<std::string, int64_t>& placed, const std::string& id) {
  auto it = placed.find(id);
  return it == placed.end() ? 0 : it->second;
}

struct ring_entry {
  uint64_t key;
  const member_info* m;
};

std::vector<ring_entry> ring_of(const std::vector<member_info>& view) {
  std::vector<ring_entry> ring;
  ring.reserve(view.size());
  for (auto& m : view)
    if (candidate(m))
      ring.push_back({ring_key(m.id), &m});
  std::sort(ring.begin(), ring.end(), [](auto& a, auto& b) {
    return a.key != b.key ? a.key < b.key : a.m->id < b.m->id;
  });
  return ring;
}

} // namespace

uint64_t ring_key(const std::string& id) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<std::string> ring_order(const std::vector<member_info>& view) {
  std::vector<std::string> ids;
  for (auto& e : ring_of(view))
    ids.push_back(e.m->id);
  return ids;
}

std::vector<std::string> plan_ring(const std::vector<member_info>& view,
                                   const std::string& self_id, const sandbox_spec& spec,
                                   const std::map<std::string, int64_t>& placed,
                                   const policy& pol, ring_cursor& cursor) {
  auto ring = ring_of(view);
  if (ring.empty())
    return {};
  size_t n = ring.size();
  // This node's own position; a node that is not a candidate itself (it
  // drains) starts where its key would be.
  uint64_t self_key = ring_key(self_id);
  size_t self_pos = static_cast<size_t>(
    std::lower_bound(ring.begin(), ring.end(), self_key,
                     [&](const ring_entry& e, uint64_t k) {
                       return e.key != k ? e.key < k : e.m->id < self_id;
                     })
    - ring.begin());
  double total = 0;
  for (auto& e : ring)
    total += static_cast<double>(e.m->sandboxes + e.m->creating);
  double heavy = total / static_cast<double>(n) * (1 + pol.skip_over_mean)
                 + static_cast<double>(pol.skip_over_abs);
  int64_t need = reclaim::expected_need_mb(spec.memory_mb, 0);
  auto eligible = [&](const member_info& m) {
    auto load = m.sandboxes + m.creating + placed_on(placed, m.id);
    return m.free_memory_mb >= need && static_cast<double>(load) <= heavy;
  };
  // The cursor's member, or the first eligible one after it, then the next
  // eligible one (a refusal's retry).
  std::vector<const member_info*> picked;
  size_t first_step = 0;
  size_t start = static_cast<size_t>((self_pos + cursor.turn()) % n);
  for (size_t step = 0; step < n && picked.size() < 2; ++step) {
    auto* m = ring[(start + step) % n].m;
    if (!eligible(*m))
      continue;
    if (picked.empty())
      first_step = step;
    picked.push_back(m);
  }
  cursor.advance(first_step + 1);
  // Then the rest of the cluster by score (all of it if nothing qualified).
  std::vector<const member_info*> all, rest;
  for (auto& e : ring) {
    all.push_back(e.m);
    if (std::find(picked.begin(), picked.end(), e.m) == picked.end())
      rest.push_back(e.m);
  }
  std::vector<std::string> order;
  for (auto* m : picked)
    order.push_back(m->id);
  for (auto& id : order_by_score(rest, self_id, spec, placed, best_free_after(all, spec))) {
    if (order.size() >= pol.max_attempts)
      break;
    order.push_back(id);
  }
  if (order.size() > pol.max_attempts)
    order.resize(pol.max_attempts);
  return order;
}

std::vector<std::string> place(const std::vector<member_info>& view, const std::string& self_id,
                               const sandbox_spec& spec, const ledger& placed,
                               const policy& pol, ring_cursor& cursor, std::mt19937_64& rng) {
  if (pol.spread == policy::spread_mode::sample)
    return plan(view, self_id, spec, placed.counts(), pol, rng);
  return plan_ring(view, self_id, spec, placed.counts(), pol, cursor);
}

} // namespace dsec::placement
