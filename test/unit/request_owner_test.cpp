// The owner of a request_id (policy/request_owner.hpp): one node per key on
// both sides of a partition, refused while unreachable, moved only by a leave.
#include <catch2/catch.hpp>

#include "policy/placement_policy.hpp"
#include "policy/request_owner.hpp"

using namespace dsec;

namespace {

member_info member(std::string id, std::string state = "alive", bool accepting = true) {
  member_info m;
  m.id = std::move(id);
  m.address = "10.0.0.1:1";
  m.state = std::move(state);
  m.accepting = accepting;
  return m;
}

std::vector<member_info> five() {
  return {member("n1"), member("n2"), member("n3"), member("n4"), member("n5")};
}

} // namespace

TEST_CASE("request owner: the rendezvous winner while all are alive", "[request_owner]") {
  auto view = five();
  for (int i = 0; i < 50; ++i) {
    auto key = "k" + std::to_string(i);
    auto* o = placement::request_owner(view, key);
    REQUIRE(o);
    CHECK(o->id == placement::rendezvous(view, key).front());
    CHECK(placement::owner_unreachable(*o, key).empty());
  }
}

TEST_CASE("request owner: both sides of a partition name the same node", "[request_owner]") {
  // Side A (n1, n2) sees n3..n5 suspect or dead; side B sees the reverse.
  for (int i = 0; i < 100; ++i) {
    auto key = "job-" + std::to_string(i);
    auto a = five(), b = five();
    for (int j = 2; j < 5; ++j)
      a[j].state = j % 2 ? "dead" : "suspect";
    for (int j = 0; j < 2; ++j)
      b[j].state = "dead";
    auto* oa = placement::request_owner(a, key);
    auto* ob = placement::request_owner(b, key);
    REQUIRE((oa && ob));
    CHECK(oa->id == ob->id);
    // Exactly one side reaches it; the other refuses naming it.
    bool a_ok = placement::owner_unreachable(*oa, key).empty();
    bool b_ok = placement::owner_unreachable(*ob, key).empty();
    CHECK(a_ok != b_ok);
    auto why = placement::owner_unreachable(a_ok ? *ob : *oa, key);
    CHECK(why.find("node " + oa->id) != std::string::npos);
    CHECK(why.find("unreachable") != std::string::npos);
    CHECK(why.find(key) != std::string::npos);
  }
}

TEST_CASE("request owner: a left or draining member hands its keys on", "[request_owner]") {
  auto view = five();
  std::string key = "k-moves";
  auto owner = placement::request_owner(view, key)->id;
  for (auto& m : view)
    if (m.id == owner)
      m.state = "left";
  auto* next = placement::request_owner(view, key);
  REQUIRE(next);
  CHECK(next->id != owner);
  CHECK(next->id == placement::rendezvous(view, key).front());
  for (auto& m : view)
    if (m.id == owner) {
      m.state = "alive";
      m.accepting = false;
    }
  CHECK(placement::request_owner(view, key)->id == next->id);
  CHECK(placement::request_owner({}, key) == nullptr);
}
