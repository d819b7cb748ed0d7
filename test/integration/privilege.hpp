// Whether a privileged integration test may run here, in one place. These
// tests need root (mounts, namespaces, cgroups). A developer without it gets
// a skip with the reason; CI (CI=true) runs as root on the machine kind the
// project targets, so there a missing privilege fails the test instead of
// letting it pass without having run.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include <catch2/catch.hpp>

namespace dsec::test {

/// True when running as root. Otherwise: under CI=true the test fails
/// naming `needs`; elsewhere it warns "skipped: <needs>" and returns false.
inline bool have_root(const char* needs) {
  if (::geteuid() == 0)
    return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string_view{ci} == "true")
    FAIL("CI=true, but not root: " << needs);
  WARN("skipped: " << needs);
  return false;
}

} // namespace dsec::test
