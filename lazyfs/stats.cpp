// The daemon's stats file and its Prometheus rendering (see stats.hpp).
#include "lazyfs/stats.hpp"

#include <nlohmann/json.hpp>

#include "sys/fs.hpp"

namespace dsec::lazyfs {

namespace {

using json = nlohmann::json;

template <class T>
T field(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_number() ? it->get<T>() : T{};
}

} // namespace

status write_stats(const std::string& path, const daemon_stats& s) {
  json j = {{"hits", s.cache.hits},
            {"misses", s.cache.misses},
            {"chunks_fetched", s.cache.chunks_fetched},
            {"range_requests", s.cache.range_requests},
            {"fetch_us", s.cache.fetch_us},
            {"bytes_fetched", s.cache.bytes_fetched},
            {"evictions", s.cache.evictions},
            {"read_errors", s.cache.read_errors},
            {"verify_failures", s.cache.verify_failures},
            {"cache_bytes", s.cache.cache_bytes},
            {"cache_chunks", s.cache.cache_chunks},
            {"budget_bytes", s.budget_bytes},
            {"storage_reads", s.storage_reads},
            {"open_files", s.open_files},
            {"pid", s.pid},
            {"updated_ms", s.updated_ms}};
  // The counters are cheap to lose in a host crash (they restart at zero
  // with the daemon anyway): no fsync.
  return sys::write_file_atomic(path, j.dump() + "\n", 0644, sys::durability::process_crash);
}

expected<daemon_stats> read_stats(const std::string& path) {
  if (!sys::exists(path))
    return not_found("lazy blob daemon stats " + path + ": none (no daemon has run)");
  auto text = sys::read_file(path);
  if (!text)
    return text.err();
  auto j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("lazy blob daemon stats " + path + ": not a JSON object");
  daemon_stats s;
  s.cache.hits = field<uint64_t>(j, "hits");
  s.cache.misses = field<uint64_t>(j, "misses");
  s.cache.chunks_fetched = field<uint64_t>(j, "chunks_fetched");
  s.cache.range_requests = field<uint64_t>(j, "range_requests");
  s.cache.fetch_us = field<uint64_t>(j, "fetch_us");
  s.cache.bytes_fetched = field<uint64_t>(j, "bytes_fetched");
  s.cache.evictions = field<uint64_t>(j, "evictions");
  s.cache.read_errors = field<uint64_t>(j, "read_errors");
  s.cache.verify_failures = field<uint64_t>(j, "verify_failures");
  s.cache.cache_bytes = field<uint64_t>(j, "cache_bytes");
  s.cache.cache_chunks = field<uint64_t>(j, "cache_chunks");
  s.budget_bytes = field<uint64_t>(j, "budget_bytes");
  s.storage_reads = field<uint64_t>(j, "storage_reads");
  s.open_files = field<int64_t>(j, "open_files");
  s.pid = field<int64_t>(j, "pid");
  s.updated_ms = field<int64_t>(j, "updated_ms");
  return s;
}

std::string metrics_text(const daemon_stats& s, const std::string& node) {
  std::string out;
  auto add = [&](const char* name, const char* type, const char* help, uint64_t v) {
    out += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    out += std::string{name} + "{node=\"" + node + "\"} " + std::to_string(v) + "\n";
  };
  add("dsec_lazy_bytes_fetched_total", "counter",
      "Bytes of lazy layer data fetched from registries by range requests.",
      s.cache.bytes_fetched);
  add("dsec_lazy_chunks_fetched_total", "counter",
      "Chunks of lazy layer data fetched and verified.", s.cache.chunks_fetched);
  add("dsec_lazy_range_requests_total", "counter",
      "Range requests made for lazy layer data (a stretch of chunks is one).",
      s.cache.range_requests);
  out += "# HELP dsec_lazy_fetch_seconds_total Time spent in range requests for lazy layer data.\n"
         "# TYPE dsec_lazy_fetch_seconds_total counter\n"
         "dsec_lazy_fetch_seconds_total{node=\"" + node + "\"} "
         + std::to_string(double(s.cache.fetch_us) / 1e6) + "\n";
  add("dsec_lazy_storage_reads_total", "counter",
      "Range requests sent straight to blob storage, past a registry's redirect.",
      s.storage_reads);
  add("dsec_lazy_cache_hits_total", "counter", "Chunk reads served from the local chunk cache.",
      s.cache.hits);
  add("dsec_lazy_cache_misses_total", "counter", "Chunk reads the chunk cache did not hold.",
      s.cache.misses);
  add("dsec_lazy_read_errors_total", "counter",
      "Lazy reads that failed after bounded retries (the reader got EIO).", s.cache.read_errors);
  add("dsec_lazy_verify_failures_total", "counter",
      "Fetched chunks refused: wrong length or digest.", s.cache.verify_failures);
  add("dsec_lazy_evictions_total", "counter", "Chunks evicted to stay under --chunk-cache-mb.",
      s.cache.evictions);
  add("dsec_lazy_cache_bytes", "gauge", "Bytes in the chunk cache.", s.cache.cache_bytes);
  add("dsec_lazy_cache_budget_bytes", "gauge", "The chunk cache's budget (--chunk-cache-mb).",
      s.budget_bytes);
  add("dsec_lazy_open_blobs", "gauge", "Lazy data blobs open (one per mounted lazy layer).",
      uint64_t(s.open_files < 0 ? 0 : s.open_files));
  return out;
}

} // namespace dsec::lazyfs
