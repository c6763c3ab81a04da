// Helpers for tests: temp files and deterministic random data.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace cachet::testing {

inline std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("cachet_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::string shared_dir() { return CACHET_SHARED_DIR; }

}  // namespace cachet::testing
