#pragma once
// Private to core/config's tests: parsing a config text as "cfg.toml" and catching the ConfigError it throws.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "baton/time.h"
#include "config/config.h"
#include "error_text.h"

namespace baton::config_test {

// The names every config test uses, for a test file's `using namespace baton::config_test`.
using baton::ConfigError;
using baton::Override;
using baton::RunConfig;
using baton::Time;
using baton::TimeUnit;

struct Failure {
  std::string what;
  std::string file;
  int line = 0;
  int column = 0;
  std::string key;
};

// The ConfigError that parsing `text` (as "cfg.toml") throws; the test fails when none is thrown.
inline Failure failure(const std::string& text, const std::vector<std::string>& sets = {}) {
  std::vector<Override> overrides;
  for (const auto& s : sets) overrides.push_back(Override::parse(s));
  try {
    parse_config(text, "cfg.toml", overrides);
  } catch (const ConfigError& e) {
    return Failure{e.what(), e.where().file, e.where().line, e.where().column, e.key()};
  }
  FAIL("no ConfigError for: " << text);
  return {};
}

inline RunConfig parse(const std::string& text, const std::vector<std::string>& sets = {}) {
  std::vector<Override> overrides;
  for (const auto& s : sets) overrides.push_back(Override::parse(s));
  return parse_config(text, "cfg.toml", overrides);
}

using baton::test::contains;

inline std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::path(BATON_BINARY_DIR) / "test-scratch" / ("config-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

}  // namespace baton::config_test
