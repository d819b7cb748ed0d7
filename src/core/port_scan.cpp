// Port-scan detection over a sandbox's network denials (see port_scan.hpp).
#include "core/port_scan.hpp"

namespace dsec {

namespace {

/// The event's text, with the totals as they stand.
std::string event_text(const port_scan_watch& w, int64_t attempts) {
  auto n = std::to_string(w.targets.size());
  if (w.targets.size() >= port_scan_max_targets)
    n += "+";
  return "net port-scan: " + std::to_string(attempts) + " denied attempts to " + n
         + " distinct targets";
}

} // namespace

bool observe_port_scan(port_scan_watch& w, denial_counts& d) {
  for (auto& r : d.recent)
    if (r.rfind("net ", 0) == 0 && w.targets.size() < port_scan_max_targets)
      w.targets.insert(r);
  bool raised = false;
  if (!w.reported && d.network >= port_scan_denials && w.targets.size() >= port_scan_targets) {
    w.reported = true;
    raised = true;
    ++port_scans_total();
  }
  if (w.reported) {
    d.recent.insert(d.recent.begin(), event_text(w, d.network));
    if (d.recent.size() > 16)
      d.recent.erase(d.recent.begin() + 1);
  }
  return raised;
}

std::atomic<uint64_t>& port_scans_total() {
  static std::atomic<uint64_t> n{0};
  return n;
}

} // namespace dsec
