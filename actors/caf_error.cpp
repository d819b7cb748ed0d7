// Conversions between dsec::error and caf::error.
#include "actors/caf_error.hpp"

#include <caf/atom.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace dsec {

caf::atom_value dsec_error_category() { return caf::atom("dsec"); }

caf::error to_caf(const error& err) {
  return caf::error{static_cast<uint8_t>(err.code), dsec_error_category(),
                    caf::make_message(err.message)};
}

error from_caf(const caf::error& err) {
  if (!err)
    return {};
  if (err.category() == dsec_error_category()) {
    std::string msg;
    auto& ctx = err.context();
    if (ctx.size() == 1 && ctx.match_element<std::string>(0))
      msg = ctx.get_as<std::string>(0);
    return {static_cast<errc>(err.code()), std::move(msg)};
  }
  if (err.category() == caf::atom("system")) {
    auto code = static_cast<caf::sec>(err.code());
    if (code == caf::sec::request_timeout)
      return {errc::timeout, "request timed out"};
    return {errc::unavailable, "actor system: " + caf::to_string(code)};
  }
  return {errc::internal, "unexpected error category " + caf::to_string(err.category())};
}

} // namespace dsec
