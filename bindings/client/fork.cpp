// The native client's fork hooks and generation counter (see fork.hpp).
#include "bindings/client/fork.hpp"

#include <pthread.h>

#include <atomic>

#include "bindings/client/native_client.hpp"

namespace dsec::client {

namespace {

std::atomic<uint64_t> generation{0};
fork::hooks installed{};
std::atomic<bool> is_installed{false};

void prepare() { installed.lock(); }
void parent() { installed.unlock(); }

void child() {
  generation.fetch_add(1, std::memory_order_acq_rel);
  installed.reset_child();
  installed.unlock();
}

} // namespace

uint64_t fork_generation() { return generation.load(std::memory_order_acquire); }

bool fork::install(hooks h) {
  if (is_installed.load())
    return true;
  installed = h;
  if (::pthread_atfork(prepare, parent, child) != 0)
    return false; // ENOMEM, the only failure; the caller refuses to make a runtime
  is_installed.store(true);
  return true;
}

} // namespace dsec::client
