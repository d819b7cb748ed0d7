// Job-level operations: one action over every sandbox of a job (the sandboxes
// whose labels include a selector, e.g. {"job": "grpo-7"}) in the whole
// cluster: POST /v1/sandboxes:pause and :resume, c.pause(labels=...), dsec
// pause --label. A preempted trainer pauses its job as one and resumes it
// when it comes back (actors/job_ops.hpp fans the action out).
//
// The answer lists the ids done and, per item, what failed; a whole node that
// failed is an item with its node and no id. Idempotent: a sandbox already in
// the state asked for counts as done.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace dsec {

/// One sandbox (or, with `id` empty, one node) a job action failed on.
struct job_item_error {
  std::string id;
  std::string node;
  errc code = errc::internal;
  std::string message;
};

/// The outcome of a job action.
struct job_result {
  /// Ids now in the state asked for (sorted).
  std::vector<std::string> done;
  std::vector<job_item_error> errors;
};

/// Adds `part` (one node's outcome) to `into`; done stays sorted.
void merge(job_result& into, job_result part);

/// The selector of a job action: at least one label, so a call can never
/// act on every sandbox of the cluster by accident. `op` names the action in
/// the message ("pause job").
[[nodiscard]] status validate_job_labels(const std::map<std::string, std::string>& labels,
                                         std::string_view op);

/// True if `have` (a sandbox's labels) includes every entry of `want`.
[[nodiscard]] bool labels_match(const std::map<std::string, std::string>& have,
                                const std::map<std::string, std::string>& want);

namespace json_codec {

/// The body of POST /v1/sandboxes:pause|:resume: `{"labels": {"k": "v", ...}}`
/// with at least one label; anything else is an invalid_argument naming it.
expected<std::map<std::string, std::string>> parse_job(std::string_view body,
                                                       std::string_view op);

/// `{"action","labels","done":[ids],"count":N,"errors":[{"id","node","code",
/// "message","infra"}]}`.
std::string encode_job(std::string_view action, const std::map<std::string, std::string>& labels,
                       const job_result& r);

/// Reads encode_job() back (the CLI).
expected<job_result> decode_job(std::string_view body);

} // namespace json_codec

} // namespace dsec
