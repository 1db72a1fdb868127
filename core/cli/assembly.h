#pragma once
// The composition root of the command line: assembles a complete run from a RunConfig (plugins, data, model,
// optimizer, learning-rate schedule, loss, metrics, loggers and the trainer), for the CLI's train, eval, predict,
// check and posthoc commands. A program that embeds baton builds these itself and hands them to the Trainer.
#include <memory>
#include <string>
#include <vector>

#include "baton/trainer.h"
#include "config/config.h"
#include "baton/plugin_loader.h"

namespace baton {

struct AssemblyOptions {
  std::string resume;           // "", "auto" or a checkpoint folder
  bool trace = false;
  bool quiet = false;
  bool allow_insecure_plugins = false;
  bool write_run_dir = true;    // false: nothing is written (evaluation)
  std::string eval_weights;     // baton eval --weights
  const char* standalone = "evaluation";  // what eval_weights is for, in its errors: "evaluation", "prediction"
};

struct Assembly {
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

/// Loads the config's plugins (validating their keys) in configured order, with unique ids, and the libraries of the
/// [[loggers]] named but not registered yet (their file named after them). Throws PluginEntryError, or the
/// ConfigError of a plugin's own key or of a logger library that cannot be loaded.
std::vector<LoadedPlugin> load_plugins(const RunConfig& config, bool allow_insecure);

/// Checks what parsing alone cannot about the machine: trainer.threads against its cores and trainer.device
/// against the CUDA devices LibTorch sees. Throws ConfigError at the key.
void check_machine(const RunConfig& config);

/// The run's components, built from their sections through the registries (baton/components.h).
struct BuiltComponents {
  DatasetSplits data;  // eval is never null (an empty dataset when the dataset has no evaluation split)
  Model model;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  LrSchedule schedule;  // null: the optimizer's lr throughout
  LossFunction loss;
  std::vector<NamedMetric> metrics;  // [data] metrics; empty: the trainer's defaults for the evaluation data
  std::vector<EvalSet> eval_sets;    // [[eval]]
  std::vector<std::shared_ptr<LoggerDestination>> loggers;  // [[loggers]], not opened yet
};

/// Builds the dataset, model (shaped by the data), optimizer, schedule and loss of the config, each checking its
/// own keys (ConfigError at the key: an unknown name, a bad value, a key the component does not read, a missing
/// dataset folder, data.batch_size above the training samples). The config's plugins must be loaded first
/// (load_plugins), since a plugin library may register what a section names. `need_train` false skips the
/// training split (evaluation and prediction). `baton check` and assemble_run call it, so check refuses what train
/// would fail on.
BuiltComponents build_components(const RunConfig& config, bool need_train = true);

/// Builds everything. Throws ConfigError, PluginError or Error with a clear message.
std::unique_ptr<Assembly> assemble_run(const RunConfig& config, const AssemblyOptions& options);

}  // namespace baton
