#pragma once
// Builds a complete run from a RunConfig: data, model, optimizer, learning-rate schedule, plugins and the trainer.
// Used by the CLI's train, eval and check commands.
#include <memory>
#include <string>
#include <vector>

#include "baton/trainer.h"
#include "config/config.h"
#include "baton/plugin_loader.h"

namespace baton {

struct RunOptions {
  std::string resume;           // "", "auto" or a checkpoint folder
  bool trace = false;
  bool quiet = false;
  bool allow_insecure_plugins = false;
  bool write_run_dir = true;    // false: nothing is written (evaluation)
  std::string eval_weights;     // baton eval --weights
};

struct Run {
  RunConfig config;
  std::string run_dir;
  std::vector<LoadedPlugin> plugins;  // declared before the trainer: destroyed after it, so libraries outlive objects
  std::unique_ptr<Trainer> trainer;
};

/// A plugin of the config that cannot be found, loaded or started. `baton train` fails with it (status 1, as for
/// any plugin failure) and `baton check` reports it as the configuration problem it also is (status 2); both read
/// "file:line:column: plugins.<index>.<name|path>: <reason>", at the entry's name or path.
class PluginEntryError : public PluginError {
 public:
  PluginEntryError(const PluginEntry& entry, const std::string& reason);
  ~PluginEntryError() override;
  ConfigError as_config_error() const { return ConfigError(where_, key_, reason_); }

 private:
  SourceLocation where_;
  std::string key_;
  std::string reason_;
};

/// Loads the config's plugins (validating their keys) in configured order, with unique ids. Throws
/// PluginEntryError, or the ConfigError of a plugin's own key.
std::vector<LoadedPlugin> load_plugins(const RunConfig& config, bool allow_insecure);

/// Checks what parsing alone cannot: the dataset folder and its files, data.batch_size against the training
/// samples, synthetic sizes against this machine's memory, trainer.threads against its cores and trainer.device
/// against the CUDA devices LibTorch sees. Throws ConfigError at the key. `baton check` and build_run call it, so
/// check refuses what train would fail on.
void check_against_data_and_machine(const RunConfig& config);

/// Builds everything. Throws ConfigError, PluginError or Error with a clear message.
std::unique_ptr<Run> build_run(const RunConfig& config, const RunOptions& options);

/// The learning-rate multiplier of the [scheduler] section, as a function of progress (null for constant).
std::function<double(const Progress&)> make_lr_schedule(const SchedulerSection& scheduler);

}  // namespace baton
