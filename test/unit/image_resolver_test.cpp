// The image resolver's single flight (registry/image_resolver.hpp) with its
// work replaced: concurrent creates of one image share one pull, each waits
// only until its own deadline, errors reach every waiter naming the image,
// and a failed or finished flight does not stick.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "registry/image_resolver.hpp"

using namespace dsec;
using namespace std::chrono_literals;
using registry::image_reference;
using registry::image_resolver;

namespace {

/// A gate the fake work waits at until the test opens it.
struct gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;

  void wait() {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return open; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(m);
    open = true;
    cv.notify_all();
  }
};

layer_info layer_for(const image_reference& ref) {
  layer_info l;
  l.ref = "img/" + ref.repository + "@1";
  l.digest = "sha256:" + std::string(64, 'a');
  return l;
}

auto in(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

} // namespace

TEST_CASE("concurrent resolves of one image share one work", "[resolver]") {
  std::atomic<int> calls{0};
  auto g = std::make_shared<gate>();
  image_resolver r([&, g](const image_reference& ref) -> expected<layer_info> {
    ++calls;
    g->wait();
    return layer_for(ref);
  });
  // Two spellings of one canonical reference.
  std::vector<std::future<expected<layer_info>>> waiters;
  for (int i = 0; i < 8; ++i)
    waiters.push_back(std::async(std::launch::async, [&r, i] {
      return r.resolve(i % 2 ? "localhost:5000/team/py" : "localhost:5000/team/py:latest",
                       in(10s));
    }));
  std::this_thread::sleep_for(200ms); // every waiter is in by now
  g->release();
  for (auto& w : waiters) {
    auto got = w.get();
    REQUIRE(got.ok());
    CHECK(got->ref == "img/team/py@1");
  }
  CHECK(calls == 1);
  // Finished flights are not kept: the next resolve runs the work again
  // (the real work then answers from images.json without a registry call).
  CHECK(r.resolve("localhost:5000/team/py", in(10s)).ok());
  CHECK(calls == 2);
}

TEST_CASE("each waiter waits until its own deadline; the work goes on", "[resolver]") {
  std::atomic<int> calls{0};
  auto g = std::make_shared<gate>();
  std::atomic<bool> finished{false};
  image_resolver r([&, g](const image_reference& ref) -> expected<layer_info> {
    ++calls;
    g->wait();
    finished = true;
    return layer_for(ref);
  });
  auto patient = std::async(std::launch::async,
                            [&r] { return r.resolve("127.0.0.1:5000/slow:1", in(20s)); });
  auto t0 = std::chrono::steady_clock::now();
  auto hasty = r.resolve("127.0.0.1:5000/slow:1", in(100ms));
  auto waited = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(hasty.ok());
  CHECK(hasty.err().code == errc::timeout);
  CHECK(hasty.err().message.find("127.0.0.1:5000/slow:1") != std::string::npos);
  CHECK(waited >= 100ms);
  CHECK(waited < 5s);
  CHECK_FALSE(finished);
  g->release();
  auto late = patient.get();
  REQUIRE(late.ok());
  CHECK(late->ref == "img/slow@1");
  CHECK(calls == 1);
}

TEST_CASE("a deadline already past answers timeout at once", "[resolver]") {
  auto g = std::make_shared<gate>();
  image_resolver r([g](const image_reference& ref) -> expected<layer_info> {
    g->wait();
    return layer_for(ref);
  });
  auto got = r.resolve("127.0.0.1:5000/x:1", std::chrono::steady_clock::now());
  REQUIRE_FALSE(got.ok());
  CHECK(got.err().code == errc::timeout);
  g->release(); // the detached work ends on its own
}

TEST_CASE("an error reaches every waiter naming the image, and is not kept", "[resolver]") {
  std::atomic<int> calls{0};
  auto g = std::make_shared<gate>();
  image_resolver r([&, g](const image_reference&) -> expected<layer_info> {
    if (++calls == 1)
      g->wait();
    return unavailable("registry 127.0.0.1:5000: connection refused");
  });
  std::vector<std::future<expected<layer_info>>> waiters;
  for (int i = 0; i < 4; ++i)
    waiters.push_back(std::async(std::launch::async, [&r] {
      return r.resolve("127.0.0.1:5000/team/gone:2", in(10s));
    }));
  std::this_thread::sleep_for(200ms);
  g->release();
  for (auto& w : waiters) {
    auto got = w.get();
    REQUIRE_FALSE(got.ok());
    CHECK(got.err().code == errc::unavailable); // a 503, as the registry's
    CHECK(got.err().message.find("image 127.0.0.1:5000/team/gone:2") != std::string::npos);
    CHECK(got.err().message.find("connection refused") != std::string::npos);
  }
  CHECK(calls == 1);
  // The next create tries again (the registry may be back).
  CHECK_FALSE(r.resolve("127.0.0.1:5000/team/gone:2", in(10s)).ok());
  CHECK(calls == 2);
}

TEST_CASE("the codes of the work are kept: unknown image stays not_found", "[resolver]") {
  image_resolver r([](const image_reference& ref) -> expected<layer_info> {
    return not_found("manifest " + ref.str() + " unknown");
  });
  auto got = r.resolve("127.0.0.1:5000/team/py:nope", in(10s));
  REQUIRE_FALSE(got.ok());
  CHECK(got.err().code == errc::not_found);
  // The message named the reference already: not named twice.
  CHECK(got.err().message == "manifest 127.0.0.1:5000/team/py:nope unknown");
}

TEST_CASE("different images do not wait for each other", "[resolver]") {
  auto g = std::make_shared<gate>();
  image_resolver r([g](const image_reference& ref) -> expected<layer_info> {
    if (ref.repository == "slow")
      g->wait();
    return layer_for(ref);
  });
  auto slow = std::async(std::launch::async,
                         [&r] { return r.resolve("127.0.0.1:5000/slow:1", in(20s)); });
  auto quick = r.resolve("127.0.0.1:5000/quick:1", in(5s));
  REQUIRE(quick.ok());
  CHECK(quick->ref == "img/quick@1");
  g->release();
  CHECK(slow.get().ok());
}

TEST_CASE("a reference that does not parse is refused without work", "[resolver]") {
  std::atomic<int> calls{0};
  image_resolver r([&](const image_reference& ref) -> expected<layer_info> {
    ++calls;
    return layer_for(ref);
  });
  auto got = r.resolve("Not A Reference", in(1s));
  REQUIRE_FALSE(got.ok());
  CHECK(got.err().code == errc::invalid_argument);
  CHECK(got.err().message.find("Not A Reference") != std::string::npos);
  CHECK(calls == 0);
}

TEST_CASE("stop wakes every waiter with unavailable and refuses new resolves", "[resolver]") {
  auto g = std::make_shared<gate>();
  image_resolver r([g](const image_reference& ref) -> expected<layer_info> {
    g->wait();
    return layer_for(ref);
  });
  auto waiter = std::async(std::launch::async,
                           [&r] { return r.resolve("127.0.0.1:5000/big:1", in(60s)); });
  std::this_thread::sleep_for(100ms);
  auto t0 = std::chrono::steady_clock::now();
  r.stop();
  auto got = waiter.get();
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  REQUIRE_FALSE(got.ok());
  CHECK(got.err().code == errc::unavailable);
  CHECK(got.err().message.find("127.0.0.1:5000/big:1") != std::string::npos);
  auto later = r.resolve("127.0.0.1:5000/other:1", in(60s));
  REQUIRE_FALSE(later.ok());
  CHECK(later.err().code == errc::unavailable);
  g->release();
}
