// early_stopper: stops the run when a metric has not improved for longer than `patience` (Composer's
// EarlyStopper). docs/algorithms.md has the keys and an example.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

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

class EarlyStopper final : public baton::Callback {
 public:
  explicit EarlyStopper(const baton::PluginConfig& config)
      : monitor_(baton::monitors::read_monitor(config)),
        goal_(baton::monitors::read_goal(config, monitor_)),
        patience_(read_patience(config)),
        min_delta_(config.get_or<double>("min_delta", 0.0)) {
    if (!(min_delta_ >= 0.0))  // get<double> refuses nan and inf
      config.fail("min_delta", "expected a number >= 0 (the least change that counts as an improvement), got " +
                                   baton::monitors::format_value(min_delta_));
  }

  void fit_start(baton::State& state, baton::Logger& logger) override {
    if (!load_warning_.empty()) logger.warn(load_warning_);
    // Known only now: plugins add evaluation passes at init.
    pass_ = baton::monitors::eval_pass_of(monitor_, state);
    fitting_ = true;
    // A run that stops again at once checks nothing, and its fit_end has no reason to warn about that.
    if (memory_.repeat_if_resumed_there(state)) seen_ = true;
  }

  // An evaluation pass's own metrics are logged just before its eval_end, and plugins log theirs at eval_end; all
  // of them are in by eval_after_all, whatever the order of the plugins.
  void eval_after_all(baton::State& state, baton::Logger&) override {
    if (!fitting_ || pass_.empty()) return;  // not in `baton eval`, which only evaluates
    auto it = state.metrics.find(monitor_);
    if (it == state.metrics.end())
      throw baton::Error("early_stopper: the '" + pass_ + "' evaluation logged no metric '" + monitor_ +
                         "' (it logs " + pass_ + "/loss and " + pass_ + "/accuracy; plugins may add others)");
    check(state, it->second);
  }

  // Training and plugin metrics: as in Composer, checked at the end of each epoch, and after every batch when
  // patience counts batches.
  void epoch_end(baton::State& state, baton::Logger&) override {
    if (fitting_ && pass_.empty()) check_latest(state);
  }
  void batch_end(baton::State& state, baton::Logger&) override {
    if (fitting_ && pass_.empty() && patience_.unit() == baton::TimeUnit::batch) check_latest(state);
  }

  void fit_end(baton::State&, baton::Logger& logger) override {
    fitting_ = false;
    if (!seen_ && !best_)
      logger.warn("early_stopper: no metric '" + monitor_ + "' was logged during the run, so it never checked; is "
                  "the name right (e.g. \"eval/accuracy\", \"train/loss\")?");
  }

  void state_dict(baton::StateDict& out) const override {
    out.set_string("monitor", monitor_);
    out.set_string("mode", baton::monitors::goal_name(goal_));
    out.set_bool("has_best", best_.has_value());
    if (best_) {
      out.set_double("best", *best_);
      out.set_int("best_epoch", best_epoch_);
      out.set_int("best_batch", best_batch_);
    }
    memory_.save(out);
  }

  void load_state_dict(const baton::StateDict& in) override {
    best_.reset();
    load_warning_.clear();
    memory_ = baton::monitors::StopMemory();
    if (in.empty()) return;
    const std::string mode = baton::monitors::goal_name(goal_);
    if (in.get_string("monitor") != monitor_ || in.get_string("mode") != mode) {
      // The best value of another metric, or of the other direction, says nothing about this one.
      load_warning_ = "early_stopper: the checkpoint tracked '" + in.get_string("monitor") + "' (mode " +
                      in.get_string("mode") + "), this run monitors '" + monitor_ + "' (mode " + mode +
                      "): starting afresh";
      return;
    }
    if (in.get_bool("has_best")) {
      best_ = in.get_double("best");
      best_epoch_ = in.get_int("best_epoch");
      best_batch_ = in.get_int("best_batch");
    }
    memory_.load(in);
  }

 private:
  void check_latest(baton::State& state) {
    auto it = state.metrics.find(monitor_);
    if (it != state.metrics.end()) check(state, it->second);
  }

  bool improves(double value) const {
    if (!std::isfinite(*best_)) return std::isfinite(value);  // anything finite beats a nan or inf best
    const double gain = goal_ == Goal::minimize ? *best_ - value : value - *best_;
    return gain > 0 && gain > min_delta_;
  }

  // Composer's rule: a new best when it improves on the best by more than min_delta; a stop once more than
  // `patience` has passed since the best.
  void check(baton::State& state, double value) {
    seen_ = true;
    const auto& now = state.timestamp();
    if (!best_ || improves(value)) {
      best_ = value;
      best_epoch_ = now.epoch;
      best_batch_ = now.batch;
      return;
    }
    const bool in_batches = patience_.unit() == baton::TimeUnit::batch;
    const std::int64_t waited = in_batches ? now.batch - best_batch_ : now.epoch - best_epoch_;
    // A stop at the run's last batch would stop nothing and only make a finished run read as stopped.
    if (waited <= patience_.count() || state.stop_requested() || state.progress.reached(state.progress.max_duration))
      return;
    using baton::monitors::format_value;
    memory_.stop(state, "early_stopper: " + monitor_ + " has not improved on its best (" + format_value(*best_) +
                            " at " + baton::monitors::format_time(best_epoch_, best_batch_) + ", mode " +
                            baton::monitors::goal_name(goal_) + ") by more than " + format_value(min_delta_) +
                            " for more than " + patience_.str() + ": " + format_value(value) + " at " +
                            baton::monitors::format_time(now.epoch, now.batch));
  }

  std::string monitor_;
  Goal goal_;
  baton::Time patience_;
  double min_delta_;
  std::string pass_;  // the evaluation pass whose metric this is; "" for a training or plugin metric
  std::optional<double> best_;
  std::int64_t best_epoch_ = 0;
  std::int64_t best_batch_ = 0;
  bool seen_ = false;
  bool fitting_ = false;  // between fit_start and fit_end
  std::string load_warning_;
  baton::monitors::StopMemory memory_;
};

}  // namespace

BATON_PLUGIN(EarlyStopper, "early_stopper", "1.0.0",
             "stops the run when a metric has not improved for longer than `patience`")
