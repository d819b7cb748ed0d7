// Id generation and validation.
#include "core/ids.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>

namespace dsec {

namespace {

constexpr char alphabet[] = "0123456789abcdefghijklmnopqrstuv"; // base32, lower case

bool is_alnum_lower(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

uint64_t random64() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

void append_base32(std::string& out, uint64_t v, int digits) {
  for (int i = digits - 1; i >= 0; --i)
    out += alphabet[(v >> (5 * i)) & 31];
}

} // namespace

bool valid_node_id(std::string_view id) {
  if (id.empty() || id.size() > 32 || !is_alnum_lower(id[0]))
    return false;
  for (char c : id)
    if (!is_alnum_lower(c) && c != '-')
      return false;
  return true;
}

std::string make_node_id() {
  std::string id = "n-";
  append_base32(id, random64(), 6);
  return id;
}

std::string make_sandbox_id(std::string_view node_id) {
  static std::atomic<uint64_t> counter{0};
  using namespace std::chrono;
  auto ms = static_cast<uint64_t>(
    duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
  std::string id{node_id};
  id += '.';
  append_base32(id, ms, 9);                        // time-ordered prefix
  append_base32(id, counter.fetch_add(1) & 0x3ff, 2);
  append_base32(id, random64(), 5);                // unguessable suffix
  return id;
}

bool valid_sandbox_id(std::string_view id) {
  auto dot = id.find('.');
  if (dot == std::string_view::npos || !valid_node_id(id.substr(0, dot)))
    return false;
  auto rest = id.substr(dot + 1);
  if (rest.empty() || rest.size() > 32)
    return false;
  for (char c : rest)
    if (!is_alnum_lower(c))
      return false;
  return true;
}

std::string_view owner_of(std::string_view sandbox_id) {
  return sandbox_id.substr(0, sandbox_id.find('.'));
}

} // namespace dsec
