#pragma once
// The trainer's state as plugins see it: the run-time data alone (time, the step's batch, outputs and loss, the
// latest metrics, the evaluation running, the checkpoint being written, the step's random numbers, a way to ask the
// run to stop), and the run's fixed facts behind methods (State::facts: model, optimizers, ranks, run folder, what
// plugins declared). Only ATen's tensor type comes in (<ATen/core/Tensor.h>, through baton/batch.h); a plugin that
// computes with tensors includes the ATen ops it uses (<ATen/ops/softmax.h>, ...).
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
#include "baton/run_facts.h"
#include "baton/state_dict.h"
#include "baton/time.h"

namespace baton {

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

/// A request to end the run: State::request_stop sets it (the first reason wins), the trainer reads it after each
/// batch. Its own struct so that State needs no private members (see State's layout rule).
struct StopRequest {
  bool requested = false;
  std::string reason;
};

/// What a plugin that declares itself capturable (Declarations::capturable) sees of trainer.cuda_graphs. The graph
/// holds the step from before_forward to the optimizer step and the capturable plugins' batch_end handlers.
struct StepCapture {
  /// The run records steps (trainer.cuda_graphs = true and the step can be recorded); false in every other run.
  bool active = false;
  /// True while the step's events (before_forward … after_train_batch, then batch_end) fire after a replay: the
  /// device work their handlers recorded has run already, so they do only their host bookkeeping (counters) and
  /// launch nothing. False when they record (their work is then recorded, not run) and on uncaptured steps.
  bool replayed = false;
  /// Set at batch_start by a plugin whose recorded work is not the same every step (the EMA: no update before
  /// ema_start or between update points, an update at them): the values it adds describe this step's work, and
  /// each distinct combination is a graph of its own. Cleared before batch_start.
  std::vector<std::int64_t> variant;
  /// Set at batch_start to run this step uncaptured, saying why (the EMA's first update, which copies the weights).
  std::string uncaptured;
};

/// Layout rule: a plugin reads State's members at the offsets it was compiled with, and only baton creates a State
/// (plugins get a reference), so State may grow but what is in it never moves: new members are appended at the end,
/// none is inserted, removed, reordered or retyped, and every member is public (members under different access
/// specifiers may be laid out in any order). Only data that changes during a run lives here: a fact fixed for the
/// run is a method of RunFacts, and a plugin's declaration a method of Declarations, both of which grow without
/// moving anything. The ABI test (core/engine/abi_compat_test.cpp) appends one and loads plugins built without it.
struct BATON_API State {
  /// The run's fixed facts: model, optimizers, device, ranks, seed, run folder, plugins, what plugins declared.
  RunFacts facts;

  /// Time so far and the run's length.
  Progress progress;
  const Timestamp& timestamp() const { return progress.now; }

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
  /// The evaluation pass running now (one of RunFacts::eval_passes), from eval_start to eval_end; empty outside.
  std::string eval_label;
  /// The evaluation set of the passes running now, from eval_before_all to eval_after_all: empty for the main one,
  /// else an extra set's name ([[eval]], TrainerOptions::eval_sets), whose metrics are logged as
  /// "<label>/<set>/<metric>".
  std::string eval_set;
  /// The weight set the model holds, named by the plugin that swapped it in (the EMA plugin: "ema" or "raw"):
  /// written at predict_start by the plugin that keeps the set a prediction uses, and reported as
  /// PredictResult::weights; empty when no plugin names one.
  std::string weights;

  /// The newest committed checkpoint folder; empty when there is none yet.
  std::string last_checkpoint;
  /// Non-null during *_checkpoint events when a save is due.
  CheckpointInProgress* checkpoint = nullptr;

  /// The step's random numbers (a CPU generator): reseeded before every training step from the run's seed, the
  /// batch count and the rank, and before every evaluation or prediction batch from the seed and the batch's
  /// first sample, so what a model or plugin draws from it (timesteps, noise, masks) is the same in a resumed run
  /// and the same for every weight set evaluated. Draw on the CPU and move the result where it is needed.
  at::Generator generator;

  /// Asks the trainer to stop after the current batch (it still fires batch_end, checkpoints and fit_end). Ask
  /// through request_stop() rather than by writing `stop_request`: it keeps the first reason, the one that explains
  /// why the run ended.
  void request_stop(std::string reason);
  bool stop_requested() const { return stop_request.requested; }
  const std::string& stop_reason() const { return stop_request.reason; }
  StopRequest stop_request;

  /// Set during after_train_batch, on every rank alike, to leave this batch's optimizer step out: the weights stay
  /// as they were (a loss spike, a bad batch: the loss_spike plugin); the batch still counts as trained. Cleared
  /// before each batch. A model that steps its own optimizers has stepped by then: setting it there is an error.
  bool skip_step = false;

  /// Asks the trainer to go back to the last checkpoint (State::last_checkpoint) once this batch has ended, after
  /// batch_end: the weights, the optimizer and every plugin's state come back from it, while the run's time and data
  /// order go on from this batch, so the batches since that checkpoint are skipped (a loss spike whose damage built
  /// up over them: the loss_spike plugin's action = "rollback"). One rank's request is every rank's. Without a
  /// checkpoint yet, or in a sharded run, nothing is restored and the trainer warns. Ask through
  /// request_rollback(), which keeps the first reason; the trainer clears it once it has acted on it.
  void request_rollback(std::string reason);
  bool rollback_requested() const { return !rollback_reason.empty(); }
  std::string rollback_reason;

  /// trainer.cuda_graphs (docs/performance.md): the training step recorded once as a CUDA graph and replayed.
  StepCapture capture;

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
