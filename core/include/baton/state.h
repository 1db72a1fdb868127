#pragma once
// The trainer's state as plugins see it: time, model, optimizer, the step's batch, outputs and loss, latest metrics,
// run folder, and a way to ask the run to stop. Only ATen's tensor type comes in (<ATen/core/Tensor.h>, through
// baton/batch.h): the model and optimizer are forward-declared, and a plugin that touches them includes
// <torch/nn/module.h> / <torch/optim/optimizer.h> itself; one that computes with tensors includes the ATen ops it
// uses (<ATen/ops/softmax.h>, ...).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>

#include "baton/batch.h"
#include "baton/error.h"
#include "baton/export.h"
#include "baton/state_dict.h"
#include "baton/time.h"

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class Optimizer;
}
}  // namespace torch

namespace baton {

class Communicator;  // baton/communicator.h

/// A checkpoint being written. Valid only during batch_checkpoint / epoch_checkpoint / iteration_checkpoint when
/// a save is due (State::checkpoint is null otherwise). Files added here are written into the checkpoint folder
/// before it is committed, so they appear atomically with it.
class BATON_API CheckpointInProgress {
 public:
  virtual ~CheckpointInProgress();
  /// The folder the checkpoint will have once committed, e.g. "runs/x/checkpoints/ep2".
  virtual const std::string& path() const = 0;
  /// Adds a safetensors file (tensors of `content`, its scalars as metadata), e.g. "ema.safetensors".
  virtual void add_tensors_file(const std::string& filename, const StateDict& content) = 0;
  /// Runs fn(path) once the checkpoint is committed (complete on disk); an exception there is reported as a
  /// warning naming the plugin and does not undo the checkpoint.
  virtual void after_commit(std::function<void(const std::string& path)> fn) = 0;
};

/// What the trainer lets a plugin run besides firing events, on State::passes (null when no trainer runs the State,
/// e.g. one a test fills). Only baton implements it; later versions may append virtual functions, never reorder.
class BATON_API TrainingPasses {
 public:
  virtual ~TrainingPasses();
  /// Runs the step's forward and backward again from the current weights (Composer's optimizer closure, for SAM):
  /// the gradients are zeroed, the batch the step started with (as after_dataloader … before_train_batch left it)
  /// goes through before_forward … after_backward again, in microbatches when the run uses them, and the gradients
  /// are averaged across ranks and unscaled (amp_fp16), as the first pass's are when after_train_batch sees them.
  /// State's batch, outputs and loss stay the first pass's. Returns false when the new gradients are not finite:
  /// the trainer then skips the optimizer step (and lowers amp_fp16's loss scale). Only at after_train_batch of a
  /// step the trainer computes (not a model's own training_step); throws baton::Error elsewhere.
  virtual bool recompute_gradients() = 0;
  /// One pass of the model's training forward over this rank's share of the training data (the current epoch's
  /// batches, as loaded, without the step events), in train mode and without gradients, as PyTorch's
  /// swa_utils.update_bn: what changes is the model's buffers (batch-norm running statistics). Across ranks the
  /// floating-point buffers are then averaged, so every rank holds the statistics of the whole data. The model's
  /// train/eval mode is restored after. During fit, outside a step; throws baton::Error elsewhere.
  virtual void forward_training_data() = 0;
};

/// A request to end the run: State::request_stop sets it (the first reason wins), the trainer reads it after each
/// batch. Its own struct so that State needs no private members (see State's layout rule).
struct StopRequest {
  bool requested = false;
  std::string reason;
};

/// A metric a plugin acts on (a stopper's `monitor`, the EMA's `select.metric`), with the configuration key that
/// named it and where that key is (PluginConfig::full_key / where), so a name the run never logs is reported there.
struct WatchedMetric {
  std::string metric;
  std::string key;
  SourceLocation where;
};

/// Layout rule: a plugin reads State's members at the offsets it was compiled with, and only baton creates a State
/// (plugins get a reference), so State may grow but what is in it never moves: new members are appended at the end,
/// none is inserted, removed, reordered or retyped, and every member is public (members under different access
/// specifiers may be laid out in any order). The ABI test (core/engine/abi_compat_test.cpp) appends one and loads
/// plugins built without it.
struct BATON_API State {
  /// Time so far and the run's length.
  Progress progress;
  const Timestamp& timestamp() const { return progress.now; }

  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  /// "cpu", "cuda", "cuda:1".
  std::string device = "cpu";

  /// The step's data, as Composer's state.batch / state.outputs / state.loss (docs/plugins.md has the table of
  /// events). Undefined tensors outside their windows:
  ///  - training: `batch` from after_dataloader to batch_end (on the device; a plugin may replace or add fields at
  ///    after_dataloader, and up to before_forward, when the trainer reads it back for the forward pass);
  ///    `outputs` from after_forward to batch_end; before_loss may replace fields of the batch or the outputs;
  ///    `loss` from after_loss to batch_end and may be replaced at after_loss (a plugin's own loss term), since the
  ///    trainer backpropagates the loss it reads back after before_backward.
  ///  - evaluation: the eval batch from eval_batch_start to eval_batch_end, its `outputs` (the model's evaluation
  ///    form's) from eval_after_forward; the pass's loss and metrics are computed from the outputs and the batch
  ///    read back after eval_after_forward.
  ///  - prediction: the batch from predict_batch_start to predict_batch_end, its `outputs` from
  ///    predict_after_forward (read back after it).
  /// Fields are named (baton/batch.h): the built-in datasets give `inputs` and `targets`, whose targets are class
  /// indices (int64 [N]) or class probabilities (float [N, C], e.g. after label smoothing or MixUp): the default
  /// loss takes either, accuracy takes the argmax of probabilities.
  Batch batch;
  Outputs outputs;
  at::Tensor loss;
  /// Empties batch, outputs and loss: the trainer calls it as their window closes (batch_end, eval_batch_end,
  /// predict_batch_end), so no later event sees a stale batch and the tensors are freed.
  void clear_step_data() {
    batch = Batch();
    outputs = Outputs();
    loss = at::Tensor();
  }

  /// Latest value of every logged metric: "train/loss", "eval/accuracy", plugin metrics.
  std::map<std::string, double> metrics;
  /// The evaluation passes run at each evaluation point, in order, each firing eval_start … eval_end with
  /// eval_label set to it; metrics are logged as "<label>/loss", "<label>/accuracy". A plugin may add passes at
  /// init (the EMA plugin adds "eval_raw" to evaluate the raw weights as well as the averaged ones).
  std::vector<std::string> eval_labels = {"eval"};
  /// The evaluation pass running now; empty outside evaluation.
  std::string eval_label;
  /// Which weights a standalone evaluation or prediction should use when a plugin keeps more than one set
  /// (`baton eval/predict --weights`); empty for the plugins' own default. A plugin that keeps several sets
  /// declares them in weight_sets at init and reads the request here; after init the trainer refuses a request
  /// that no plugin declared, so the raw weights are never evaluated under another set's name. (A plugin built
  /// before weight_sets took the request by clearing this field; the trainer accepts that too.)
  std::string eval_weights;

  /// The run folder (metrics.jsonl, checkpoints/); empty when the run writes nothing.
  std::string run_dir;
  /// The newest committed checkpoint folder; empty when there is none yet.
  std::string last_checkpoint;
  /// Non-null during *_checkpoint events when a save is due.
  CheckpointInProgress* checkpoint = nullptr;

  int rank = 0;
  int world_size = 1;
  /// The run's seed (trainer.seed). A stochastic plugin draws from a generator seeded by it and the batch count,
  /// so a resumed run draws what the uninterrupted one did.
  std::uint64_t seed = 0;
  /// The run's process group when world_size > 1 (null in a single process). Every rank fires the same events in
  /// the same order, so a plugin may run a collective in any event (the sharded EMA gathers at eval_start and when
  /// checkpointing); a collective that only some ranks reach hangs until the timeout.
  std::shared_ptr<Communicator> communicator;

  /// Asks the trainer to stop after the current batch (it still fires batch_end, checkpoints and fit_end). Ask
  /// through request_stop() rather than by writing `stop_request`: it keeps the first reason, the one that explains
  /// why the run ended.
  void request_stop(std::string reason);
  bool stop_requested() const { return stop_request.requested; }
  const std::string& stop_reason() const { return stop_request.reason; }
  StopRequest stop_request;

  /// The evaluation set of the passes running now, from eval_before_all to eval_after_all: empty for the main one,
  /// else an extra set's name ([[eval]], TrainerOptions::eval_sets), whose metrics are logged as
  /// "<label>/<set>/<metric>".
  std::string eval_set;

  /// The step's random numbers (a CPU generator): reseeded before every training step from the run's seed, the
  /// batch count and the rank, and before every evaluation or prediction batch from the seed and the batch's
  /// first sample, so what a model or plugin draws from it (timesteps, noise, masks) is the same in a resumed run
  /// and the same for every weight set evaluated. Draw on the CPU and move the result where it is needed.
  at::Generator generator;
  /// Every optimizer of the run by name: the run's one ("optimizer", also State::optimizer), or the model's own
  /// (Model::with_optimizers), State::optimizer being the first.
  std::vector<std::pair<std::string, torch::optim::Optimizer*>> optimizers;

  /// The names of the metrics this run logs, known before it starts. A plugin that logs metrics of its own declares
  /// them here at init ("ema/smoothing"); after init the trainer adds its own ("train/loss", "lr") and every
  /// evaluation pass's ("<label>/loss" and "<label>/<metric>", with the set's name between for an extra set, for
  /// each of eval_labels).
  std::vector<std::string> metric_names;
  /// Metrics plugins act on, named at init. After init the trainer checks each against metric_names, so a name no
  /// pass or plugin logs is a configuration error at its key before the run starts, `baton check` included.
  std::vector<WatchedMetric> watched_metrics;
  /// From init on: the model's training forward on a batch, without gradients and in evaluation mode (the module's
  /// mode is restored), for a plugin to check at init that the model takes the batches it will make.
  std::function<Outputs(const Batch&)> probe_forward;
  /// From init on: the first training sample as a batch of one, on the CPU; empty when there is no training data.
  Batch example_batch;
  /// The trainer's passes a plugin may run (TrainingPasses); null when no trainer runs this State.
  TrainingPasses* passes = nullptr;
  /// The ids of the run's plugins, in the order they were added: their names in a configured run ("ema", "ema#2"),
  /// what Trainer::add_plugin was given otherwise (Composer's state.algorithms and state.callbacks), for a plugin
  /// that does not compose with another.
  std::vector<std::string> plugins;

  /// The weight sets the run's plugins keep, each declared at init by the plugin that keeps it (the EMA plugin:
  /// "ema" and "raw"): the names eval_weights may ask for. After init the trainer refuses a request none of them
  /// is, listing those that are, so the command line knows no plugin's sets.
  std::vector<std::string> weight_sets;
  /// Whether a higher value is better, by the metric's logged name. A plugin declares its own metrics' at init;
  /// after init the trainer adds its own: each evaluation pass's metrics (Metric::higher_is_better) and losses
  /// ("train/loss", "<label>/loss": lower is better), for every pass of eval_labels, a plugin's declaration
  /// giving way to them. A metric absent here has no known direction ("lr", "ema/smoothing").
  std::map<std::string, bool> metric_higher_is_better;
  /// Metrics a plugin compares by their direction (a stopper's `monitor`, the EMA's `select.metric`), named at init
  /// when its configuration leaves the direction to the metric (no `mode`). After init the trainer checks that
  /// each logged one has a direction in metric_higher_is_better, so one that has none is a configuration error at
  /// its key before the run starts, `baton check` included. Name the metric in watched_metrics as well: that check
  /// reports a name the run never logs.
  std::vector<WatchedMetric> directed_metrics;
  /// metric_higher_is_better's entry for `metric`; none while its direction is unknown (before init completes,
  /// or a metric whose direction no one declares).
  std::optional<bool> higher_is_better(const std::string& metric) const {
    auto it = metric_higher_is_better.find(metric);
    if (it == metric_higher_is_better.end()) return std::nullopt;
    return it->second;
  }

  // New members go here, after every other one (the layout rule above).
#ifdef BATON_ABI_TEST_EXTRA_STATE_MEMBER
  /// Only in the ABI compatibility test's build: a member a newer baton appended.
  std::string abi_test_appended = "appended by a newer baton";
#endif
};

/// The generator of the step running in this thread (State::generator), for a model's forward, which sees only
/// the batch; throws baton::Error outside a training, evaluation or prediction step.
BATON_API at::Generator& step_generator();

}  // namespace baton
