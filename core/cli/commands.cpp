// The baton command line (train, check, eval, predict, plugins, launch, posthoc, checkpoint), in libbaton so that the `baton`
// executable is one call and a program that embeds baton can offer the same commands (baton/cli.h).
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ATen/Parallel.h>

#include <map>

#include "baton/cli.h"
#include "baton/components.h"
#include "baton/safetensors.h"
#include "baton/trainer.h"
#include "cli/launch_command.h"
#include "cli/openmp_wait.h"
#include "config/config.h"
#include "baton/plugin_loader.h"
#include "checkpoint_command.h"  // checkpoint info
#include "posthoc_command.h"  // posthoc
#include "sdk/exception_text.h"
#include "sdk/nearest.h"
#include "cli/assembly.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;

struct CommonArgs {
  std::string config_path;
  std::vector<std::string> sets;
  std::string seed;  // --seed N: run.seed, checked as the config's key is
  bool allow_insecure = false;
};

void add_common(CLI::App* cmd, CommonArgs& args) {
  cmd->add_option("config", args.config_path, "TOML run configuration")->required();
  cmd->add_option("--set", args.sets, "override a key: section.key=value (repeatable); section.key= removes it");
  cmd->add_option("--seed", args.seed, "the run's seed (run.seed), after every --set");
  cmd->add_flag("--allow-insecure-plugins", args.allow_insecure,
                "load plugin files even when others may write to them");
}

baton::RunConfig load(const CommonArgs& args) {
  std::vector<baton::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back(baton::Override::parse(s));
  if (!args.seed.empty()) overrides.push_back(baton::Override{"run.seed", args.seed, "--seed " + args.seed});
  return baton::load_config(args.config_path, overrides);
}

// A checkpoint folder named on the command line that is not there is a usage error (exit 2), not a failure of the
// run: say so before anything is built, with the checkpoints that are beside it.
void require_checkpoint_folder(const std::string& option, const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (fs::is_directory(folder, error)) return;
  const fs::path parent = fs::path(folder).parent_path().empty() ? fs::path(".") : fs::path(folder).parent_path();
  std::vector<std::string> beside;
  if (fs::is_directory(parent, error))
    for (const auto& entry : fs::directory_iterator(parent, error))
      if (entry.is_directory(error) && fs::exists(entry.path() / "meta.json", error))
        beside.push_back(entry.path().filename().string());
  std::sort(beside.begin(), beside.end());
  std::string message = fs::exists(folder, error) ? "not a folder" : "no such checkpoint folder";
  if (!beside.empty()) {
    std::string names;
    for (const auto& name : beside) names += (names.empty() ? "" : ", ") + name;
    message += baton::detail::did_you_mean(fs::path(folder).filename().string(), beside) + "; the checkpoints in " +
               parent.string() + ": " + names;
  } else {
    message += "; a checkpoint is a folder of a run's checkpoints/ (ep1, ba500, ...), or use --resume auto";
  }
  throw baton::ConfigError(baton::SourceLocation{option + " " + folder, 0, 0}, "", message);
}

std::string fixed(double value, int precision = 4) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", precision, value);
  return buffer;
}

// The end-of-run table: one row per evaluation, one column per eval metric.
void print_eval_table(const std::vector<baton::EvalRecord>& evals) {
  if (evals.empty()) return;
  std::vector<std::string> columns;
  for (const auto& record : evals)
    for (const auto& [name, value] : record.metrics)
      if (name.rfind("eval", 0) == 0 && std::find(columns.begin(), columns.end(), name) == columns.end())
        columns.push_back(name);
  // Each column as wide as its name (at least 16): a long name (eval_raw/accuracy) must not shift the values.
  std::vector<int> widths;
  for (const auto& c : columns) widths.push_back(std::max(16, static_cast<int>(c.size())));
  std::printf("\n%6s %8s", "epoch", "batch");
  for (std::size_t i = 0; i < columns.size(); ++i) std::printf(" %*s", widths[i], columns[i].c_str());
  std::printf("\n");
  for (const auto& record : evals) {
    std::printf("%6lld %8lld", static_cast<long long>(record.at.epoch), static_cast<long long>(record.at.batch));
    for (std::size_t i = 0; i < columns.size(); ++i) {
      auto it = record.metrics.find(columns[i]);
      std::printf(" %*s", widths[i], it == record.metrics.end() ? "-" : fixed(it->second).c_str());
    }
    std::printf("\n");
  }
}

// eval and predict: a run that writes nothing, quiet, with the weight set asked for ("": the plugins' default).
baton::AssemblyOptions inference_options(const CommonArgs& args, const std::string& weights, const char* command) {
  baton::AssemblyOptions options;
  options.write_run_dir = false;
  options.quiet = true;
  options.eval_weights = weights;
  options.standalone = command;
  options.allow_insecure_plugins = args.allow_insecure;
  return options;
}

int run_train(const CommonArgs& args, const std::string& resume, bool trace, bool quiet) {
  if (!resume.empty() && resume != "auto") require_checkpoint_folder("--resume", resume);
  baton::RunConfig config = load(args);
  baton::AssemblyOptions options;
  options.resume = resume;
  options.trace = trace;
  options.quiet = quiet;
  options.allow_insecure_plugins = args.allow_insecure;
  auto run = baton::assemble_run(config, options);
  auto& logger = run->trainer->logger();
  logger.info("baton: run folder " + run->run_dir + ", " + std::to_string(config.settings.batch_size) +
              " per batch, max_duration " + config.settings.max_duration.str());
  logger.info("baton: BLAS " + baton::blas_description() + ", " + std::to_string(at::get_num_threads()) +
              " threads, device " + config.settings.device + ", precision " +
              baton::precision_name(run->trainer->precision().precision) + " (" + run->trainer->precision().why + ")");
  logger.info("baton: " + baton::cli::openmp_wait_description());
  if (!run->trainer->param_groups().empty()) logger.info("baton: optimizer " + run->trainer->param_groups());
  for (const auto& p : run->plugins)
    logger.info("baton: plugin " + p.id + " " + p.info.version + " (" + p.info.kind + ") from " + p.info.path);
  baton::install_stop_signal_handlers();
  baton::FitResult result = run->trainer->fit();
  // In a distributed run rank 0 alone prints the summary; the others say they are done.
  if (run->trainer->options().rank != 0) {
    std::printf("rank %d of %d done at %s\n", run->trainer->options().rank, run->trainer->options().world_size,
                baton::format_timestamp(result.end).c_str());
    return result.stop_cause == baton::StopCause::interrupted ? kExitInterrupted : 0;
  }
  print_eval_table(result.evals);
  std::printf("\ntrained to %s in %.1f s%s%s\n", baton::format_timestamp(result.end).c_str(), result.seconds,
              result.stop_reason.empty() ? "" : ", stopped: ", result.stop_reason.c_str());
  if (!result.last_checkpoint.empty()) std::printf("last checkpoint: %s\n", result.last_checkpoint.c_str());
  if (!run->run_dir.empty()) std::printf("run folder: %s\n", run->run_dir.c_str());
  const auto& warnings = run->trainer->warnings();
  if (!warnings.empty()) std::printf("%zu warning(s) during the run; see above\n", warnings.size());
  return result.stop_cause == baton::StopCause::interrupted ? kExitInterrupted : 0;
}

int run_check(const CommonArgs& args, bool print) {
  baton::RunConfig config = load(args);
  baton::check_machine(config);
  // The run as train would build it (the data is loaded), writing nothing: a bad key of any component is found
  // here, and the plugins' init checks what they can know before a run (the metrics they watch, the model
  // against the batches they make).
  baton::AssemblyOptions options;
  options.write_run_dir = false;
  options.quiet = true;
  options.allow_insecure_plugins = args.allow_insecure;
  std::unique_ptr<baton::Assembly> run;
  try {
    run = baton::assemble_run(config, options);
  } catch (const baton::PluginEntryError& e) {
    // For `check` every problem found in the configuration, a plugin it names included, is a usage error.
    throw e.as_config_error();
  }
  try {
    run->trainer->check();
  } catch (const baton::ConfigError&) {
    throw;
  } catch (const baton::PluginError& e) {
    // A plugin refusing the run at init (a model that cannot take its batches) is a configuration problem too.
    throw baton::ConfigError(baton::SourceLocation{args.config_path, 0, 0}, "plugins", e.what());
  } catch (const baton::Error& e) {
    // The model or the loss failing on the first training batch: the data and the model this file names disagree.
    throw baton::ConfigError(baton::SourceLocation{args.config_path, 0, 0}, "model", e.what());
  }
  if (print) std::printf("%s\n", baton::resolved_config_text(config).c_str());
  const std::size_t plugins = run->plugins.size();
  std::printf("%s: ok (%zu plugin%s)\n", args.config_path.c_str(), plugins, plugins == 1 ? "" : "s");
  return 0;
}

int run_eval(const CommonArgs& args, const std::string& checkpoint, const std::string& weights) {
  require_checkpoint_folder("--checkpoint", checkpoint);
  baton::RunConfig config = load(args);
  auto run = baton::assemble_run(config, inference_options(args, weights, "evaluation"));
  auto results = run->trainer->evaluate_standalone(checkpoint);
  // Every rank evaluates its share and holds the same reduced results: rank 0 prints them.
  if (run->trainer->options().rank != 0) return 0;
  for (const auto& result : results) {
    std::string values = std::isnan(result.loss) ? "" : "loss " + fixed(result.loss);
    for (const auto& metric : result.metrics)
      values += (values.empty() ? "" : " ") + metric.name + " " + fixed(metric.value);
    const std::string pass = result.set.empty() ? result.label : result.label + "/" + result.set;
    std::printf("checkpoint %s: %s %s (%lld samples)\n", checkpoint.c_str(), pass.c_str(), values.c_str(),
                static_cast<long long>(result.samples));
  }
  return 0;
}

struct PredictArgs {
  std::string checkpoint, weights, output, dataset = "eval";
};

// The outputs, the predicted class and (when the set has them) the targets of every sample, in the set's order,
// to a safetensors file that is whole or absent.
int run_predict(const CommonArgs& args, const PredictArgs& predict) {
  require_checkpoint_folder("--checkpoint", predict.checkpoint);
  baton::RunConfig config = load(args);
  auto run = baton::assemble_run(config, inference_options(args, predict.weights, "prediction"));
  const baton::Dataset& data = predict.dataset == "train" ? run->trainer->train_set() : run->trainer->eval_set();
  baton::PredictResult result = run->trainer->predict(data, predict.checkpoint);
  if (run->trainer->options().rank != 0) return 0;
  // Every output under its name ("outputs" for a model with one), then the predicted classes and the targets
  // unless an output already has that name.
  baton::NamedTensors tensors(result.outputs.begin(), result.outputs.end());
  if (result.predictions.defined() && !result.outputs.has("predictions"))
    tensors.emplace_back("predictions", result.predictions);
  if (result.targets.defined() && !result.outputs.has("targets")) tensors.emplace_back("targets", result.targets);
  const std::map<std::string, std::string> metadata{{"baton.checkpoint", predict.checkpoint},
                                                    {"baton.weights", result.weights.empty() ? "raw" : result.weights},
                                                    {"baton.dataset", data.name}};
  baton::write_safetensors_atomic(predict.output, tensors, metadata);
  std::printf("%s: outputs of %lld samples of %s (checkpoint %s, %s weights)\n", predict.output.c_str(),
              static_cast<long long>(result.outputs.defined() ? result.outputs.main().size(0) : 0), data.name.c_str(),
              predict.checkpoint.c_str(), (result.weights.empty() ? "raw" : result.weights).c_str());
  return 0;
}

int run_plugins(const std::vector<std::string>& paths, bool allow_insecure) {
  baton::LoaderOptions options;
  options.search_paths = paths;
  options.allow_insecure = allow_insecure;
  baton::PluginLoader loader(options);
  std::vector<std::string> errors;
  auto found = loader.discover(&errors);
  std::printf("search path:\n");
  for (const auto& dir : loader.search_paths()) std::printf("  %s\n", dir.c_str());
  std::printf("%-20s %-10s %-4s %-10s %-8s %s\n", "name", "version", "abi", "kind", "libtorch", "path");
  for (const auto& p : found) {
    std::printf("%-20s %-10s %-4u %-10s %-8s %s\n", p.name.c_str(), p.version.c_str(), p.abi_version,
                p.kind.c_str(), p.torch_version.c_str(), p.path.c_str());
    try {
      loader.register_components(p.path);
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
  }
  // Every registered component by kind: baton's own and those the libraries above add.
  const baton::Components& registry = baton::components();
  std::printf("\ncomponents:\n%-10s %-16s %-10s %-28s %s\n", "kind", "name", "version", "from", "description");
  const auto list = [](const auto& kind) {
    for (const auto* entry : kind.entries()) {
      const std::string version = entry->origin.version.empty() ? BATON_VERSION : entry->origin.version;
      std::printf("%-10s %-16s %-10s %-28s %s\n", kind.kind().c_str(), entry->name.c_str(), version.c_str(),
                  entry->origin.library.c_str(), entry->description.c_str());
    }
  };
  list(registry.models);
  list(registry.datasets);
  list(registry.optimizers);
  list(registry.schedulers);
  list(registry.losses);
  list(registry.metrics);
  list(registry.loggers);
  for (const auto& e : errors) std::fprintf(stderr, "warning: %s\n", e.c_str());
  return 0;
}

}  // namespace

namespace baton {

int cli_main(int argc, char** argv) {
  baton::cli::settle_openmp_wait(argc, argv);  // may run the program again, before LibTorch does any work
  CLI::App app{"baton: a training engine for LibTorch with run-time plugins"};
  app.require_subcommand(1);
  // Command-line mistakes read like every other error baton reports: "error: <what>".
  app.failure_message([](const CLI::App* failed, const CLI::Error& e) {
    return "error: " + CLI::FailureMessage::simple(failed, e);
  });
  app.set_version_flag("--version", std::string("baton ") + BATON_VERSION);

  CommonArgs train_args, check_args, eval_args;
  std::string resume, checkpoint, weights;
  bool trace = false, quiet = false, plugins_insecure = false;
  std::vector<std::string> plugin_paths;

  auto* train = app.add_subcommand("train", "train a model as a config file describes");
  add_common(train, train_args);
  train->add_option("--resume", resume, "'auto' (newest valid checkpoint) or a checkpoint folder");
  train->add_flag("--trace", trace, "print every plugin call as <plugin>/<event>");
  train->add_flag("--quiet", quiet, "only warnings, errors and the final summary");

  auto* check = app.add_subcommand("check", "validate a config file and its plugins; exit 0 or 2");
  add_common(check, check_args);
  bool print_config = false;
  check->add_flag("--print", print_config, "print the resolved configuration, defaults filled in");

  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint on the config's evaluation set");
  add_common(eval, eval_args);
  eval->add_option("--checkpoint", checkpoint, "checkpoint folder")->required();
  // Any name: the run checks it against the sets its plugins declare (State::weight_sets) once they are loaded.
  eval->add_option("--weights", weights, "with a plugin that keeps several weight sets: which one to evaluate");

  CommonArgs predict_args;
  PredictArgs predict_options;
  auto* predict = app.add_subcommand("predict", "write a checkpoint's outputs and predicted classes on a dataset");
  add_common(predict, predict_args);
  predict->add_option("--checkpoint", predict_options.checkpoint, "checkpoint folder")->required();
  predict->add_option("--weights", predict_options.weights,
                      "with a plugin that keeps several weight sets: which one to predict with");
  predict->add_option("-o,--output", predict_options.output, "safetensors file to write")->required();
  predict->add_option("--dataset", predict_options.dataset, "which of the config's datasets: eval (default) or train")
      ->check(CLI::IsMember({"eval", "train"}));

  auto* plugins = app.add_subcommand("plugins", "list the plugins found, with name, version and ABI");
  plugins->add_option("--path", plugin_paths, "extra folder to search (repeatable)");
  plugins->add_flag("--allow-insecure-plugins", plugins_insecure, "list plugin files others may write to");

  // --- launch: distributed runs on this machine (cli/launch_command.h) ---
  baton::cli::LaunchOptions launch_options;
  auto* launch = app.add_subcommand("launch", "run N ranks of a data-parallel run: launch --nproc N train cfg.toml");
  launch->add_option("--nproc", launch_options.nproc, "number of ranks (processes) on this machine")->required()
      ->check(CLI::Range(1, 4096));
  launch->add_option("--nnodes", launch_options.nnodes, "number of machines, each running its own launch (default 1)")
      ->check(CLI::Range(1, 65536));
  launch->add_option("--node-rank", launch_options.node_rank, "this machine's place in [0, nnodes) (default 0)")
      ->check(CLI::NonNegativeNumber);
  launch->add_option("--master-addr", launch_options.master_addr,
                     "node 0's address, where rank 0 hosts the rendezvous (default 127.0.0.1)");
  launch->add_option("--master-port", launch_options.master_port,
                     "the rendezvous port on node 0 (default: a free port; required with --nnodes > 1)")
      ->check(CLI::Range(1, 65535));
  launch->prefix_command();  // everything after the options is the command each rank runs
  // --- end launch ---

  // --- posthoc (core/cli/posthoc_command.*) ---
  baton::cli::PosthocArgs posthoc_args;
  auto* posthoc = baton::cli::add_posthoc_subcommand(app, posthoc_args);
  // --- end posthoc ---
  baton::cli::CheckpointArgs checkpoint_args;
  auto* checkpoint_command = baton::cli::add_checkpoint_subcommand(app, checkpoint_args);

  // An unknown first word would read "A subcommand is required": name the word, the nearest command and them all.
  if (argc >= 2 && argv[1][0] != '-') {
    std::vector<std::string> names;
    const CLI::App& commands = app;
    for (const auto* sub : commands.get_subcommands([](const CLI::App*) { return true; }))
      names.push_back(sub->get_name());
    const std::string word = argv[1];
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      std::string all;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      std::fprintf(stderr, "error: unknown command '%s'%s; the commands are %s (baton --help)\n", word.c_str(),
                   baton::detail::did_you_mean(word, names).c_str(), all.c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  try {
    if (*train) return run_train(train_args, resume, trace, quiet);
    if (*check) return run_check(check_args, print_config);
    if (*eval) return run_eval(eval_args, checkpoint, weights);
    if (*predict) return run_predict(predict_args, predict_options);
    if (*plugins) return run_plugins(plugin_paths, plugins_insecure);
    if (*posthoc) return baton::cli::run_posthoc(*posthoc, posthoc_args);  // posthoc
    if (*checkpoint_command) return baton::cli::run_checkpoint(checkpoint_args);
    if (*launch) {  // --- launch ---
      launch_options.args = launch->remaining();
      if (std::string problem = baton::cli::launch_usage_error(launch_options); !problem.empty()) {
        std::fprintf(stderr, "error: %s\n", problem.c_str());
        return kExitUsage;
      }
      return baton::cli::launch(launch_options);
    }  // --- end launch ---
  } catch (const baton::ConfigError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    // A LibTorch error that reached here without context still comes without its C++ backtrace.
    std::fprintf(stderr, "error: %s\n", baton::detail::exception_text(e).c_str());
    return kExitFailure;
  } catch (...) {
    // Calls into plugins convert what they throw; this is the last line against anything that slips past, so the
    // process never ends through std::terminate without a word.
    std::fprintf(stderr, "error: an exception that is not a std::exception\n");
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace baton
