// A valid spec with most fields away from their defaults, for the codec tests.
#pragma once

#include "core/types.hpp"

namespace dsec::test {

inline sandbox_spec full_spec() {
  sandbox_spec s;
  s.layers = {"base/python@3.11", "ws/django-15202@1"};
  s.cpu = 0.25;
  s.memory_mb = 768;
  s.disk_mb = 2048;
  s.pids = 64;
  s.ttl_s = 900;
  s.protect.readonly = {"/grader"};
  s.protect.hidden = {"/answers"};
  s.env = {{"PATH", "/usr/bin:/bin"}, {"LANG", "C.UTF-8"}};
  s.labels = {{"job", "grpo-7"}, {"step", "3"}};
  s.cpu_class = "batch";
  s.node = "n-1";
  s.request_id = "job-7-step-3";
  return s;
}

} // namespace dsec::test
