#pragma once
// The trainer's inference collaborator: the passes over the evaluation set (eval_before_all, then for each label
// in RunFacts::eval_passes eval_start … eval_end, then eval_after_all), their loss and metrics reduced across ranks,
// the run's history of evaluations for the final table and chart, and prediction over a dataset.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "baton/trainer.h"
#include "data/prefetch_loader.h"
#include "trainer/run_context.h"

namespace baton {

class Engine;
class RunLogger;

/// The loader settings of a run (TrainerSettings::workers and prefetch) for batches on `device`, shared by training,
/// evaluation and prediction.
PrefetchOptions loader_options(const TrainerSettings& settings, c10::Device device);

/// The loss of a run that names none: cross entropy for class targets, mean squared error for values. One choice
/// for both ways in: the Trainer without TrainerOptions::loss, and `baton train` with a [loss] table that has no
/// name (whose keys that loss then reads).
std::string default_loss_name(const DataSpec& data);

/// The outputs of consecutive parts of a batch (microbatches, prediction batches) as one: every per-sample field
/// joined along the samples. A scalar output (an auxiliary loss) belongs to its part alone and is left out.
Outputs join_outputs(const std::vector<Outputs>& parts);

class Evaluator {
 public:
  /// `set`: empty for the main evaluation set ([data]'s, metrics "<pass>/<metric>"), else an extra set's name
  /// (metrics "<pass>/<set>/<metric>"). `metrics` empty: the defaults for `data`. Every evaluator of a trainer
  /// records into the same `history`, one record per point of the run.
  Evaluator(const RunContext& run, const Model& model, const Dataset& data, LossFunction loss,
            std::vector<NamedMetric> metrics, std::string set, std::vector<EvalRecord>& history);

  bool has_data() const { return data_.size() > 0; }
  /// Every pass of RunFacts::eval_passes; one result per pass.
  std::vector<EvalResult> run();
  /// Runs the model over `data` (eval_batch_size at a time) as predict_start, per batch predict_batch_start …
  /// predict_batch_end with the batch and its outputs on State, then predict_end. Every rank predicts the whole
  /// set, so a plugin's collectives (a sharded EMA's swap) stay in step.
  PredictResult predict(const Dataset& data);
  /// run() at a point of training, kept in the history (with every metric plugins logged during it).
  void run_in_fit();
  /// The batch count of the last evaluation in fit, -1 before any.
  std::int64_t last_batch() const { return last_batch_; }
  /// A resumed run's earlier evaluations, read back from its metrics.jsonl up to the resume point.
  void load_history(const std::string& metrics_path, std::int64_t resumed_at);
  const std::string& set() const { return set_; }
  /// The metrics each pass computes, in order.
  const std::vector<NamedMetric>& metrics() const { return metrics_; }
  /// The names the passes `labels` log on this set, in the order logged (none when the set is empty).
  std::vector<std::string> metric_names(const std::vector<std::string>& labels) const;
  /// The same names, each with whether a higher value is better (the metric's own answer; a loss: lower).
  std::vector<std::pair<std::string, bool>> metric_directions(const std::vector<std::string>& labels) const;
  /// accuracy for class targets; mae, rmse, r2 for values; none for an empty set.
  static std::vector<NamedMetric> default_metrics(const DataSpec& spec);

 private:
  EvalResult pass(const std::string& label);
  /// "<label>/<name>", or "<label>/<set>/<name>" for an extra set.
  std::string key(const std::string& label, const std::string& name) const;
  /// A model that evaluates with a form of its own (it samples) has outputs no training loss compares.
  bool logs_loss() const;
  /// Whether a logged metric is one this evaluator computes (of any pass label).
  bool owns(const std::string& metric) const;

  State& state_;
  Engine& engine_;
  RunLogger& logger_;
  const TrainerOptions& options_;
  Precision precision_;
  at::Device device_;
  const Model& model_;
  const Dataset& data_;
  LossFunction loss_;
  std::vector<NamedMetric> metrics_;
  std::string set_;
  std::vector<EvalRecord>& history_;
  std::int64_t last_batch_ = -1;
};

}  // namespace baton
