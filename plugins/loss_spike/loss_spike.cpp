// loss_spike: watches the training loss and leaves out the optimizer step of a batch whose loss spikes (Lightning's
// spike detection, llm-foundry's loss-spike callback): a loss above `factor` times the median of the last `window`
// batches' losses (or not finite) is a spike; its step is skipped through State::skip_step, with a warning and the
// `loss_spike/skipped` count logged, and the run stops after `max_skips` spikes in a row (a loss that has moved for
// good, not a spike) or at the first one with action = "stop". action = "rollback" also asks the trainer to go back
// to the last checkpoint and skip the batches since it (State::request_rollback), for damage that built up over
// several batches before the loss showed it. docs/algorithms.md has the keys and an example.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/tensor.h>

#include "baton/communicator.h"
#include "baton/plugin.h"

namespace {

class LossSpike final : public baton::Callback {
 public:
  explicit LossSpike(const baton::PluginConfig& config)
      : window_(config.get_int_or("window", 100, baton::Range::at_least(2),
                                  "the batches whose median loss a batch's loss is compared with")),
        factor_(config.get_number_or("factor", 3.0, baton::Range::above(1),
                                     "how many times the median a spike's loss is")),
        max_skips_(config.get_int_or("max_skips", 5, baton::Range::at_least(1),
                                     "spikes in a row after which the run stops")),
        action_(config.get_choice_or("action", "skip", {"skip", "stop", "rollback"})) {}

  // after_train_batch: the batch's loss (every microbatch's), its gradients reduced, its optimizer step not yet
  // taken. Every rank decides on the ranks' mean loss, so they skip the same steps.
  void after_train_batch(baton::State& state, baton::Logger& logger) override {
    rolling_back_ = false;  // a rollback asked for at the last spike has happened (or was refused) by now
    if (!state.loss.defined()) return;
    double loss = state.loss.detach().sum().item<double>();
    if (const auto comm = state.facts.communicator()) loss = comm->sum({loss})[0] / comm->world_size();
    const bool full = static_cast<std::int64_t>(recent_.size()) >= window_;
    const double median = full ? median_of_recent() : 0;
    if (!full || (std::isfinite(loss) && loss <= factor_ * median)) {
      recent_.push_back(loss);
      if (static_cast<std::int64_t>(recent_.size()) > window_) recent_.pop_front();
      in_a_row_ = 0;
      return;
    }
    // A spike stays out of the window, so the median it is judged by is the run's usual loss.
    state.skip_step = true;
    ++skipped_;
    ++in_a_row_;
    const std::int64_t batch = state.timestamp().batch + 1;  // before batch_end the count excludes this batch
    const std::string what = "loss_spike: the training loss of batch " + std::to_string(batch) + " is " +
                             baton::format_number(loss) + ", over " + baton::format_number(factor_) +
                             " x the median " + baton::format_number(median) + " of the last " +
                             std::to_string(window_) + " batches";
    logger.log_metric("loss_spike/skipped", static_cast<double>(skipped_));
    if (action_ == "stop") {
      state.request_stop(what + " (action = \"stop\"): its optimizer step was skipped and the run stopped");
    } else if (in_a_row_ >= max_skips_) {
      state.request_stop(what + ": " + std::to_string(in_a_row_) + " spikes in a row (max_skips), so the loss " +
                         "has moved rather than spiked; this step was skipped and the run stopped");
    } else if (action_ == "rollback") {
      // The trainer warns with this, saying where it went back to; the counts survive the rollback's load.
      state.request_rollback(what + " (action = \"rollback\")");
      rolling_back_ = true;
      logger.log_metric("loss_spike/rollbacks", static_cast<double>(++rollbacks_));
    } else {
      logger.warn(what + ": its optimizer step is skipped (" + std::to_string(skipped_) + " so far)");
    }
  }

  void state_dict(baton::StateDict& out) const override {
    out.set_tensor("recent", at::tensor(std::vector<double>(recent_.begin(), recent_.end()), at::kDouble));
    out.set_int("skipped", skipped_);
    out.set_int("in_a_row", in_a_row_);
    out.set_int("rollbacks", rollbacks_);
  }

  void load_state_dict(const baton::StateDict& in) override {
    if (in.empty()) return;
    const at::Tensor recent = in.tensor("recent").to(at::kDouble).contiguous();
    recent_.assign(recent.data_ptr<double>(), recent.data_ptr<double>() + recent.numel());
    while (static_cast<std::int64_t>(recent_.size()) > window_) recent_.pop_front();
    // The rollback this plugin asked for restores the window of its checkpoint, but not the counts: the spikes
    // since it happened, and max_skips counts them in a row across rollbacks.
    if (std::exchange(rolling_back_, false)) return;
    skipped_ = in.get_int("skipped");
    in_a_row_ = in.get_int("in_a_row");
    rollbacks_ = in.has("rollbacks") ? in.get_int("rollbacks") : 0;
  }

 private:
  double median_of_recent() const {
    std::vector<double> sorted(recent_.begin(), recent_.end());
    std::sort(sorted.begin(), sorted.end());
    const std::size_t n = sorted.size();
    return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }

  std::int64_t window_;
  double factor_;
  std::int64_t max_skips_;
  std::string action_;         // "skip", "stop" or "rollback"
  std::deque<double> recent_;  // the last `window` losses that were no spike
  std::int64_t skipped_ = 0;
  std::int64_t in_a_row_ = 0;
  std::int64_t rollbacks_ = 0;
  bool rolling_back_ = false;  // a rollback this plugin asked for is under way: its load keeps the counts
};

}  // namespace

BATON_PLUGIN(LossSpike, "loss_spike", "1.0.0",
             "skips the optimizer step of a batch whose training loss spikes above the recent median")
