// Helpers shared by the training tests: an empty folder per test case and whole files as text.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace test_util {

// $TEST_TMPDIR/<name> (else /tmp/<name>), removed with everything in it.
inline std::string fresh_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  REQUIRE(std::system(("rm -rf " + dir).c_str()) == 0);
  return dir;
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace test_util
