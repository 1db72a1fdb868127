#pragma once
// For the logger destinations' tests: a destination made from its built plugin library through the registry, as a
// run's [[loggers]] table makes it, and a small configured run that uses it. Include after "baton_test.h".
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "baton/components.h"
#include "baton/plugin_loader.h"

namespace logger_test {

/// The logger `name` registered by the library `file`, configured by `toml` as the table "loggers.0" of run.toml.
inline std::shared_ptr<baton::LoggerDestination> make_logger(const std::string& file, const std::string& name,
                                                             const std::string& toml) {
  baton::PluginLoader().register_components(file);
  const auto* entry = baton::components().loggers.find(name);
  REQUIRE(entry != nullptr);
  const auto config = baton::PluginConfig::from_toml(toml, "loggers.0", "run.toml");
  auto made = entry->factory(config);
  config.reject_unread();
  return made;
}

/// The ConfigError's text for `toml` ("" when the logger accepts it).
inline std::string config_error(const std::string& file, const std::string& name, const std::string& toml) {
  try {
    make_logger(file, name, toml);
  } catch (const baton::ConfigError& e) {
    return e.what();
  }
  return "";
}

/// Three batches an epoch of an MLP on synthetic data for `duration`, logging every batch, evaluated (the EMA's and
/// the raw weights, as eval/... and eval_raw/...) and saved every epoch, with the logger `logger`.
inline std::string small_run(const std::string& name, const std::string& duration, const std::string& logger) {
  return R"([run]
name = ")" + name + R"("
seed = 5
[data]
name = "synthetic"
train_size = 96
eval_size = 32
batch_size = 32
[model]
name = "mlp"
widths = [8]
[trainer]
precision = "fp32"
max_duration = ")" + duration + R"("
eval_interval = "1ep"
log_interval = "1ba"
progress = false
[checkpoint]
save_interval = "1ep"
[[plugins]]
name = "ema"
half_life = "2ba"
eval = "both"
[[loggers]]
name = ")" + logger + R"("
)";
}

inline void write(const std::filesystem::path& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace logger_test
