#pragma once
// The denoiser: a small U-Net (28 -> 14 -> 7 and back, skip connections by concatenation) with a sinusoidal
// timestep embedding added in every residual block, GroupNorm instead of BatchNorm (no running statistics: the EMA
// averages parameters alone, and a sample of one image behaves as a batch of many), and the baton model around it:
// the DDPM training forward, its loss, and the DDIM evaluation forward.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "baton/model.h"
#include "diffusion_math.h"

namespace baton_diffusion {

class ResBlockImpl : public torch::nn::Module {
 public:
  ResBlockImpl(std::int64_t in, std::int64_t out, std::int64_t embed);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& embedding);

 private:
  torch::nn::GroupNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, skip_{nullptr};
  torch::nn::Linear time_{nullptr};
};
TORCH_MODULE(ResBlock);

class UNetImpl : public torch::nn::Module {
 public:
  /// `channels` image channels; `base` the width at full resolution (doubled at each of the two downsamplings).
  UNetImpl(std::int64_t channels, std::int64_t base);
  /// eps_theta(x_t, t): x_t [N, C, H, W] with H and W divisible by 4, t [N] timesteps (any numeric dtype).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t);

 private:
  std::int64_t base_;
  torch::nn::Linear embed1_{nullptr}, embed2_{nullptr};
  torch::nn::Conv2d in_{nullptr}, down1_{nullptr}, down2_{nullptr}, out_{nullptr};
  torch::nn::ConvTranspose2d up2_{nullptr}, up1_{nullptr};
  ResBlock block1_{nullptr}, block2_{nullptr}, block3_{nullptr}, middle_{nullptr}, block4_{nullptr},
      block5_{nullptr};
  torch::nn::GroupNorm out_norm_{nullptr};
};
TORCH_MODULE(UNet);

struct DenoiserSettings {
  Schedule schedule = Schedule::linear;
  std::int64_t timesteps = 1000;     // T
  std::int64_t sample_steps = 50;    // DDIM steps at evaluation
  std::int64_t base = 32;            // U-Net width
  double pixel_mean = 0.2860;        // the dataset's normalisation: inputs = (pixel - mean) / std, pixels in [0, 1]
  double pixel_std = 0.3530;
};

/// The model the trainer gets: training forward {prediction, noise} (t and noise drawn from `generator`, the step
/// generator in a run), its own loss (mean squared error of the two), and an evaluation forward that samples
/// {samples (in the dataset's normalisation, as the inputs), pixels (in [0, 1])} with DDIM from noise of the
/// batch's shape. `generator` returns the generator to draw from (baton::step_generator in a run).
baton::Model make_denoiser(const DenoiserSettings& settings, const std::vector<std::int64_t>& input_shape,
                           std::function<at::Generator&()> generator);

}  // namespace baton_diffusion
