// threshold_stopper: stops the run once a metric crosses a threshold (Composer's ThresholdStopper).
// docs/algorithms.md has the keys and an example.
#include <string>

#include "../common/metric_watch.h"
#include "baton/plugin.h"

namespace {

using baton::monitors::Goal;

class ThresholdStopper final : public baton::Callback {
 public:
  explicit ThresholdStopper(const baton::PluginConfig& config)
      : monitor_(baton::monitors::read_monitor(config)),
        goal_(baton::monitors::read_goal(config, monitor_)),
        stop_on_batch_(config.get_or<bool>("stop_on_batch", false)) {
    if (!config.has("threshold")) config.fail("threshold", "missing: expected the value at which to stop, e.g. 0.9");
    threshold_ = config.get<double>("threshold");  // get<double> refuses nan and inf
  }

  void fit_start(baton::State& state, baton::Logger&) override {
    pass_ = baton::monitors::eval_pass_of(monitor_, state);  // known only now: plugins add passes at init
    fitting_ = true;
    // A run that stops again at once checks nothing, and its fit_end has no reason to warn about that.
    if (memory_.repeat_if_resumed_there(state)) seen_ = true;
  }

  // Every pass's metrics, its own and those plugins log at its eval_end, are in by eval_after_all.
  void eval_after_all(baton::State& state, baton::Logger&) override {
    if (!fitting_ || pass_.empty()) return;  // not in `baton eval`, which only evaluates
    auto it = state.metrics.find(monitor_);
    if (it == state.metrics.end())
      throw baton::Error("threshold_stopper: the '" + pass_ + "' evaluation logged no metric '" + monitor_ +
                         "' (it logs " + pass_ + "/loss and " + pass_ + "/accuracy; plugins may add others)");
    check(state, it->second);
  }

  // Training and plugin metrics: as in Composer, at the end of each epoch, and after every batch with
  // stop_on_batch.
  void epoch_end(baton::State& state, baton::Logger&) override {
    if (fitting_ && pass_.empty()) check_latest(state);
  }
  void batch_end(baton::State& state, baton::Logger&) override {
    if (fitting_ && pass_.empty() && stop_on_batch_) check_latest(state);
  }

  void fit_end(baton::State&, baton::Logger& logger) override {
    fitting_ = false;
    if (!seen_)
      logger.warn("threshold_stopper: no metric '" + monitor_ + "' was logged during the run, so it never checked; "
                  "is the name right (e.g. \"eval/accuracy\", \"train/loss\")?");
  }

  void state_dict(baton::StateDict& out) const override { memory_.save(out); }
  void load_state_dict(const baton::StateDict& in) override { memory_.load(in); }

 private:
  void check_latest(baton::State& state) {
    auto it = state.metrics.find(monitor_);
    if (it != state.metrics.end()) check(state, it->second);
  }

  // Strictly beyond the threshold, as Composer compares (torch.greater / torch.less); nan never crosses.
  void check(baton::State& state, double value) {
    seen_ = true;
    const bool crossed = goal_ == Goal::maximize ? value > threshold_ : value < threshold_;
    // A stop at the run's last batch would stop nothing and only make a finished run read as stopped.
    if (!crossed || state.stop_requested() || state.progress.reached(state.progress.max_duration)) return;
    const auto& now = state.timestamp();
    memory_.stop(state, "threshold_stopper: " + monitor_ + " " + baton::monitors::format_value(value) +
                            (goal_ == Goal::maximize ? " > " : " < ") + "threshold " +
                            baton::monitors::format_value(threshold_) + " at " +
                            baton::monitors::format_time(now.epoch, now.batch));
  }

  std::string monitor_;
  Goal goal_;
  bool stop_on_batch_;
  double threshold_ = 0;
  std::string pass_;  // the evaluation pass whose metric this is; "" for a training or plugin metric
  bool seen_ = false;
  bool fitting_ = false;  // between fit_start and fit_end
  baton::monitors::StopMemory memory_;
};

}  // namespace

BATON_PLUGIN(ThresholdStopper, "threshold_stopper", "1.0.0", "stops the run once a metric crosses a threshold")
