// MixUp (Zhang et al. 2018, https://arxiv.org/abs/1710.09412) as Composer's MixUp algorithm: each training batch
// is replaced by a convex combination of itself and a random permutation of itself, and its targets by the same
// combination of the two samples' targets.
//
//   [[plugins]]
//   name = "mixup"
//   alpha = 0.2               # Beta(alpha, alpha) draws the mixing; >= 0, 0 turns mixing off
//   interpolate_loss = false  # true: keep class-index targets and interpolate the (cross-entropy) loss instead
//
// As in Composer the drawn z ~ Beta(alpha, alpha) is folded to mixing = min(z, 1 - z) <= 0.5, so each mixed sample
// keeps most of its own image and its own label stays the argmax of its target (train accuracy stays meaningful):
//   inputs  <- (1 - mixing) * inputs + mixing * inputs[perm]                      at after_dataloader
//   targets <- (1 - mixing) * onehot(targets) + mixing * onehot(targets[perm])    at before_loss
// The mixing of each batch is logged as "mixup/mixing".
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include <ATen/ops/index_select.h>

#include "baton/plugin.h"
#include "batch_random.h"
#include "pair_mixing.h"

namespace {

using baton::Event;

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

double read_alpha(const baton::PluginConfig& config) {
  const double alpha = config.get_or<double>("alpha", 0.2);
  if (!(alpha >= 0) || !std::isfinite(alpha)) config.fail("alpha", "must be a finite number >= 0, got " + number_text(alpha));
  return alpha;
}

class MixUp final : public baton::Algorithm {
 public:
  explicit MixUp(const baton::PluginConfig& config)
      : alpha_(read_alpha(config)), mixing_("mixup", config.get_or<bool>("interpolate_loss", false)) {}

  bool match(Event event, const baton::State&) override {
    return event == Event::after_dataloader || event == Event::before_loss ||
           (event == Event::after_loss && mixing_.interpolates_loss());
  }

  void apply(Event event, baton::State& state, baton::Logger& logger) override {
    if (event == Event::after_dataloader)
      mix_inputs(state, logger);
    else if (event == Event::before_loss)
      mixing_.before_loss(state);
    else
      mixing_.after_loss(state);
  }

 private:
  void mix_inputs(baton::State& state, baton::Logger& logger) {
    baton_algorithms::BatchRandom random(state, "mixup");
    double mixing = 0;
    if (alpha_ > 0) {
      const double z = random.beta(alpha_, alpha_);
      mixing = std::min(z, 1.0 - z);
    }
    const at::Tensor& inputs = state.batch.inputs;
    const at::Tensor perm = baton_algorithms::index_tensor(random.permutation(inputs.size(0)), inputs.device());
    state.batch.inputs = inputs.mul(1.0 - mixing).add(inputs.index_select(0, perm).mul(mixing));
    mixing_.start(state.batch.targets, perm, 1.0 - mixing);
    logger.log_metric("mixup/mixing", mixing);
  }

  double alpha_;
  baton_algorithms::PairMixing mixing_;
};

}  // namespace

BATON_PLUGIN(MixUp, "mixup", "1.0.0", "MixUp: trains on convex combinations of pairs of samples and their targets")
