// A directory under /tmp for one test, removed with everything in it at
// scope exit.
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <string>

#include "sys/fs.hpp"

namespace dsec::test {

struct temp_dir {
  std::string path;
  explicit temp_dir(const std::string& prefix = "dsec-unit") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() { (void)sys::remove_tree(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

} // namespace dsec::test
