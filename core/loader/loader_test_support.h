#pragma once
// Private to core/loader's tests: the fixtures' paths, a plugin's error text, the environment and file modes.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baton/plugin_loader.h"
#include "baton_test.h"

namespace baton::loader_test {

namespace fs = std::filesystem;
using baton::ConfigError;
using baton::LoadedPlugin;
using baton::LoaderOptions;
using baton::PluginConfig;
using baton::PluginError;
using baton::PluginInfo;
using baton::PluginLoader;


inline const fs::path kFixtures = fs::canonical(BATON_TEST_PLUGIN_DIR);

inline std::string fixture(const std::string& name) { return (kFixtures / (name + ".so")).string(); }

// The PluginError message of f(), or a marker that makes the caller's checks fail.
template <class F>
inline std::string plugin_error(F&& f) {
  try {
    f();
  } catch (const PluginError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a PluginError: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline std::string inspect_error(const std::string& path) {
  return plugin_error([&] { PluginLoader().inspect(path); });
}

inline std::string load_error(const std::string& path) {
  return plugin_error([&] { PluginLoader().load(path, PluginConfig()); });
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class RecordingLogger final : public baton::Logger {
 public:
  std::vector<std::pair<std::string, double>> metrics;
  std::vector<std::string> lines;
  void log_metric(std::string_view name, double value) override { metrics.emplace_back(name, value); }
  void info(std::string_view message) override { lines.emplace_back(message); }
  void warn(std::string_view message) override { lines.emplace_back(message); }
};

// Sets an environment variable for one test and restores the previous value afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Whether the dynamic loader currently has `path` mapped (RTLD_NOLOAD opens nothing new).
inline bool library_is_loaded(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!handle) return false;
  ::dlclose(handle);  // NOLOAD still took a reference
  return true;
}

// A private copy of a fixture in a fresh folder with safe permissions, for tests that change modes or owners.
inline fs::path copy_fixture(const std::string& name, const std::string& scratch) {
  const fs::path dir = baton::test::scratch_dir(scratch);
  fs::permissions(dir, fs::perms(0755));
  const fs::path file = dir / (name + ".so");
  fs::copy_file(fixture(name), file);
  fs::permissions(file, fs::perms(0755));
  return file;
}

inline const PluginInfo* find_info(const std::vector<PluginInfo>& infos, const std::string& name) {
  auto it = std::find_if(infos.begin(), infos.end(), [&](const PluginInfo& i) { return i.name == name; });
  return it == infos.end() ? nullptr : &*it;
}

inline bool any_contains(const std::vector<std::string>& lines, const std::string& a, const std::string& b) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return contains(l, a) && contains(l, b); });
}


}  // namespace baton::loader_test
