// Label smoothing (Szegedy et al. 2016, https://arxiv.org/abs/1512.00567) as Composer's LabelSmoothing algorithm:
// the loss is computed against targets shrunk towards the uniform distribution over the C classes,
//   targets <- (1 - smoothing) * onehot(targets) + smoothing / C
// set at before_loss and put back at after_loss, so every other event sees the batch's own targets.
//
//   [[plugins]]
//   name = "label_smoothing"
//   smoothing = 0.1   # in [0, 1]: 0 leaves the targets as they are, 1 makes them uniform
#include <cmath>
#include <sstream>
#include <string>

#include "baton/plugin.h"
#include "baton/text.h"
#include "pair_mixing.h"

namespace {

using baton::Event;


double read_smoothing(const baton::PluginConfig& config) {
  const double smoothing = config.get_or<double>("smoothing", 0.1);
  if (!(smoothing >= 0 && smoothing <= 1))
    config.fail("smoothing", "must be in [0, 1], got " + baton::format_number(smoothing));
  return smoothing;
}

class LabelSmoothing final : public baton::Algorithm {
 public:
  explicit LabelSmoothing(const baton::PluginConfig& config)
      : smoothing_(read_smoothing(config)), keys_(baton_algorithms::BatchKeys::from(config)) {}

  void subscribe(baton::Subscriptions& events) override {
    events.on(Event::before_loss, this, &LabelSmoothing::smooth);
    events.on(Event::after_loss, this, &LabelSmoothing::restore);
  }

  void smooth(baton::State& state, baton::Logger&) {
    at::Tensor& targets = keys_.target_of(state);
    const at::Tensor& outputs = state.outputs.main();
    original_ = targets;
    const double classes = static_cast<double>(outputs.size(1));
    // Targets that are already probabilities (after MixUp) are smoothed the same way.
    targets = baton_algorithms::as_probabilities(original_, outputs).mul(1.0 - smoothing_).add(smoothing_ / classes);
  }

  void restore(baton::State& state, baton::Logger&) {
    if (!original_.defined()) return;
    keys_.target_of(state) = original_;
    original_ = at::Tensor();
  }

 private:
  double smoothing_;
  baton_algorithms::BatchKeys keys_;
  at::Tensor original_;  // the targets the loss was not computed from, between before_loss and after_loss
};

}  // namespace

BATON_PLUGIN(LabelSmoothing, "label_smoothing", "1.0.0",
             "label smoothing: the loss against (1 - smoothing) * onehot + smoothing / classes")
