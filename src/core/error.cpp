// Names of error codes and the errno formatting helper.
#include "core/error.hpp"

#include <cstring>

namespace dsec {

namespace {

constexpr std::string_view names[] = {
  "none",          "invalid_argument", "not_found", "conflict", "too_large",
  "resource_exhausted", "unavailable", "timeout",  "internal",
};

} // namespace

std::string_view to_string(errc code) {
  auto i = static_cast<size_t>(code);
  return i < std::size(names) ? names[i] : "internal";
}

errc errc_from_string(std::string_view name) {
  for (size_t i = 0; i < std::size(names); ++i)
    if (names[i] == name)
      return static_cast<errc>(i);
  return errc::internal;
}

error sys_error(std::string_view op, std::string_view obj, int err, errc c) {
  std::string msg;
  msg.reserve(op.size() + obj.size() + 32);
  msg.append(op);
  if (!obj.empty()) {
    msg += ' ';
    msg.append(obj);
  }
  msg += ": ";
  msg += strerrorname_np(err) ? strerrorname_np(err) : "E?";
  msg += " (";
  msg += std::strerror(err);
  msg += ')';
  return {c, std::move(msg)};
}

} // namespace dsec
