// Placement scoring and ordering: table-driven, no actors.
#include <catch2/catch.hpp>

#include "policy/placement_policy.hpp"

using namespace dsec;

namespace {

member_info node(std::string id, int64_t free_mb, double cpu, std::vector<std::string> layers = {},
                 std::string state = "alive", bool accepting = true) {
  member_info m;
  m.id = std::move(id);
  m.address = "127.0.0.1:1";
  m.state = std::move(state);
  m.free_memory_mb = free_mb;
  m.cpu_load = cpu;
  m.layers = std::move(layers);
  m.accepting = accepting;
  return m;
}

sandbox_spec spec(std::vector<std::string> layers = {"base/python@3.11"}, int64_t mem = 512) {
  sandbox_spec s;
  s.layers = std::move(layers);
  s.memory_mb = mem;
  return s;
}

} // namespace

TEST_CASE("score: locality, memory, cpu and in-flight creates each count", "[placement]") {
  auto s = spec();
  auto base = placement::score(node("a", 8000, 0.5), s, 0, false, 8000);
  CHECK(placement::score(node("a", 8000, 0.5, {"base/python@3.11"}), s, 0, false, 8000) > base + 0.49);
  CHECK(placement::score(node("a", 4000, 0.5), s, 0, false, 8000) < base);
  CHECK(placement::score(node("a", 8000, 0.9), s, 0, false, 8000) < base);
  CHECK(placement::score(node("a", 8000, 0.5), s, 16, false, 8000) < base - 0.4);
  auto busy = node("a", 8000, 0.5);
  busy.sandboxes = 16;
  CHECK(placement::score(busy, s, 0, false, 8000) < base - 0.4);
  // One create already sent here outweighs the local bonus: bursts spread.
  CHECK(placement::score(node("a", 8000, 0.5), s, 1, true, 8000) < base);
  CHECK(placement::score(node("a", 8000, 0.5), s, 0, true, 8000) > base);
  // Does not fit by its last report: below any node that does.
  // (nodes admit by measured memory: the need is its expected use, at least 32 MiB)
  CHECK(placement::score(node("a", 10, 0.0, {"base/python@3.11"}), s, 0, true, 8000)
        < placement::score(node("b", 600, 1.0), s, 100, false, 8000));
}

TEST_CASE("plan: only alive, accepting members; self always sampled", "[placement]") {
  std::mt19937_64 rng{7};
  std::vector<member_info> view = {node("self", 1000, 0.2), node("dead", 9000, 0, {}, "dead"),
                                   node("left", 9000, 0, {}, "left"),
                                   node("draining", 9000, 0, {}, "alive", false),
                                   node("suspect", 9000, 0, {}, "suspect")};
  auto order = placement::plan(view, "self", spec(), {}, {}, rng);
  REQUIRE(order == std::vector<std::string>{"self"});
  view.push_back(node("big", 16000, 0.1));
  for (int i = 0; i < 20; ++i) {
    order = placement::plan(view, "self", spec(), {}, {}, rng);
    REQUIRE(order.size() == 2);
    CHECK(order.front() == "big"); // sampled (k=3 covers both) and better
  }
}

TEST_CASE("plan: best of the sample first, then the rest, capped by the hop limit",
          "[placement]") {
  std::mt19937_64 rng{1};
  std::vector<member_info> view;
  for (int i = 0; i < 20; ++i)
    view.push_back(node("n" + std::to_string(i), 1000 + 100 * i, 0.5));
  placement::policy pol;
  pol.k = 3;
  pol.max_attempts = 8;
  auto order = placement::plan(view, "n0", spec(), {}, pol, rng);
  REQUIRE(order.size() == 8);
  // The first three are the sample (self among them), sorted by score.
  std::vector<std::string> sample(order.begin(), order.begin() + 3);
  CHECK(std::find(sample.begin(), sample.end(), "n0") != sample.end());
  // After the sample: the best of the rest, i.e. the biggest nodes not sampled.
  auto fourth = std::find_if(view.rbegin(), view.rend(), [&](auto& m) {
    return std::find(sample.begin(), sample.end(), m.id) == sample.end();
  });
  CHECK(order[3] == fourth->id);
}

TEST_CASE("plan: creates placed since the last report spread a burst", "[placement]") {
  std::mt19937_64 rng{3};
  std::vector<member_info> view = {node("a", 8000, 0.3), node("b", 8000, 0.3)};
  std::map<std::string, int64_t> placed = {{"a", 40}};
  auto order = placement::plan(view, "a", spec(), placed, {}, rng);
  REQUIRE(order.size() == 2);
  CHECK(order.front() == "b");
}

TEST_CASE("rendezvous: stable per key, spreads keys, skips dead members", "[placement]") {
  std::vector<member_info> view = {node("a", 1, 0), node("b", 1, 0), node("c", 1, 0)};
  auto first = placement::rendezvous(view, "job-1");
  REQUIRE(first.size() == 3);
  CHECK(placement::rendezvous(view, "job-1") == first);
  std::map<std::string, int> hits;
  for (int i = 0; i < 300; ++i)
    ++hits[placement::rendezvous(view, "k" + std::to_string(i)).front()];
  for (auto& [id, n] : hits)
    CHECK(n > 50);
  view[0].state = "dead";
  auto after = placement::rendezvous(view, "job-1");
  CHECK(after.size() == 2);
  CHECK(std::find(after.begin(), after.end(), "a") == after.end());
}
