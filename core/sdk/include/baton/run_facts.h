#pragma once
// What stays fixed during a run, as plugins read it (State::facts): the model and optimizers, the device, the
// ranks, the seed, the run folder, the plugins, what every plugin declared (Declarations) merged with the run's own
// metrics, and the services a plugin may call (TrainingPasses, probe_forward). Read through exported methods of a
// class whose layout is one pointer, so a later baton adds facts without moving anything a built plugin reads.
// The model and optimizer are forward-declared: a plugin that touches them includes <torch/nn/module.h> /
// <torch/optim/optimizer.h> itself.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baton/batch.h"
#include "baton/declarations.h"
#include "baton/export.h"
#include "baton/model_tensors.h"

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

/// What the trainer lets a plugin run besides firing events (RunFacts::passes; null when no trainer runs the
/// State, e.g. one a test fills). Only baton implements it; later versions may append virtual functions, never
/// reorder.
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

using NamedOptimizerPointers = std::vector<std::pair<std::string, torch::optim::Optimizer*>>;

class BATON_API RunFacts {
 public:
  RunFacts();
  ~RunFacts();
  RunFacts(const RunFacts&) = delete;
  RunFacts& operator=(const RunFacts&) = delete;

  // --- the run -------------------------------------------------------------------------------------------------
  torch::nn::Module* model() const;
  /// The first of optimizers() (the run's one, named "optimizer", or the model's first own one).
  torch::optim::Optimizer* optimizer() const;
  /// Every optimizer of the run by name: the run's one, or the model's own (Model::with_optimizers).
  const NamedOptimizerPointers& optimizers() const;
  /// "cpu", "cuda", "cuda:1".
  const std::string& device() const;
  /// The run folder (metrics.jsonl, checkpoints/); empty when the run writes nothing.
  const std::string& run_dir() const;
  int rank() const;
  int world_size() const;
  /// The run's seed (trainer.seed). A stochastic plugin draws from a generator seeded by it and the batch count,
  /// so a resumed run draws what the uninterrupted one did.
  std::uint64_t seed() const;
  /// The run's process group when world_size > 1 (null in a single process). Every rank fires the same events in
  /// the same order, so a plugin may run a collective in any event; one that only some ranks reach hangs until
  /// the timeout.
  const std::shared_ptr<Communicator>& communicator() const;
  /// The weight set a standalone evaluation or prediction asks for (`baton eval/predict --weights`); empty for
  /// the plugins' default. The trainer has checked that a plugin of the run declared it.
  const std::string& requested_weights() const;
  /// The ids of the run's plugins, in the order they were added ("ema", "ema#2").
  const std::vector<std::string>& plugins() const;
  /// The trainer's passes a plugin may run; null when no trainer runs this State.
  TrainingPasses* passes() const;
  /// Whether the run shards its parameters' optimizer state over the ranks ([distributed] sharding = zero1, zero2
  /// or zero3): the optimizers then step this rank's shard of the parameters (flat tensors, one per dtype), and from
  /// after_train_batch until the step their gradients are this rank's shard of the averaged gradients. A plugin
  /// that acts on those gradients reads them there; a norm over them is this rank's part, summed over the ranks
  /// (communicator()) for the global one.
  bool sharded() const;
  /// The sharding's name ([distributed] sharding): "none", "zero1", "zero2" or "zero3". Under "zero3" the model's
  /// sharded parameters are empty between steps (each unit is whole only while it runs; baton/unit.h): a plugin
  /// that reads the weights outside the forward refuses that mode.
  const std::string& sharding() const;
  /// Under zero3 while the units are released (during fit, from after fit_start): the parameters the run holds
  /// only as this rank's rows, with their global shapes (HeldRows, baton/model_tensors.h; the rows are views into
  /// the run's shards: writing them writes the weights). Empty otherwise, when the model's tensors are whole.
  std::vector<HeldRows> held_rows() const;

  // --- services, from init on -------------------------------------------------------------------------------------
  /// Whether probe_forward can run (a trainer runs this State).
  bool can_probe() const;
  /// The model's training forward on a batch, without gradients and in evaluation mode (the module's mode is
  /// restored), for a plugin to check at init that the model takes the batches it will make. Throws baton::Error
  /// when no trainer runs this State.
  Outputs probe_forward(const Batch& batch) const;
  /// The first training sample as a batch of one, on the CPU; empty when there is no training data.
  const Batch& example_batch() const;

  // --- what the run logs, complete after init ----------------------------------------------------------------------
  /// Every metric the run logs: its own ("train/loss", "lr", each evaluation pass's "<label>/<metric>", with the
  /// set's name between for an extra set), then what plugins declared.
  const std::vector<std::string>& metric_names() const;
  /// Whether `name` is a metric the run logs: one of metric_names() or of a declared family.
  bool logs(const std::string& name) const;
  /// Whether a higher value of `metric` is better; none while its direction is unknown (before init completes,
  /// or a metric whose direction no one declares: "lr").
  std::optional<bool> higher_is_better(const std::string& metric) const;
  /// For a watched metric: its `mode` when given, else its direction. Throws ConfigError at the metric's key when
  /// neither is known (the trainer checks every watched metric after init, so a plugin calling this from
  /// fit_start on gets an answer).
  bool maximizes(const WatchedMetric& metric) const;
  /// The weight sets the run's plugins keep (each once, in declaration order).
  const std::vector<std::string>& weight_sets() const;
  /// The evaluation passes of every evaluation point, in order: "eval", then those plugins declared.
  const std::vector<std::string>& eval_passes() const;

  // --- written by baton (the trainer, before init) or by a test that fills a State by hand; plugins only read ---
  void set_model(torch::nn::Module* model);
  void set_optimizers(NamedOptimizerPointers optimizers);
  void set_device(std::string device);
  void set_run_dir(std::string run_dir);
  void set_ranks(int rank, int world_size, std::shared_ptr<Communicator> communicator = nullptr);
  void set_seed(std::uint64_t seed);
  void set_requested_weights(std::string weights);
  void add_plugin(std::string id);
  void set_passes(TrainingPasses* passes);
  void set_sharded(bool sharded);
  void set_sharding(std::string sharding);
  void set_held_rows(std::function<std::vector<HeldRows>()> held_rows);
  void set_probe(std::function<Outputs(const Batch&)> forward, Batch example);
  /// The run's metrics with their directions, the families plugins declared, and the sets and passes.
  void set_metrics(std::vector<std::string> names, std::map<std::string, bool> higher_is_better,
                   std::vector<std::string> families = {});
  void set_weight_sets(std::vector<std::string> sets);
  void set_eval_passes(std::vector<std::string> passes);

 private:
  struct Data;
  std::unique_ptr<Data> data_;
};

}  // namespace baton
