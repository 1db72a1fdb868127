#pragma once
// The trainer's state and its parts, shared by the files that implement it: trainer.cpp (the timeline: fit, the
// epoch, the batch and its step), trainer_setup.cpp (construction, init and its checks, standalone evaluation and
// prediction, the public Trainer), and passes.cpp (what a model's own training step and a plugin's extra passes
// run through).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "baton/trainer.h"
#include "data/sampler.h"
#include "data/train_loader.h"
#include "engine/engine.h"
#include "logging/run_logger.h"
#include "sharding/zero.h"
#include "trainer/checkpoint_selection.h"
#include "trainer/checkpointer.h"
#include "trainer/evaluator.h"
#include "trainer/loss_scaler.h"
#include "trainer/precision.h"
#include "trainer/run_context.h"
#include "trainer/run_outputs.h"
#include "trainer/schedule.h"
#include "trainer/step_graphs.h"
#include "trainer/stop_agreement.h"
#include "trainer/training_log.h"
#include "trainer/wall_clock.h"

namespace baton {

/// The events a recorded step (trainer.cuda_graphs) holds before its batch_end (graph_step.cpp).
std::vector<Event> recorded_step_events();

/// "generator, discriminator": the run's optimizers by name, for errors (trainer_setup.cpp).
std::string optimizer_names(const std::vector<NamedOptimizer>& optimizers);

struct Trainer::Impl {
  Impl(Model model_in, std::shared_ptr<torch::optim::Optimizer> optimizer_in, std::shared_ptr<const Dataset> train_in,
       std::shared_ptr<const Dataset> eval_in, TrainerOptions options_in);

  // --- setup (trainer_setup.cpp) ---
  RunLoggerOptions logger_options() const;
  std::string metrics_path() const;
  void add_eval_sets();
  void ensure_init();
  void offer_probe();
  void start_from_weights();
  void check_first_batch();
  void check_graphs() const;
  void settle_declarations();
  void prepare_standalone(const std::string& checkpoint, const char* command);
  std::string nonfinite_tensor() const;
  void note_checkpoint();
  double first_save_guess() const;

  // --- the timeline (trainer.cpp) ---
  FitResult fit();
  void train_epoch();
  void train_batch();
  void eager_step();
  // trainer.cuda_graphs (graph_step.cpp)
  std::string graph_refusal() const;
  bool graph_step(std::int64_t samples);
  std::vector<StepGraphs::Graph>::iterator record_step(std::int64_t samples);
  bool evaluate_and_save_after_batch(double fraction_before, bool epoch_ends);
  void end_epoch();
  void roll_back();
  void apply_lr_schedule();
  std::string step_where() const;
  at::Tensor step_once();
  void forward_backward();
  void forward_backward_batches();
  at::Tensor own_training_step();
  bool reduce_gradients();
  void zero_gradients();
  void step_optimizers();
  void backward(const at::Tensor& loss);
  void finish(std::exception_ptr failure);
  void close(std::exception_ptr failure);
  RunEnd run_end(const std::exception_ptr& failure) const;
  std::vector<EvalResult> evaluate_standalone(const std::string& checkpoint);
  PredictResult predict(const Dataset& data, const std::string& checkpoint);

  Communicator* comm() const { return options.communicator.get(); }
  void fire(Event event, EngineSide side = EngineSide::all) { engine.fire(event, side); }
  bool stop_now() { return stopping.check(state, read_clock()); }
  /// Seconds since fit() started; what the wall clock reads.
  double fit_seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_started).count(); }
  ClockReading read_clock() const;
  /// The run stopped for trainer.time_limit: a pause that a resume continues, not the run's end.
  bool paused_for_time() const { return stopping.cause() == StopCause::time_limit; }
  /// An evaluation during fit, timed for the wall clock.
  void evaluate_in_fit(Evaluator& set);
  /// A checkpoint event (Checkpointer::event), a save timed for the wall clock and noted.
  void checkpoint_event(Event event, bool save, TimeUnit unit);
  // Every evaluation set with its schedule, the main one first: the order their evaluations run and are listed in.
  template <class Visit>
  void for_each_eval_set(Visit visit) {
    visit(evaluator, schedule);
    for (auto& set : extra_sets) visit(*set.evaluator, set.schedule);
  }

  struct OwnStep;  // passes.cpp

  // What a plugin may run besides events (baton::TrainingPasses on State::passes), each in its own window
  // (passes.cpp).
  struct Passes final : TrainingPasses {
    explicit Passes(Impl& trainer) : t(trainer) {}
    bool recompute_gradients() override;
    void forward_training_data() override;
    Impl& t;
    // The step's batch while recompute_gradients() is open: during after_train_batch of a step the trainer computes.
    const Batch* step_batch = nullptr;
  };

  // Declared in construction order: each collaborator takes references to the members above it.
  TrainerOptions options;
  at::Device device;  // options.device, parsed once
  Model model;
  std::shared_ptr<torch::nn::Module> module;
  /// Sharding zero1 / zero2: the step over this rank's shards, whose optimizer `optimizers` holds; null without.
  std::unique_ptr<sharding::ShardedStep> sharded;
  std::string param_groups;  // the optimizer's groups as options.param_groups made them; "" for one group
  std::vector<NamedOptimizer> optimizers;
  std::shared_ptr<torch::optim::Optimizer> optimizer;  // the first of them
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> eval;
  BatchSampler sampler;
  TrainLoader train_loader;  // after `train` and `sampler`, which it reads
  State state;
  PluginList plugins;
  Declarations declarations;  // what the plugins declared as they were added
  RunLogger logger;
  Engine engine;
  std::vector<double> base_lrs;
  PrecisionChoice chosen_precision;  // options.precision on this device ("auto" resolved), logged when it warns
  Precision precision;               // chosen_precision's
  RunContext context;                  // the above, for the collaborators below
  std::unique_ptr<LossScaler> scaler;  // amp_fp16 only
  CheckpointSelection selection;  // [checkpoint] keep_best: best/
  Checkpointer checkpoints;
  LossFunction loss;
  std::vector<EvalRecord> history;  // every evaluation set's, one record per point of the run
  Evaluator evaluator;              // the main set (`eval`)
  Schedule schedule;
  bool run_failed = false;
  TrainingLog training_log;
  ModelExport model_export;
  EvalPlots plots;
  struct EvalSetRun {
    std::unique_ptr<Evaluator> evaluator;
    Schedule schedule;
  };
  std::vector<EvalSetRun> extra_sets;  // TrainerOptions::eval_sets, each at its own interval
  bool initialised = false;
  StopAgreement stopping;
  WallClock clock;  // trainer.time_limit and checkpoints by time
  std::chrono::steady_clock::time_point fit_started;
  std::string noted_checkpoint;        // the last checkpoint note_checkpoint looked at
  std::string last_finite_checkpoint;  // the last one saved with finite weights
  Passes passes{*this};
  bool step_overflow = false;  // the step's gradients hold an inf or a NaN (amp_fp16): the step is skipped
  bool fitting = false;        // from fit_start to the end of training
  bool in_step = false;        // inside train_batch
  /// trainer.cuda_graphs: the recorded steps, from fit_start; null without.
  std::unique_ptr<StepGraphs> graphs;
  /// Which plugins the step's batch_end reaches: after a recorded step, those outside the graph.
  EngineSide batch_end_side = EngineSide::all;
};

}  // namespace baton
