#pragma once
// The run configuration: a TOML file (toml++) checked key by key. Every unknown key, wrong type, out-of-range
// value or bad time string is a ConfigError that reads "file:line:column: section.key: what was expected".
// Nothing falls back to a default silently when a key is present with the wrong type.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baton/error.h"
#include "baton/plugin_config.h"
#include "baton/settings.h"
#include "baton/time.h"


namespace baton {

struct RunSection {
  std::string name = "baton";  // the run folder is <dir>/<name>
  std::string dir = "runs";
  // seed: RunConfig::settings
};

/// A section that names a registered component (baton/components.h) and holds its keys: `name` selects the
/// factory, which reads the rest of the table through `config` when the run is built (assemble_run, cli/assembly.h): its own keys,
/// types, ranges and unknown keys are checked there, with the same file:line:key errors.
struct ComponentSection {
  std::string name;
  PluginConfig config;  // the whole table; the section's generic keys are read already
};

struct DataSection : ComponentSection {
  // name: the dataset ("fashion-mnist", "mnist", "synthetic", "csv", ... or a plugin's); its loader keys
  // (batch_size, eval_batch_size, workers, prefetch) are RunConfig::settings
  /// metrics = ["accuracy", { name = "top_k", k = 3 }]: the evaluation metrics (registered names, each with its
  /// keys); empty: the data's default (accuracy for classes; mae, rmse and r2 for values).
  std::vector<ComponentSection> metrics;
};

struct DistributedSection {
  std::string backend = "gloo";       // gloo | nccl (nccl needs a LibTorch built with CUDA and NCCL)
  std::int64_t timeout_seconds = 60;  // >= 1; rendezvous and every collective; a dead peer is reported by then
  /// sharding = "zero3": the sub-modules gathered one at a time, by dotted name ("features.0"); empty: every module
  /// that holds parameters of its own (TrainerOptions::units).
  std::vector<std::string> units;
};

struct PluginEntry {
  std::string name;  // exactly one of name / path
  std::string path;
  PluginConfig config;  // the table's other keys
  SourceLocation where;  // where the [[plugins]] table starts
  std::string key;          // "plugins.<index>.name" or "plugins.<index>.path", for errors about the plugin itself
  SourceLocation key_where;  // where that key's value is
};

/// One [[eval]] table: an evaluation set besides [data]'s (Composer's Evaluator), logged as
/// "<pass>/<name>/<metric>" ("eval/train/accuracy").
struct EvalEntry {
  std::string name;                       // unique, not "eval"
  bool own_data = false;                  // data = { name = "...", ... } given: a dataset of its own
  ComponentSection data;                  // that dataset (its keys are read when the run is built)
  std::string split = "eval";             // eval | train: which split of the dataset
  std::vector<ComponentSection> metrics;  // empty: [data] metrics, or the data's defaults
  std::optional<Time> interval;           // none: trainer.eval_interval
  SourceLocation where;                   // where the [[eval]] table starts
};

struct RunConfig {
  std::string source;  // the file name (or "<string>")
  RunSection run;
  DataSection data;             // [data]: name = "fashion-mnist"
  ComponentSection model;       // [model]: name = "convnet"
  WeightsInit model_init;       // [model] init, init_weights, strict, ignore (fine-tuning)
  ComponentSection optimizer;   // [optimizer]: name = "sgd"
  ParamGroupRules param_groups; // [optimizer] weight_decay_exclude, lr_scale (the trainer's, not the optimizer's)
  KeepBest keep_best;           // [checkpoint] keep_best (the trainer's, beside the settings table's keys)
  ComponentSection scheduler;   // [scheduler]: name = "constant"
  ComponentSection loss;        // [loss]: name = "" (the dataset's task decides: cross_entropy or mse)
  /// The settings the Trainer takes (baton/settings.h): [run] seed, [data] batch_size, eval_batch_size, workers
  /// and prefetch, [trainer] and [checkpoint] (checkpoint_dir defaults to "<run folder>/checkpoints" here).
  TrainerSettings settings;
  DistributedSection distributed;
  std::vector<EvalEntry> evals;  // [[eval]], in file order
  std::vector<PluginEntry> plugins;
  /// [[loggers]], in file order: each names a registered logger destination (name = "csv") with its keys
  /// (docs/logging.md); a name not registered yet is looked up as a plugin file of that name.
  std::vector<ComponentSection> loggers;
  std::vector<std::string> plugin_search_paths;  // [plugin_search] paths, relative to the config file's folder
  bool allow_insecure_plugins = false;           // [plugin_search] allow_insecure
  /// Where each key given in the file or a --set is ("data.batch_size" -> file, line, column), for the checks made
  /// after parsing (against the data and the machine) to point at the key like every other error.
  std::map<std::string, SourceLocation> locations;
  /// The configuration as the run uses it: the file with every --set applied, as TOML, headed by a comment naming
  /// the file and the overrides. Checkpoints store it (meta.json's "config").
  std::string resolved_text;

  /// The location of `key`, or the config file (line 0) for a key left at its default.
  SourceLocation where(const std::string& key) const;
};

/// One "--set section.key=value" override. The value is read as a TOML value ("0.1", "true", "[1,2]",
/// "\"text\""); anything that does not parse as one is taken as a string, so "--set trainer.max_duration=2ep" works.
/// Plugin keys: "plugins.<index or name>.<key>"; logger keys likewise "loggers.<index or name>.<key>".
struct Override {
  std::string key;
  std::string value;   // "" removes the key (its default applies)
  std::string origin;  // where it came from in errors ("--seed 7"); empty: "--set key=value"
  static Override parse(std::string_view text);  // "a.b=c"; throws ConfigError for a missing '=' or empty key
};

/// Why `name` cannot name an evaluation set besides [data]'s ("" when it can): it is part of metric names
/// ("eval/<name>/accuracy"), so it is not empty, not "eval", and has no '/' or spaces. The config's [[eval]] and
/// the Trainer's TrainerOptions::eval_sets both ask this.
std::string eval_set_name_problem(const std::string& name);

/// Reads and checks a config file. Throws ConfigError (file missing or unreadable included).
RunConfig load_config(const std::string& path, const std::vector<Override>& overrides = {});
/// The same for a TOML text; `source` names it in errors.
RunConfig parse_config(std::string_view toml_text, const std::string& source,
                       const std::vector<Override>& overrides = {});

/// `config` as TOML with every key of baton's own sections at its value, defaults filled in ([run], [data]'s loader
/// keys, [trainer], [checkpoint], [distributed], [plugin_search], each component's name); a component's own keys
/// (a model's widths, an optimizer's lr, a plugin's) as given, their defaults being the component's (`baton
/// plugins`). For `baton check --print`.
std::string resolved_config_text(const RunConfig& config);

/// The keys of `sections` ("data", "model") whose values differ between two resolved configurations, as
/// "data.train_subset (1000, now 2000)"; empty when either text is not TOML (a program's own config_text).
std::vector<std::string> changed_settings(const std::string& before, const std::string& after,
                                          const std::vector<std::string>& sections);

}  // namespace baton
