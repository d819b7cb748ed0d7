// Job-level operations: merging node outcomes, the selector check (job.hpp).
#include "core/job.hpp"

#include <algorithm>
#include <iterator>

namespace dsec {

void merge(job_result& into, job_result part) {
  into.done.insert(into.done.end(), std::make_move_iterator(part.done.begin()),
                   std::make_move_iterator(part.done.end()));
  std::sort(into.done.begin(), into.done.end());
  into.errors.insert(into.errors.end(), std::make_move_iterator(part.errors.begin()),
                     std::make_move_iterator(part.errors.end()));
  std::sort(into.errors.begin(), into.errors.end(), [](auto& a, auto& b) {
    return a.node != b.node ? a.node < b.node : a.id < b.id;
  });
}

status validate_job_labels(const std::map<std::string, std::string>& labels,
                           std::string_view op) {
  if (labels.empty())
    return invalid_argument(std::string{op}
                            + ": labels must name at least one label (e.g. {\"job\": \"grpo-7\"}); "
                              "an empty selector would act on every sandbox of the cluster");
  for (auto& [k, v] : labels)
    if (k.empty() || k.size() > 256 || v.size() > 4096)
      return invalid_argument(std::string{op}
                              + ": label keys must be 1-256 bytes and values at most 4096");
  return {};
}

bool labels_match(const std::map<std::string, std::string>& have,
                  const std::map<std::string, std::string>& want) {
  for (auto& [k, v] : want) {
    auto it = have.find(k);
    if (it == have.end() || it->second != v)
      return false;
  }
  return true;
}

} // namespace dsec
