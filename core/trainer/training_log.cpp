#include "trainer/training_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <ATen/ops/zeros.h>
#include <torch/optim/optimizer.h>

#include "baton/communicator.h"
#include "baton/error.h"
#include "logging/run_logger.h"
#include "baton/time.h"

namespace baton {

// The bar starts at an epoch's first batch, or at the first batch after a resume (counting from there, so rate and
// ETA cover only the steps run now).
void TrainingLog::batch_start(State& state, Logger&) {
  if (bar_ || options_.quiet || state.facts.rank() != 0) return;
  const Timestamp& now = state.progress.now;
  ProgressOptions p;
  p.label = "epoch " + std::to_string(now.epoch + 1);
  if (options_.max_duration.unit() == TimeUnit::epoch) p.label += "/" + std::to_string(options_.max_duration.count());
  p.total = state.progress.batches_per_epoch;
  p.terminal = options_.progress && is_terminal(stderr);
  p.plain_every = std::max<std::int64_t>(1, options_.log_interval.count());
  p.initial = now.batch_in_epoch;
  bar_.emplace(p);
}

void TrainingLog::batch_end(State& state, Logger&) {
  const at::Tensor loss = state.loss.detach();
  if (!loss_sum_.defined())
    loss_sum_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(loss.device()));
  loss_sum_.add_(loss);
  if (!reported_nonfinite_) window_losses_.push_back(loss);  // a handle, no copy and no sync
  count_ += 1;
  const Timestamp& now = state.progress.now;
  const std::int64_t log_every = std::max<std::int64_t>(1, options_.log_interval.count());
  if (now.batch % log_every == 0 || now.batch_in_epoch == state.progress.batches_per_epoch) log_loss(state);
  if (bar_) bar_->update(now.batch_in_epoch, bar_metrics());
}

void TrainingLog::add_step_value(const std::string& name, double value) {
  if (name.empty() || name.find('/') != std::string::npos || name == "loss")
    throw Error("StepContext::log: \"" + name + "\" cannot be logged as train/<name>: expected a name without '/' "
                "other than \"loss\"");
  auto& [sum, count] = step_values_[name];
  sum += value;
  ++count;
}

// The model step's own values, each its window's mean over every rank's batches (one collective for all of them,
// in name order, which every rank shares).
void TrainingLog::log_step_values(State& state) {
  if (step_values_.empty()) return;
  std::vector<double> sums;
  for (const auto& [name, value] : step_values_) {
    sums.push_back(value.first);
    sums.push_back(static_cast<double>(value.second));
  }
  if (state.facts.communicator()) sums = state.facts.communicator()->sum(sums);
  std::size_t i = 0;
  for (const auto& [name, value] : step_values_) {
    logger_.log_metric("train/" + name, sums[i] / sums[i + 1]);
    i += 2;
  }
  step_values_.clear();
}

// An evaluation's lines end the bar's line for the rest of its epoch; the next epoch starts a new bar.
void TrainingLog::eval_before_all(State&, Logger&) { finish_bar(/*next_epoch=*/false); }
void TrainingLog::epoch_end(State&, Logger&) { finish_bar(/*next_epoch=*/true); }
void TrainingLog::fit_end(State&, Logger&) { finish_bar(/*next_epoch=*/true); }

void TrainingLog::finish_bar(bool next_epoch) {
  if (!bar_) return;
  bar_->finish(bar_metrics());
  if (next_epoch) bar_.reset();
}

// The window's mean loss over every rank's batches (each rank calls this at the same batches).
void TrainingLog::log_loss(State& state) {
  double sum = loss_sum_.item<double>();
  double total = static_cast<double>(count_);
  if (state.facts.communicator()) {
    const auto sums = state.facts.communicator()->sum({sum, total});
    sum = sums[0];
    total = sums[1];
  }
  if (!std::isfinite(sum)) report_nonfinite_loss(state, count_);
  window_losses_.clear();
  logger_.log_metric("train/loss", sum / total);
  log_step_values(state);
  logger_.log_metric("lr", state.facts.optimizer()->param_groups().front().options().get_lr());
  // A model of several optimizers (a GAN's generator and discriminator): each one's under its name too.
  const auto& optimizers = state.facts.optimizers();
  if (optimizers.size() > 1)
    for (const auto& [name, optimizer] : optimizers)
      logger_.log_metric("lr/" + name, optimizer->param_groups().front().options().get_lr());
  logger_.flush();
  last_loss_ = sum / total;
  loss_sum_.zero_();
  count_ = 0;
}

// The first batch of the window just logged whose loss is not finite, as a warning, once per run: after a
// divergence every later loss is NaN too. (Another rank's NaN shows in the reduced sum only: then the window.)
void TrainingLog::report_nonfinite_loss(const State& state, std::int64_t count) {
  if (reported_nonfinite_) return;
  reported_nonfinite_ = true;
  const Timestamp& now = state.progress.now;
  std::int64_t first = now.batch - count;  // 0-based batch count before the window's first batch
  double value = std::numeric_limits<double>::quiet_NaN();
  for (const auto& loss : window_losses_) {
    value = loss.item<double>();
    if (!std::isfinite(value)) break;
    ++first;
  }
  logger_.warn("the training loss is not finite (" + format_decimals(value, 4) + ") at training batch " +
               std::to_string(first + 1) + " of the run (in the " + std::to_string(count) + " batches logged at " +
               format_timestamp(now) + "): the weights have likely diverged; lower optimizer.lr, or add the " +
               "nan_monitor plugin to stop at the first one");
}

// Beside the count: the loss once this process has logged one, nothing before.
std::vector<std::pair<std::string, double>> TrainingLog::bar_metrics() const {
  if (!last_loss_) return {};
  return {{"loss", *last_loss_}};
}

}  // namespace baton
