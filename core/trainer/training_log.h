#pragma once
// The console and metrics side of training, as a built-in callback the trainer adds before the configured plugins
// (so at batch_end the loss is logged before any plugin reads it): the epoch's progress bar (rank 0, unless quiet),
// train/loss and lr every log_interval batches and at each epoch's end (reduced across ranks), and a warning naming
// the first batch whose loss is not finite.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/plugin.h"
#include "baton/trainer.h"
#include "logging/progress.h"

namespace baton {

class RunLogger;

class TrainingLog final : public Callback {
 public:
  TrainingLog(RunLogger& logger, const TrainerOptions& options) : logger_(logger), options_(options) {}

  void batch_start(State& state, Logger& logger) override;
  void batch_end(State& state, Logger& logger) override;
  void eval_before_all(State& state, Logger& logger) override;
  void epoch_end(State& state, Logger& logger) override;
  void fit_end(State& state, Logger& logger) override;
  /// A value a model's own step logs (StepContext::log): averaged with the others of its name until the next
  /// train/loss, then logged as "train/<name>".
  void add_step_value(const std::string& name, double value);

 private:
  void log_loss(State& state);
  void log_step_values(State& state);
  void report_nonfinite_loss(const State& state, std::int64_t count);
  /// The epoch's bar ends its line (before an evaluation's lines, at the epoch's end, at a stop); `next_epoch`: the
  /// next batch starts a new one (else the bar stays finished until its epoch ends).
  void finish_bar(bool next_epoch);
  std::vector<std::pair<std::string, double>> bar_metrics() const;

  RunLogger& logger_;
  const TrainerOptions& options_;
  std::optional<ProgressBar> bar_;
  at::Tensor loss_sum_;  // since the last log, on the device: summed without a sync per batch
  std::int64_t count_ = 0;
  std::optional<double> last_loss_;  // the train/loss this process last logged; none before its first
  std::map<std::string, std::pair<double, std::int64_t>> step_values_;  // name -> (sum, count) since the last log
  std::vector<at::Tensor> window_losses_;  // each batch's loss since the last log, until a non-finite one is reported
  bool reported_nonfinite_ = false;
};

}  // namespace baton
