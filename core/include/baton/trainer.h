#pragma once
// The trainer: the training loop that fires every lifecycle event to the run's plugins, evaluates, saves crash-safe
// checkpoints and resumes from them exactly. `baton train` builds one from a TOML file; programs that embed baton
// build one from their own model, optimizer and data (see examples/embed/).
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "baton/components.h"
#include "baton/dataset.h"
#include "baton/model.h"
#include "baton/plugin.h"
#include "baton/settings.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

class Communicator;  // baton/communicator.h: data-parallel collectives on a c10d process group

/// An evaluation metric under the name it is logged as ("<pass>/<name>", e.g. "eval/accuracy").
struct BATON_API NamedMetric {
  std::string name;
  std::shared_ptr<Metric> metric;
};

/// An evaluation set besides the trainer's `eval` dataset (Composer's Evaluator): evaluated at its own interval
/// with its own metrics, logged as "<pass>/<name>/<metric>" ("eval/train/accuracy", "eval_raw/train/accuracy"),
/// through the same evaluation events (State::eval_set names it during its passes).
struct BATON_API EvalSet {
  std::string name;                       // unique, not "eval", no '/'
  std::shared_ptr<const Dataset> data;
  std::vector<NamedMetric> metrics;       // empty: the defaults for its data
  std::optional<Time> interval;           // none: TrainerOptions::eval_interval; 0 evaluates it only when asked
};

/// Builds the run's optimizer over the tensors it is given: the model's parameters, or, under sharding (zero1,
/// zero2), the rank's shard of them (one flat tensor per dtype), which the optimizer then steps. `baton train`
/// builds one from the registry and [optimizer].
using OptimizerBuilder =
    std::function<std::shared_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>& parameters)>;

/// Everything a Trainer is told: the settings a config file also sets (baton/settings.h: durations, intervals,
/// batch sizes, the loader, device, precision, checkpoints; their defaults and checks are the config's), and what
/// only a program gives (the components built in code, the process group, the loggers).
struct TrainerOptions : TrainerSettings {
  bool shuffle = true;         // false: every epoch in the dataset's order (a sequential sampler)
  std::string run_dir;         // metrics.jsonl, checkpoints/, model.safetensors; empty: write nothing
  std::string resume;          // "" (fresh start), "auto" (newest valid checkpoint, if any) or a checkpoint folder
  std::string config_text;     // stored in checkpoints for reference
  /// The config as logger destinations record it (mlflow's parameters): the CLI gives `baton check --print`'s text,
  /// every default filled in. Empty: config_text.
  std::string logged_config_text;
  bool trace = false;          // print every plugin call as <plugin>/<event>
  bool quiet = false;          // only warnings, errors and the final summary
  /// Learning-rate multiplier of the optimizer's initial lr, as a function of progress; null = constant.
  LrSchedule lr_schedule;
  /// Loss of a batch, from the model's outputs and the batch; null: the model's own (Model::with_loss), else the
  /// registered "cross_entropy" when the training data's targets are classes, "mse" when they are values.
  LossFunction loss;
  /// Evaluation metrics; empty: the registered defaults for the evaluation data: "accuracy" for class targets,
  /// "mae", "rmse" and "r2" for values. Each is reduced across data-parallel ranks as sums (Metric).
  std::vector<NamedMetric> metrics;
  /// More evaluation sets, evaluated after the main one when both fall due.
  std::vector<EvalSet> eval_sets;
  /// For evaluation and prediction: which weight set a plugin that keeps several should use ("": the plugins'
  /// default), one a plugin of the run declares (Declarations::weight_set; the EMA plugin: "ema", "raw"); plugins
  /// read it as RunFacts::requested_weights. A request evaluates one pass, the main one, with that set.
  std::string eval_weights;
  int rank = 0;
  int world_size = 1;
  /// A data-parallel run's process group; when set, rank and world_size come from it. Null: a single process.
  std::shared_ptr<Communicator> communicator;
  /// The optimizer as a builder, called once by the Trainer with the tensors it is to step (OptimizerBuilder),
  /// instead of the Trainer's `optimizer` argument, which must then be null. A sharded run (sharding zero1 or
  /// zero2) needs it: its optimizer steps each rank's shard, which exists only inside the Trainer.
  OptimizerBuilder optimizer_factory;
  /// Sharding zero3: the sub-modules whose parameters are gathered one at a time, by dotted name ("features.0";
  /// docs/distributed.md), each run by the model's forward through baton::run_unit (baton/unit.h). Empty: every
  /// module holding parameters of its own (a Linear, a Conv2d, a BatchNorm), as the built-in models and
  /// torch::nn::Sequential models run them.
  std::vector<std::string> units;
  /// Weights a fresh run starts from (fine-tuning); none by default.
  WeightsInit init;
  /// How the optimizer's parameters split into param groups (weight decay off, lr multipliers); none by default.
  /// Applied to the optimizer given or built by optimizer_factory, which must have one group.
  ParamGroupRules param_groups;
  /// The best checkpoints by a metric, kept in <run folder>/best/; none by default.
  KeepBest keep_best;
  /// Where the run's metrics (and images) go besides metrics.jsonl (Composer's loggers=[...]): destinations made
  /// by hand or from the registry (components().loggers). Opened at fit start on rank 0 when run_dir is set (a
  /// run that writes nothing opens none), closed at its end; other ranks never open them.
  std::vector<std::shared_ptr<LoggerDestination>> loggers;
};

/// One evaluation: its time and metrics ("eval/loss", "eval/<metric>", and whatever plugins logged during it).
struct EvalRecord {
  Timestamp at;
  std::map<std::string, double> metrics;
};

/// Why fit() ended before max_duration (Ceres' termination types): the CLI's exit status follows it.
enum class StopCause {
  none,         // max_duration reached
  plugin,       // a plugin called State::request_stop (an early stopper)
  interrupted,  // SIGINT/SIGTERM, on this rank or, in a data-parallel run, on any rank
  requested,    // the embedding program called Trainer::request_stop
  other_rank,   // in a data-parallel run, another rank stopped for a reason of its own
  time_limit,   // trainer.time_limit was near: the run saved and stopped to end within it (`--resume auto` goes on)
};

struct FitResult {
  Timestamp end;
  std::vector<EvalRecord> evals;
  StopCause stop_cause = StopCause::none;
  std::string stop_reason;      // empty when max_duration was reached; else what asked for the stop
  std::string last_checkpoint;  // empty when none was written
  double seconds = 0;
};

struct EvalResult {
  std::string label;  // the evaluation pass: "eval", or one a plugin declared (RunFacts::eval_passes)
  std::string set;    // empty for the main evaluation set, else the EvalSet's name
  /// The mean loss; NaN when the pass computes none (a model with its own evaluation forward, which samples).
  double loss = std::numeric_limits<double>::quiet_NaN();
  std::int64_t samples = 0;
  struct Value {
    std::string name;  // the metric's name ("accuracy"), logged as "<label>/<name>"
    double value = 0;
    bool higher_is_better = true;
  };
  std::vector<Value> metrics;  // in the configured order; the first is the run's main metric
  /// The value of metric `name`; throws baton::Error when the evaluation has no such metric.
  double metric(const std::string& name) const;
};

/// What Trainer::predict returns, on the CPU, in the dataset's order.
struct PredictResult {
  Outputs outputs;         // the model's (evaluation) outputs, every per-sample field [N, ...]
  at::Tensor predictions;  // the argmax class of each row (int64 [N]) when the main output is class scores [N, C]
  at::Tensor targets;      // the dataset's targets, when it has them
  /// The weight set a plugin swapped in for the prediction, as it named it on State::weights at predict_start
  /// ("ema", "raw": the EMA plugin); empty when no plugin did (the model's own weights).
  std::string weights;
};

class BATON_API Trainer {
 public:
  /// `model` is any module with a tensor-to-tensor forward (baton/model.h: a holder such as torch::nn::Sequential,
  /// an AnyModule, a TorchScript module from load_torchscript) or a baton::Model of the general form. `train` and
  /// `eval` may be any Dataset (baton/dataset.h); a null `eval` means no evaluation. `optimizer` is null when the
  /// model brings its own (Model::with_optimizers), and must be then.
  Trainer(Model model, std::shared_ptr<torch::optim::Optimizer> optimizer,
          std::shared_ptr<const Dataset> train, std::shared_ptr<const Dataset> eval, TrainerOptions options);
  /// The same for data held in memory; an empty `eval` means no evaluation.
  Trainer(Model model, std::shared_ptr<torch::optim::Optimizer> optimizer, TensorDataset train,
          TensorDataset eval, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Adds a plugin before fit()/evaluate(). `id` names it in traces, errors and checkpoints. A Callback given as
  /// a shared_ptr to its own class subscribes only to the events that class overrides; through a pointer to a base
  /// class (Plugin, Callback) it is called on every event, as that class is not known here.
  void add_plugin(std::string id, std::shared_ptr<Plugin> plugin);
  template <class T, class = std::enable_if_t<std::is_base_of_v<Plugin, T> && !std::is_same_v<T, Plugin>>>
  void add_plugin(std::string id, std::shared_ptr<T> plugin) {
    if constexpr (std::is_base_of_v<Callback, T>)
      if (plugin) detail::CallbackOverrides::record(*plugin);
    add_plugin(std::move(id), std::shared_ptr<Plugin>(std::move(plugin)));
  }

  /// Fires init (plugins set up and check the model against the batches they will make) and checks what plugins
  /// declared when they were added: every metric a plugin acts on is one the run logs, and has a direction when
  /// the plugin takes it from the metric (a WatchedMetric without `mode`); a
  /// ConfigError at the plugin's key otherwise. fit(), evaluate_standalone() and predict() do this first (the
  /// last two also refuse TrainerOptions::eval_weights when no plugin declares that set); `baton check` calls it
  /// alone. Calling it again does nothing.
  void check();

  /// Trains to max_duration (or until a plugin or signal asks to stop). fit_end fires and plugins are closed on
  /// every exit path; on an error the exception propagates after that, and the checkpoints on disk are intact.
  FitResult fit();

  /// Evaluates on the eval set, firing eval_standalone_start/end around the evaluation events; loads
  /// `checkpoint` first when given (before_load/after_load). One result per evaluation pass (RunFacts::eval_passes).
  std::vector<EvalResult> evaluate_standalone(const std::string& checkpoint = "");

  /// Runs the model over the eval set (or `data`) without gradients, firing predict_start, per batch
  /// predict_batch_start … predict_batch_end (the batch and its outputs on State), predict_end; loads `checkpoint`
  /// first when given. A plugin keeping several sets of weights uses the set TrainerOptions::eval_weights
  /// names, as for evaluation. Plugins are closed after it, as after evaluate_standalone.
  PredictResult predict(const std::string& checkpoint = "");
  PredictResult predict(const Dataset& data, const std::string& checkpoint = "");

  /// Asks a running fit() to stop after the current batch (safe to call from a signal handler's flag poller).
  void request_stop(std::string reason);

  /// The datasets the trainer was given (e.g. to predict on the training set).
  const Dataset& train_set() const;
  const Dataset& eval_set() const;  // an empty dataset when there is none
  State& state();
  Logger& logger();
  torch::nn::Module& model();
  const TrainerOptions& options() const;
  /// The precision the run trains in and why (options().precision may be "auto").
  const PrecisionChoice& precision() const;
  /// The optimizer's param groups as TrainerOptions::param_groups made them ("3 param groups: 0 as configured:
  /// ..."); "" when it has the one group it was built with.
  const std::string& param_groups() const;
  /// Warnings logged during the run, for the final summary.
  const std::vector<std::string>& warnings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// SIGINT/SIGTERM ask every running trainer to stop after its current batch (it then saves a checkpoint and fires
/// fit_end); a second signal exits at once with status 130.
BATON_API void install_stop_signal_handlers();

/// FitResult::stop_reason of a run stopped by SIGINT/SIGTERM (StopCause::interrupted).
inline constexpr const char* kInterruptedReason = "interrupted by a signal";

/// Which BLAS library LibTorch runs on, from the libraries loaded in this process ("OpenBLAS (…path…)",
/// "reference BLAS (…)", or "unknown").
BATON_API std::string blas_description();

}  // namespace baton
