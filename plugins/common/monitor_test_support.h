#pragma once
// For the monitor plugins' tests: load a built plugin through the loader, as `baton train` does, and drive it
// event by event with a State the test fills and a logger that records what it is told. Include after
// "baton_test.h".
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "baton/plugin.h"
#include "baton/plugin_loader.h"

namespace monitor_test {

/// Keeps what a plugin logs; metrics also go to the State, as the run's logger does.
struct RecordingLogger : baton::Logger {
  explicit RecordingLogger(baton::State* state = nullptr) : state(state) {}
  baton::State* state;
  std::vector<std::pair<std::string, double>> metrics;  // in the order logged
  std::vector<std::string> lines;                        // info and warn
  std::vector<std::string> warnings;
  void log_metric(std::string_view name, double value) override {
    metrics.emplace_back(std::string(name), value);
    if (state) state->metrics[std::string(name)] = value;
  }
  void info(std::string_view message) override { lines.emplace_back(message); }
  void warn(std::string_view message) override {
    lines.emplace_back(message);
    warnings.emplace_back(message);
  }
  /// The last value logged under name; throws when there is none.
  double last(const std::string& name) const {
    for (auto it = metrics.rbegin(); it != metrics.rend(); ++it)
      if (it->first == name) return it->second;
    throw std::runtime_error("no metric " + name + " was logged");
  }
  bool logged(const std::string& name) const {
    for (const auto& item : metrics)
      if (item.first == name) return true;
    return false;
  }
};

/// The plugin in `file`, configured by `toml` as the [[plugins]] entry of "run.toml" named `name`.
inline baton::LoadedPlugin load_plugin(const std::string& file, const std::string& name, const std::string& toml) {
  return baton::PluginLoader().load(file, baton::PluginConfig::from_toml(toml, name, "run.toml"));
}

/// The ConfigError's text for `toml` ("" when the plugin accepts it).
inline std::string config_error(const std::string& file, const std::string& name, const std::string& toml) {
  try {
    load_plugin(file, name, toml);
  } catch (const baton::ConfigError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace monitor_test
