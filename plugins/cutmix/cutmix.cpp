// CutMix (Yun et al. 2019, https://arxiv.org/abs/1905.04899) as Composer's CutMix algorithm: a box of each image
// is replaced by the same box of another image of the batch (a random permutation), and the targets are mixed in
// proportion to the areas.
//
//   [[plugins]]
//   name = "cutmix"
//   alpha = 1.0                # Beta(alpha, alpha) draws the box's nominal area; >= 0
//   interpolate_loss = false   # true: keep class-index targets and interpolate the (cross-entropy) loss instead
//   uniform_sampling = false   # true: the box centre may lie outside the image by half a box, so that every pixel
//                              # is equally likely to be covered; false: the paper's centre, uniform in the image
//
// Inputs are [N, C, H, W]. For lambda ~ Beta(alpha, alpha) the box has sides int(H sqrt(1 - lambda)) and
// int(W sqrt(1 - lambda)) around a random centre, clipped to the image; lambda is then corrected to the area
// actually pasted, lambda = 1 - box_area / (H W), and
//   targets <- lambda * onehot(targets) + (1 - lambda) * onehot(targets[perm])   at before_loss
// The corrected lambda is logged as "cutmix/lambda".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include <ATen/ops/index_select.h>

#include "baton/plugin.h"
#include "batch_random.h"
#include "pair_mixing.h"

namespace {

using baton::Event;


// Python's floor division, which the reference implementation's box uses for a negative bound.
std::int64_t floor_div2(std::int64_t x) { return x >= 0 ? x / 2 : -((-x + 1) / 2); }

struct Box {
  std::int64_t top, left, bottom, right;  // rows [top, bottom), columns [left, right)
  std::int64_t area() const { return (bottom - top) * (right - left); }
};

// The paper's box for a nominal lambda: sides scaled by sqrt(1 - lambda), centred at a random pixel (or, with
// uniform sampling, at a random point up to half a box outside), then clipped to the image.
Box draw_box(baton_algorithms::BatchRandom& random, std::int64_t height, std::int64_t width, double lambda,
             bool uniform_sampling) {
  const double ratio = std::sqrt(1.0 - lambda);
  const auto cut_h = static_cast<std::int64_t>(static_cast<double>(height) * ratio);
  const auto cut_w = static_cast<std::int64_t>(static_cast<double>(width) * ratio);
  const std::int64_t cy = uniform_sampling ? random.between(floor_div2(-cut_h), height + cut_h / 2) : random.below(height);
  const std::int64_t cx = uniform_sampling ? random.between(floor_div2(-cut_w), width + cut_w / 2) : random.below(width);
  return {std::clamp<std::int64_t>(cy - cut_h / 2, 0, height), std::clamp<std::int64_t>(cx - cut_w / 2, 0, width),
          std::clamp<std::int64_t>(cy + cut_h / 2, 0, height), std::clamp<std::int64_t>(cx + cut_w / 2, 0, width)};
}

class CutMix final : public baton_algorithms::PairMixingAlgorithm {
 public:
  explicit CutMix(const baton::PluginConfig& config)
      : PairMixingAlgorithm("cutmix", config, 1.0, "cutmix/lambda"),
        uniform_sampling_(config.get_or<bool>("uniform_sampling", false)) {}

 private:
  void mix_inputs(baton::State& state, baton::Logger& logger) override {
    at::Tensor& inputs = keys_.images_of(state, "cutmix");
    baton_algorithms::BatchRandom random(state, "cutmix");
    const at::Tensor perm = baton_algorithms::index_tensor(random.permutation(inputs.size(0)), inputs.device());
    const double nominal = alpha_ > 0 ? random.beta(alpha_, alpha_) : 0.0;
    const std::int64_t height = inputs.size(2), width = inputs.size(3);
    const Box box = draw_box(random, height, width, nominal, uniform_sampling_);
    at::Tensor mixed = inputs.clone();
    if (box.area() > 0) {
      auto region = [&](const at::Tensor& t) {
        return t.narrow(2, box.top, box.bottom - box.top).narrow(3, box.left, box.right - box.left);
      };
      region(mixed).copy_(region(inputs.index_select(0, perm)));
    }
    inputs = mixed;
    const double lambda = 1.0 - static_cast<double>(box.area()) / static_cast<double>(height * width);
    mixing_.start(keys_.target_of(state), perm, lambda);
    logger.log_metric(metric_, lambda);
  }

  bool uniform_sampling_;
};

}  // namespace

BATON_PLUGIN(CutMix, "cutmix", "1.0.0", "CutMix: pastes a box of another sample into each image, mixing targets by area")
