// Deterministic actor tests of the image-fetch actor on CAF's test
// coordinator, over a real (empty) layer store in a temp dir, with its file
// work on a pool the test drives. The front door is a stand-in that answers
// the gossip view. Transfers between peers need sockets and run in
// test/e2e/test_layer_fetch.py.
#include <catch2/catch.hpp>

#include <optional>

#include <caf/all.hpp>

#include "actors/atoms.hpp"
#include "actors/caf_error.hpp"
#include "actors/image_fetch.hpp"
#include "core/inspect.hpp"
#include "sys/fs.hpp"
#include "test/actor/test_system.hpp"

using namespace dsec;

namespace {

/// The front door, as far as image fetch asks it: the view is this node alone
/// (plus `others`), and every question is counted.
caf::behavior fake_front(caf::event_based_actor*, std::shared_ptr<int> asked,
                         std::vector<member_info> others) {
  return {
    [asked, others](nodes_atom) {
      ++*asked;
      member_info me;
      me.id = "n-a";
      me.state = "alive";
      auto view = others;
      view.insert(view.begin(), me);
      return view;
    },
  };
}

struct fixture : test::coordinated_system {
  node_context_ptr ctx = std::make_shared<node_context>();
  std::shared_ptr<sys::worker_pool> io = std::make_shared<sys::worker_pool>(0);
  std::shared_ptr<int> asked = std::make_shared<int>(0);
  image_fetch_actor fetch;

  explicit fixture(std::vector<member_info> others = {}) {
    ctx->config.node_id = "n-a";
    char tmpl[] = "/tmp/dsec-fetch-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    ctx->config.store_dir = tmpl;
    fetch = spawn_image_fetch(*sys, ctx, io);
    auto front = caf::actor_cast<placement_actor>(sys->spawn(fake_front, asked, others));
    caf::anon_send(fetch, nodes_atom::value, front);
    drive();
  }

  ~fixture() {
    caf::anon_send_exit(fetch, caf::exit_reason::user_shutdown);
    drive();
    (void)sys::remove_tree(ctx->config.store_dir);
  }

  void drive() {
    for (;;) {
      auto n = sched->run() + io->run_pending();
      if (n == 0)
        return;
    }
  }

  template <class T, class... Ts>
  expected<T> ask(Ts... xs) {
    auto out = test::send_only<T>(*sys, fetch, xs...);
    drive();
    REQUIRE(out->has_value());
    return std::move(**out);
  }
};

} // namespace

TEST_CASE_METHOD(fixture, "a malformed ref fails before the store or the cluster is asked",
                 "[actor][image_fetch]") {
  auto r = ask<layer_info>(fetch_atom::value, std::string{"no-version"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::invalid_argument);
  CHECK(*asked == 0);
}

TEST_CASE_METHOD(fixture, "a layer nobody holds is not found, naming the store and the peers asked",
                 "[actor][image_fetch]") {
  auto r = ask<layer_info>(fetch_atom::value, std::string{"base/missing@1"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.err().code == errc::not_found);
  CHECK(r.err().message.find("layer base/missing@1 not found in store") != std::string::npos);
  CHECK(r.err().message.find("0 other alive nodes") != std::string::npos);
  CHECK(*asked == 1);
}

TEST_CASE_METHOD(fixture, "concurrent fetches of one ref share one job", "[actor][image_fetch]") {
  auto outs = std::make_shared<std::vector<expected<layer_info>>>();
  auto dest = fetch;
  for (int i = 0; i < 3; ++i)
    sys->spawn([=](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, fetch_atom::value, std::string{"base/missing@2"})
        .then([=](layer_info& x) { outs->emplace_back(std::move(x)); },
              [=](caf::error& e) { outs->emplace_back(from_caf(e)); });
    });
  drive();
  REQUIRE(outs->size() == 3);
  for (auto& r : *outs)
    CHECK(r.err().code == errc::not_found);
  CHECK(*asked == 1); // one job asked the cluster once
}

TEST_CASE_METHOD(fixture, "a peer asking for what this node lacks gets not_found",
                 "[actor][image_fetch]") {
  auto held = ask<layer_info>(info_atom::value, std::string{"base/missing@1"});
  REQUIRE_FALSE(held.ok());
  CHECK(held.err().code == errc::not_found);
  auto chunk = ask<std::string>(blob_atom::value, std::string(64, 'a'), uint64_t{0},
                                uint32_t{1024});
  REQUIRE_FALSE(chunk.ok());
}
