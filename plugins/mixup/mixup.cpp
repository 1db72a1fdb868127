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


class MixUp final : public baton_algorithms::PairMixingAlgorithm {
 public:
  explicit MixUp(const baton::PluginConfig& config) : PairMixingAlgorithm("mixup", config, 0.2, "mixup/mixing") {}

 private:
  void mix_inputs(baton::State& state, baton::Logger& logger) override {
    baton_algorithms::BatchRandom random(state, "mixup");
    double mixing = 0;
    if (alpha_ > 0) {
      const double z = random.beta(alpha_, alpha_);
      mixing = std::min(z, 1.0 - z);
    }
    at::Tensor& inputs = keys_.input_of(state);
    const at::Tensor perm = baton_algorithms::index_tensor(random.permutation(inputs.size(0)), inputs.device());
    inputs = inputs.mul(1.0 - mixing).add(inputs.index_select(0, perm).mul(mixing));
    mixing_.start(keys_.target_of(state), perm, 1.0 - mixing);
    logger.log_metric(metric_, mixing);
  }

};

}  // namespace

BATON_PLUGIN(MixUp, "mixup", "1.0.0", "MixUp: trains on convex combinations of pairs of samples and their targets")
