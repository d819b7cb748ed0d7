// The text of shell session runs and the cut of their output (session.hpp).
#include "core/session.hpp"

#include <algorithm>
#include <random>

namespace dsec::session_text {

namespace {

/// The nonce's two halves, each single-quoted: the script never holds the
/// nonce in one piece.
std::string halves(std::string_view nonce) {
  auto mid = nonce.size() / 2;
  return quote(nonce.substr(0, mid)) + " " + quote(nonce.substr(mid));
}

std::string markers(std::string_view nonce, std::string_view status) {
  return "printf '%s%s:%d\\n' " + halves(nonce) + " " + std::string{status} + "; printf '%s%s\\n' "
         + halves(nonce) + " >&2\n";
}

/// Bytes kept past the cap so a marker (and its status) is still found.
size_t tail_keep(const std::string& marker) { return marker.size() + 16; }

} // namespace

std::string quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string new_nonce() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 2; ++i) {
    auto v = rng();
    for (int k = 0; k < 16; ++k, v >>= 4)
      out += hex[v & 15];
  }
  return out;
}

std::string open_script(std::string_view nonce) {
  // `break` from the INT trap leaves the run's one-pass loop (and any loop in
  // it), as Ctrl-C leaves a line in a terminal; outside a loop it is a no-op.
  // expand_aliases: a non-interactive bash ignores aliases without it; other
  // shells have no shopt and expand them anyway.
  return "trap 'break 1000 2>/dev/null' INT\n"
         "shopt -s expand_aliases 2>/dev/null\n"
         + markers(nonce, "0");
}

std::string run_script(std::string_view cmd, std::string_view nonce) {
  return "for _ in 1; do eval " + quote(cmd) + " </dev/null; done\n" + markers(nonce, "\"$?\"");
}

std::string check_cmd(std::string_view cmd) {
  if (cmd.size() > max_cmd)
    return "command is " + std::to_string(cmd.size()) + " bytes, over the limit of "
           + std::to_string(max_cmd);
  if (cmd.find('\0') != std::string_view::npos)
    return "command contains a NUL byte, which no shell word can hold";
  return {};
}

// -- marker_cut -----------------------------------------------------------------------

marker_cut::marker_cut(std::string nonce, bool with_status, size_t cap)
  : marker_(std::move(nonce) + (with_status ? ":" : "\n")), with_status_(with_status), cap_(cap) {
}

bool marker_cut::feed(std::string_view data) {
  if (done_) {
    rest_.append(data.data(), data.size());
    return true;
  }
  buf_.append(data.data(), data.size());
  find();
  if (!done_ && buf_.size() > cap_ + 2 * tail_keep(marker_)) {
    // Drop the middle: the first cap_ bytes are the answer, the tail is kept
    // only to find the marker.
    auto keep = tail_keep(marker_);
    buf_.erase(cap_, buf_.size() - keep - cap_);
    truncated_ = true;
    from_ = cap_;
  }
  return done_;
}

void marker_cut::find() {
  for (;;) {
    auto p = buf_.find(marker_, from_);
    if (p == std::string::npos) {
      auto keep = tail_keep(marker_);
      from_ = std::max(from_, buf_.size() > keep ? buf_.size() - keep : size_t{0});
      return;
    }
    auto end = p + marker_.size();
    if (with_status_) {
      auto nl = buf_.find('\n', end);
      if (nl == std::string::npos) {
        if (buf_.size() - end > 12) { // not our status: a look-alike, go on
          from_ = p + 1;
          continue;
        }
        from_ = p; // the status is still on its way
        return;
      }
      auto digits = buf_.substr(end, nl - end);
      if (digits.empty() || digits.size() > 10
          || digits.find_first_not_of("0123456789") != std::string::npos) {
        from_ = p + 1;
        continue;
      }
      status_ = std::stoi(digits);
      end = nl + 1;
    }
    rest_ = buf_.substr(end);
    buf_.resize(truncated_ ? std::min(p, cap_) : p);
    if (buf_.size() > cap_) {
      buf_.resize(cap_);
      truncated_ = true;
    }
    done_ = true;
    return;
  }
}

std::string marker_cut::take_output() {
  if (buf_.size() > cap_) {
    buf_.resize(cap_);
    truncated_ = true;
  }
  return std::move(buf_);
}

} // namespace dsec::session_text
