// threshold_stopper: stops the run once a metric crosses a threshold (Composer's ThresholdStopper).
// docs/algorithms.md has the keys and an example.
#include <string>

#include "../common/metric_watch.h"
#include "baton/plugin.h"

namespace {

using baton::monitors::Goal;

class ThresholdStopper final : public baton::monitors::MetricStopper {
 public:
  explicit ThresholdStopper(const baton::PluginConfig& config)
      : MetricStopper("threshold_stopper", config), stop_on_batch_(config.get_or<bool>("stop_on_batch", false)) {
    if (!config.has("threshold")) config.fail("threshold", "missing: expected the value at which to stop, e.g. 0.9");
    threshold_ = config.get<double>("threshold");  // get<double> refuses nan and inf
  }

  void state_dict(baton::StateDict& out) const override { memory_.save(out); }
  void load_state_dict(const baton::StateDict& in) override { memory_.load(in); }

 private:
  // Training and plugin metrics: as in Composer, at the end of each epoch, and after every batch with
  // stop_on_batch.
  bool checks_each_batch() const override { return stop_on_batch_; }

  // Strictly beyond the threshold, as Composer compares (torch.greater / torch.less); nan never crosses.
  void check(baton::State& state, double value) override {
    seen_ = true;
    const bool maximize = goal() == Goal::maximize;
    const bool crossed = maximize ? value > threshold_ : value < threshold_;
    if (!crossed || too_late(state)) return;
    const auto& now = state.timestamp();
    memory_.stop(state, "threshold_stopper: " + monitor_ + " " + baton::format_number(value) +
                            (maximize ? " > " : " < ") + "threshold " +
                            baton::format_number(threshold_) + " at " + baton::format_timestamp(now));
  }

  bool stop_on_batch_;
  double threshold_ = 0;
};

}  // namespace

BATON_PLUGIN(ThresholdStopper, "threshold_stopper", "1.0.0", "stops the run once a metric crosses a threshold")
