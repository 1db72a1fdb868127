#include "speed_monitor.h"

#include <string>
#include <utility>

namespace baton::speed_monitor {

SpeedMonitor::SpeedMonitor(const PluginConfig& config, Clock clock)
    : window_size_(config.get_or<std::int64_t>("window_size", 100)), clock_(std::move(clock)) {
  if (window_size_ < 1)
    config.fail("window_size", "expected a number of batches >= 1, got " + std::to_string(window_size_));
}

void SpeedMonitor::declare(Declarations& run) const {
  // More throughput is better, for a stopper or selection without `mode`. The wall-clock times have no better
  // direction: a stopper on them says which way it watches with `mode`.
  for (const char* name : {"throughput/batches_per_sec", "throughput/samples_per_sec",
                           "throughput/device/batches_per_sec", "throughput/device/samples_per_sec"})
    run.metric(name, /*higher_is_better=*/true);
  for (const char* name : {"wall_clock/train", "wall_clock/val", "wall_clock/total"}) run.metric(name);
}

void SpeedMonitor::before_dataloader(State& state, Logger&) {
  batch_started_ = clock_();
  samples_before_ = state.timestamp().sample;
  in_batch_ = true;
}

void SpeedMonitor::batch_end(State& state, Logger& logger) {
  if (!in_batch_) return;  // batch_end without its start cannot be timed (not fired so by the trainer)
  in_batch_ = false;
  const double seconds = clock_() - batch_started_;
  // The timestamp counts the samples of every rank, so these are the run's samples, as Composer's.
  window_.push_back(Timed{seconds, state.timestamp().sample - samples_before_});
  if (static_cast<std::int64_t>(window_.size()) > window_size_) window_.pop_front();
  train_seconds_ += seconds;
  // As in Composer, throughput only once the window is full, so the first value is not a short, noisy one.
  if (static_cast<std::int64_t>(window_.size()) == window_size_) {
    double window_seconds = 0;
    std::int64_t window_samples = 0;
    for (const auto& batch : window_) {
      window_seconds += batch.seconds;
      window_samples += batch.samples;
    }
    if (window_seconds > 0) {
      const double batches_per_sec = static_cast<double>(window_size_) / window_seconds;
      const double samples_per_sec = static_cast<double>(window_samples) / window_seconds;
      const double ranks = static_cast<double>(state.facts.world_size());
      logger.log_metric("throughput/batches_per_sec", batches_per_sec);
      logger.log_metric("throughput/samples_per_sec", samples_per_sec);
      logger.log_metric("throughput/device/batches_per_sec", batches_per_sec / ranks);
      logger.log_metric("throughput/device/samples_per_sec", samples_per_sec / ranks);
    }
  }
  log_wall_clock(logger);
}

void SpeedMonitor::eval_before_all(State&, Logger&) { eval_started_ = clock_(); }

void SpeedMonitor::eval_after_all(State&, Logger& logger) {
  eval_seconds_ += clock_() - eval_started_;
  // Logged here as well, so the time of the final evaluation, after the last batch, is recorded.
  log_wall_clock(logger);
}

void SpeedMonitor::log_wall_clock(Logger& logger) const {
  logger.log_metric("wall_clock/train", train_seconds_);
  logger.log_metric("wall_clock/val", eval_seconds_);
  logger.log_metric("wall_clock/total", train_seconds_ + eval_seconds_);
}

void SpeedMonitor::state_dict(StateDict& out) const {
  out.set_double("train_seconds", train_seconds_);
  out.set_double("eval_seconds", eval_seconds_);
}

void SpeedMonitor::load_state_dict(const StateDict& in) {
  window_.clear();
  in_batch_ = false;
  train_seconds_ = in.has("train_seconds") ? in.get_double("train_seconds") : 0;
  eval_seconds_ = in.has("eval_seconds") ? in.get_double("eval_seconds") : 0;
}

}  // namespace baton::speed_monitor
