// The swap tier's pure pieces: its record's text form, /proc/crypto names,
// the sizing and the checks of its settings (swap_tier.hpp says why each).
#include <algorithm>
#include <sstream>

#include "sys/swap_tier.hpp"

namespace dsec::sys {

namespace {

const char* const zswap_compressors[] = {"deflate", "lzo", "lzo-rle", "lz4", "lz4hc", "zstd", "842"};

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (auto& s : v)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

} // namespace

std::string format_swap_tier_record(const swap_tier_record& r) {
  std::string out;
  if (!r.file.empty())
    out += "file " + r.file + "\nfile_bytes " + std::to_string(r.file_bytes) + "\nfile_ino "
           + std::to_string(r.file_ino) + "\n";
  if (r.zswap) {
    out += "zswap 1\n";
    auto put = [&](const char* which, const zswap_params& p) {
      out += std::string{which} + ".enabled " + p.enabled + "\n" + which + ".compressor "
             + p.compressor + "\n" + which + ".max_pool_percent " + p.max_pool_percent + "\n";
    };
    put("saved", r.saved);
    put("set", r.set);
  }
  for (auto& u : r.users)
    out += format_user_line(u);
  return out;
}

std::optional<swap_tier_record> parse_swap_tier_record(std::string_view text) {
  swap_tier_record r;
  std::istringstream in{std::string{text}};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l{line};
    std::string key;
    l >> key;
    auto param = [&](zswap_params& p, const std::string& name) {
      if (name == "enabled")
        l >> p.enabled;
      else if (name == "compressor")
        l >> p.compressor;
      else if (name == "max_pool_percent")
        l >> p.max_pool_percent;
    };
    if (key == "file")
      l >> r.file;
    else if (key == "file_bytes")
      l >> r.file_bytes;
    else if (key == "file_ino")
      l >> r.file_ino;
    else if (key == "zswap")
      r.zswap = true;
    else if (key.rfind("saved.", 0) == 0)
      param(r.saved, key.substr(6));
    else if (key.rfind("set.", 0) == 0)
      param(r.set, key.substr(4));
    else if (key == "user") {
      swap_tier_user u;
      if (read_user_fields(l, u))
        r.users.push_back(std::move(u));
    }
  }
  // Only an absolute path names a file of ours; zswap settings need every
  // saved value, or the last node out could not put them back.
  if (!r.file.empty() && (r.file[0] != '/' || r.file.find("/../") != std::string::npos))
    r.file.clear();
  if (r.zswap && (r.saved.enabled.empty() || r.saved.compressor.empty()
                  || r.saved.max_pool_percent.empty() || r.set.enabled.empty()))
    r.zswap = false;
  if (r.file.empty() && !r.zswap)
    return std::nullopt;
  return r;
}

std::vector<std::string> parse_crypto_names(std::string_view proc_crypto) {
  std::vector<std::string> out;
  std::istringstream in{std::string{proc_crypto}};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l{line};
    std::string key, colon, name;
    if (l >> key >> colon >> name && key == "name" && colon == ":"
        && std::find(out.begin(), out.end(), name) == out.end())
      out.push_back(name);
  }
  return out;
}

status parse_zswap_compressor(std::string_view name) {
  if (name == "off")
    return {};
  for (auto* c : zswap_compressors)
    if (name == c)
      return {};
  std::string all;
  for (auto* c : zswap_compressors)
    all += std::string{all.empty() ? "" : ", "} + c;
  return invalid_argument("--zswap-compressor " + std::string{name} + ": not a compressor zswap "
                          "can use (one of " + all + ", or off)");
}

status zswap_compressor_available(std::string_view name, std::string_view proc_crypto) {
  auto names = parse_crypto_names(proc_crypto);
  if (std::find(names.begin(), names.end(), name) != names.end())
    return {};
  std::vector<std::string> usable;
  for (auto* c : zswap_compressors)
    if (std::find(names.begin(), names.end(), c) != names.end())
      usable.push_back(c);
  return invalid_argument("--zswap-compressor " + std::string{name}
                          + ": this kernel's crypto API has no " + std::string{name}
                          + " (it has: " + (usable.empty() ? "none" : join(usable)) + ")");
}

int64_t default_swap_file_mb(int64_t ram_bytes, int64_t fs_free_bytes) {
  int64_t mb = std::min<int64_t>({(ram_bytes >> 20) / 4, (fs_free_bytes >> 20) / 10, 16384});
  return mb < 256 ? 0 : mb;
}

status check_swap_file_mb(int64_t mb, int64_t fs_free_bytes, const std::string& dir) {
  if (mb < 0)
    return invalid_argument("--swap-file-mb must be a whole number of MiB (0 = no swap file)");
  int64_t room = (fs_free_bytes >> 20) - 1024;
  if (mb > room)
    return invalid_argument("--swap-file-mb " + std::to_string(mb) + ": " + dir + " has "
                            + std::to_string(fs_free_bytes >> 20)
                            + " MiB free, and the swap file must leave 1024 MiB of it");
  return {};
}

status check_zswap_pool_percent(int64_t percent) {
  if (percent < 1 || percent > 90)
    return invalid_argument("--zswap-pool-percent " + std::to_string(percent)
                            + ": must be 1..90 (the share of RAM zswap's pool may take)");
  return {};
}

} // namespace dsec::sys
