// E2B envd's terminal messages (process.Process with a pty; see
// e2b_codec.hpp): the size of a StartRequest's or UpdateRequest's pty, a
// SendInputRequest's pty bytes. Checked here for shape only; the size's
// range is the owner's check (actors/operations.hpp), one message for
// every door.
#include "api/e2b_codec.hpp"
#include "api/e2b_codec_detail.hpp"

namespace dsec::e2b {

namespace {

using json = nlohmann::json;

/// {"size": {"cols": N, "rows": N}} of a pty message, as ints (clamped to
/// a range that still fails the owner's check when out of it).
expected<std::pair<int32_t, int32_t>> size_of(const json& pty, const char* what) {
  auto size = pty.find("size");
  if (!pty.is_object() || size == pty.end() || !size->is_object())
    return invalid_argument(std::string(what) + ": pty.size {cols, rows} is required");
  auto field = [&](const char* k) -> int32_t {
    auto v = size->find(k);
    if (v == size->end() || !v->is_number_integer())
      return -1; // protobuf JSON omits zero: a missing size is 0, refused by the owner
    auto n = v->get<int64_t>();
    return n < 0 ? -1 : n > 100000 ? 100000 : int32_t(n);
  };
  return std::make_pair(field("cols"), field("rows"));
}

} // namespace

expected<std::pair<int32_t, int32_t>> parse_start_pty(std::string_view body) {
  auto j = detail::parse_object(body, "process start");
  if (!j)
    return j.err();
  return size_of((*j)["pty"], "process start");
}

expected<std::tuple<int32_t, int32_t, int32_t>> parse_update(std::string_view body) {
  auto pid = parse_selector(body);
  if (!pid)
    return pid.err();
  auto j = detail::parse_object(body, "process update");
  if (!j)
    return j.err();
  auto pty = j->find("pty");
  if (pty == j->end() || pty->is_null())
    return invalid_argument("process update: only a pty's size can change (pty.size)");
  auto size = size_of(*pty, "process update");
  if (!size)
    return size.err();
  return std::make_tuple(*pid, size->first, size->second);
}

expected<std::optional<std::pair<int32_t, std::string>>> parse_pty_input(std::string_view body) {
  auto j = detail::parse_object(body, "send input");
  if (!j)
    return j.err();
  auto in = j->find("input");
  if (in == j->end() || !in->is_object() || !in->contains("pty"))
    return std::optional<std::pair<int32_t, std::string>>{};
  auto pid = parse_selector(body);
  if (!pid)
    return pid.err();
  auto& p = (*in)["pty"];
  if (!p.is_string())
    return invalid_argument("send input: input.pty must be base64 bytes");
  auto data = unbase64(p.get<std::string>());
  if (!data)
    return data.err();
  return std::optional<std::pair<int32_t, std::string>>{std::make_pair(*pid, std::move(*data))};
}

std::string pty_data_event(std::string_view bytes) {
  return json{{"event", {{"data", {{"pty", base64(bytes)}}}}}}.dump();
}

} // namespace dsec::e2b
