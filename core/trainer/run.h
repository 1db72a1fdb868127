#pragma once
// Builds a complete run from a RunConfig: data, model, optimizer, learning-rate schedule, plugins and the trainer.
// Used by the CLI's train, eval and check commands.
#include <memory>
#include <string>
#include <vector>

#include "baton/export.h"
#include "baton/trainer.h"
#include "config/config.h"
#include "loader/plugin_loader.h"

namespace baton {

struct RunOptions {
  std::string resume;           // "", "auto" or a checkpoint folder
  bool trace = false;
  bool quiet = false;
  bool allow_insecure_plugins = false;
  bool write_run_dir = true;    // false: nothing is written (evaluation)
  std::string eval_weights;     // baton eval --weights
};

struct BATON_API Run {
  RunConfig config;
  std::string run_dir;
  std::vector<LoadedPlugin> plugins;  // declared before the trainer: destroyed after it, so libraries outlive objects
  std::unique_ptr<Trainer> trainer;
};

/// Loads the config's plugins (validating their keys) in configured order, with unique ids.
BATON_API std::vector<LoadedPlugin> load_plugins(const RunConfig& config, bool allow_insecure);

/// Builds everything. Throws ConfigError, PluginError or Error with a clear message.
BATON_API std::unique_ptr<Run> build_run(const RunConfig& config, const RunOptions& options);

/// The learning-rate multiplier of the [scheduler] section, as a function of progress (null for constant).
BATON_API std::function<double(const Progress&)> make_lr_schedule(const SchedulerSection& scheduler);

}  // namespace baton
