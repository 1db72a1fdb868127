// early_stopper: stops the run when a metric has not improved for longer than `patience` (Composer's
// EarlyStopper). docs/algorithms.md has the keys and an example.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "../common/metric_watch.h"
#include "baton/plugin.h"

namespace {

using baton::monitors::Goal;

// `patience`: a time in ba or ep, or an integer number of epochs (Composer takes both); "1ep" by default.
baton::Time read_patience(const baton::PluginConfig& config) {
  const std::vector<baton::TimeUnit> units = {baton::TimeUnit::batch, baton::TimeUnit::epoch};
  if (!config.has("patience")) return baton::Time(1, baton::TimeUnit::epoch);
  std::optional<std::int64_t> epochs;
  try {
    epochs = config.get<std::int64_t>("patience");
  } catch (const baton::ConfigError&) {
    // Not an integer: read below as a time string, whose error names what is accepted.
  }
  if (!epochs) return config.get_time("patience", units);
  if (*epochs < 0) config.fail("patience", "expected a number of epochs >= 0, got " + std::to_string(*epochs));
  return baton::Time(static_cast<double>(*epochs), baton::TimeUnit::epoch);
}

class EarlyStopper final : public baton::monitors::MetricStopper {
 public:
  explicit EarlyStopper(const baton::PluginConfig& config)
      : MetricStopper("early_stopper", config),
        patience_(read_patience(config)),
        min_delta_(config.get_number_or("min_delta", 0.0, baton::Range::at_least(0),
                                        "the least change that counts as an improvement")) {}

  void state_dict(baton::StateDict& out) const override {
    out.set_string("monitor", monitor_);
    out.set_string("mode", baton::monitors::goal_name(goal()));
    out.set_bool("has_best", best_.has_value());
    if (best_) {
      out.set_double("best", *best_);
      out.set_int("best_epoch", best_at_.epoch);
      out.set_int("best_batch", best_at_.batch);
    }
    memory_.save(out);
  }

  // Kept until fit_start: whether the saved best still counts depends on the direction, which the run gives
  // only once init is complete (a checkpoint is loaded after init, before fit_start).
  void load_state_dict(const baton::StateDict& in) override {
    best_.reset();
    memory_ = baton::monitors::StopMemory();
    loaded_ = in;
  }

 private:
  void on_fit_start(baton::Logger& logger) override {
    if (!loaded_) return;
    const baton::StateDict in = std::move(*loaded_);
    loaded_.reset();
    if (in.empty()) return;
    const std::string mode = baton::monitors::goal_name(goal());
    if (in.get_string("monitor") != monitor_ || in.get_string("mode") != mode) {
      // The best value of another metric, or of the other direction, says nothing about this one.
      logger.warn("early_stopper: the checkpoint tracked '" + in.get_string("monitor") + "' (mode " +
                  in.get_string("mode") + "), this run monitors '" + monitor_ + "' (mode " + mode +
                  "): starting afresh");
      return;
    }
    if (in.get_bool("has_best")) {
      seen_ = true;  // the metric came before the resume: no warning that it never did
      best_ = in.get_double("best");
      best_at_.epoch = in.get_int("best_epoch");
      best_at_.batch = in.get_int("best_batch");
    }
    memory_.load(in);
  }

  // Training and plugin metrics: as in Composer, checked at the end of each epoch, and after every batch when
  // patience counts batches.
  bool checks_each_batch() const override { return patience_.unit() == baton::TimeUnit::batch; }

  bool improves(double value, Goal goal) const {
    if (!std::isfinite(*best_)) return std::isfinite(value);  // anything finite beats a nan or inf best
    const double gain = goal == Goal::minimize ? *best_ - value : value - *best_;
    return gain > 0 && gain > min_delta_;
  }

  // Composer's rule: a new best when it improves on the best by more than min_delta; a stop once more than
  // `patience` has passed since the best.
  void check(baton::State& state, double value) override {
    seen_ = true;
    const Goal goal = this->goal();  // at the first value too: a metric without a direction fails there
    const auto& now = state.timestamp();
    if (!best_ || improves(value, goal)) {
      best_ = value;
      best_at_ = now;
      return;
    }
    const bool in_batches = patience_.unit() == baton::TimeUnit::batch;
    const std::int64_t waited = in_batches ? now.batch - best_at_.batch : now.epoch - best_at_.epoch;
    if (waited <= patience_.count() || too_late(state)) return;
    using baton::format_number;
    memory_.stop(state, "early_stopper: " + monitor_ + " has not improved on its best (" + format_number(*best_) +
                            " at " + baton::format_timestamp(best_at_) + ", mode " +
                            baton::monitors::goal_name(goal) + ") by more than " + format_number(min_delta_) +
                            " for more than " + patience_.str() + ": " + format_number(value) + " at " +
                            baton::format_timestamp(now));
  }

  baton::Time patience_;
  double min_delta_;
  std::optional<double> best_;
  baton::Timestamp best_at_;  // when best_ came: its epoch and batch go into the checkpoint
  std::optional<baton::StateDict> loaded_;  // what load_state_dict was given, applied at fit_start
};

}  // namespace

BATON_PLUGIN(EarlyStopper, "early_stopper", "1.0.0",
             "stops the run when a metric has not improved for longer than `patience`")
