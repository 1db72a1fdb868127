#pragma once
// speed_monitor: training throughput over a sliding window of batches, and wall-clock time (Composer's
// SpeedMonitor). Each batch is timed from before_dataloader to batch_end, so evaluation, checkpoints and
// anything else between batches count in no throughput and not in wall_clock/train; evaluation time is
// wall_clock/val. The clock is a constructor argument so tests can drive it; the plugin uses a steady clock.
#include <cstdint>
#include <deque>
#include <functional>

#include "baton/plugin.h"

namespace baton::speed_monitor {

/// Seconds from any fixed origin; only differences are used.
using Clock = std::function<double()>;

class SpeedMonitor : public Callback {
 public:
  SpeedMonitor(const PluginConfig& config, Clock clock);

  void declare(Declarations& run) const override;
  void before_dataloader(State& state, Logger& logger) override;
  void batch_end(State& state, Logger& logger) override;
  void eval_before_all(State& state, Logger& logger) override;
  void eval_after_all(State& state, Logger& logger) override;

  /// The totals (wall_clock/train and /val) carry over a resume; the window starts afresh, as in Composer.
  void state_dict(StateDict& out) const override;
  void load_state_dict(const StateDict& in) override;

 private:
  struct Timed {
    double seconds;
    std::int64_t samples;
  };
  void log_wall_clock(Logger& logger) const;

  std::int64_t window_size_;
  Clock clock_;
  std::deque<Timed> window_;  // the last window_size_ batches
  double batch_started_ = 0;
  std::int64_t samples_before_ = 0;
  bool in_batch_ = false;
  double eval_started_ = 0;
  double train_seconds_ = 0;
  double eval_seconds_ = 0;
};

}  // namespace baton::speed_monitor
