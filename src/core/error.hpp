// The error vocabulary of dsec: one enum of codes that every layer (backends,
// layers, actors, gateway, bindings) speaks, plus a message that names the
// operation, the object and the cause ("mount overlay /x: EINVAL").
//
// Plain C++ on purpose: backends and layers use it without CAF. The actors turn
// an `error` into a caf::error (category "dsec") at their edge, the gateway
// into an HTTP status and `{"error":{"code","message"}}`, the Python bindings
// into an exception subclass, each in one function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace dsec {

/// Error codes. Wire values: append only, never renumber.
enum class errc : uint8_t {
  none = 0,
  /// The request itself is wrong: malformed JSON, wrong type, bad value.
  invalid_argument = 1,
  /// No such sandbox, layer or file.
  not_found = 2,
  /// The request contradicts current state (request_id reused with another spec).
  conflict = 3,
  /// A body or value exceeds a hard limit.
  too_large = 4,
  /// The node is out of memory, cpu or sandbox slots; retry later or elsewhere.
  resource_exhausted = 5,
  /// A peer, the sandbox's init or the node is gone or shutting down.
  unavailable = 6,
  /// The operation did not finish within its deadline.
  timeout = 7,
  /// A bug or a host failure that is not the caller's fault.
  internal = 8,
};

/// Stable lower-case name of a code ("invalid_argument"); the REST `code` field.
std::string_view to_string(errc code);

/// Parses a name produced by to_string; returns errc::internal for unknown names.
errc errc_from_string(std::string_view name);

/// An error: a code and a message naming operation, object and cause.
struct error {
  errc code = errc::none;
  std::string message;

  error() = default;
  error(errc c, std::string msg) : code(c), message(std::move(msg)) {}

  explicit operator bool() const { return code != errc::none; }
};

/// Builds "op obj: strerror(errno)" with code `internal` (or `c`).
error sys_error(std::string_view op, std::string_view obj, int err,
                errc c = errc::internal);

/// A value or an error, in the spirit of caf::expected without CAF.
template <class T>
class expected {
 public:
  expected(T value) : v_(std::move(value)) {}
  expected(error err) : v_(std::move(err)) {}

  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& operator*() { return std::get<0>(v_); }
  const T& operator*() const { return std::get<0>(v_); }
  T* operator->() { return &std::get<0>(v_); }
  const T* operator->() const { return &std::get<0>(v_); }
  T& value() { return std::get<0>(v_); }
  const error& err() const { return std::get<1>(v_); }

 private:
  std::variant<T, error> v_;
};

/// Success or an error, for operations without a value.
class status {
 public:
  status() = default;
  status(error err) : err_(std::move(err)) {}

  [[nodiscard]] bool ok() const { return !err_; }
  explicit operator bool() const { return ok(); }
  const error& err() const { return err_; }

 private:
  error err_;
};

/// Convenience constructors, named after the code.
inline error invalid_argument(std::string msg) { return {errc::invalid_argument, std::move(msg)}; }
inline error not_found(std::string msg) { return {errc::not_found, std::move(msg)}; }
inline error conflict(std::string msg) { return {errc::conflict, std::move(msg)}; }
inline error too_large(std::string msg) { return {errc::too_large, std::move(msg)}; }
inline error resource_exhausted(std::string msg) { return {errc::resource_exhausted, std::move(msg)}; }
inline error unavailable(std::string msg) { return {errc::unavailable, std::move(msg)}; }
inline error internal_error(std::string msg) { return {errc::internal, std::move(msg)}; }

} // namespace dsec
