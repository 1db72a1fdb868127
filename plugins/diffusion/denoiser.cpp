#include "denoiser.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cos.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/sin.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "baton/error.h"

namespace baton_diffusion {

namespace {

// Groups of 8 channels where the width allows it (GroupNorm needs a divisor).
torch::nn::GroupNorm group_norm(std::int64_t channels) {
  return torch::nn::GroupNorm(torch::nn::GroupNormOptions(std::gcd(channels, std::int64_t{8}), channels));
}

torch::nn::Conv2d conv3(std::int64_t in, std::int64_t out, std::int64_t stride = 1) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1));
}

}  // namespace

ResBlockImpl::ResBlockImpl(std::int64_t in, std::int64_t out, std::int64_t embed) {
  norm1_ = register_module("norm1", group_norm(in));
  conv1_ = register_module("conv1", conv3(in, out));
  time_ = register_module("time", torch::nn::Linear(embed, out));
  norm2_ = register_module("norm2", group_norm(out));
  conv2_ = register_module("conv2", conv3(out, out));
  if (in != out) skip_ = register_module("skip", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1)));
}

// GroupNorm runs in fp32: under bf16 autocast the convolutions hand it bf16 activations, which LibTorch's CPU kernel
// does not take with fp32 weights (and statistics want the precision anyway); the next convolution casts back.
at::Tensor ResBlockImpl::forward(const at::Tensor& x, const at::Tensor& embedding) {
  at::Tensor h = conv1_->forward(at::silu(norm1_->forward(x.to(at::kFloat))));
  // The timestep enters every block as a per-channel shift.
  h = h.add(time_->forward(embedding).unsqueeze(-1).unsqueeze(-1));
  h = conv2_->forward(at::silu(norm2_->forward(h.to(at::kFloat))));
  return h.add(skip_ ? skip_->forward(x) : x);
}

UNetImpl::UNetImpl(std::int64_t channels, std::int64_t base) : base_(base) {
  const std::int64_t embed = 4 * base;
  embed1_ = register_module("embed1", torch::nn::Linear(base, embed));
  embed2_ = register_module("embed2", torch::nn::Linear(embed, embed));
  in_ = register_module("in", conv3(channels, base));
  block1_ = register_module("block1", ResBlock(base, base, embed));
  down1_ = register_module("down1", conv3(base, base, 2));
  block2_ = register_module("block2", ResBlock(base, 2 * base, embed));
  down2_ = register_module("down2", conv3(2 * base, 2 * base, 2));
  block3_ = register_module("block3", ResBlock(2 * base, 4 * base, embed));
  middle_ = register_module("middle", ResBlock(4 * base, 4 * base, embed));
  up2_ = register_module("up2", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(4 * base, 4 * base, 2).stride(2)));
  block4_ = register_module("block4", ResBlock(6 * base, 2 * base, embed));
  up1_ = register_module("up1", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(2 * base, 2 * base, 2).stride(2)));
  block5_ = register_module("block5", ResBlock(3 * base, base, embed));
  out_norm_ = register_module("out_norm", group_norm(base));
  out_ = register_module("out", conv3(base, channels));
}

at::Tensor UNetImpl::forward(const at::Tensor& x, const at::Tensor& t) {
  // Sinusoidal features of t (Transformer / DDPM): base/2 frequencies from 1 to 1/10000, sines and cosines.
  const std::int64_t half = base_ / 2;
  const at::Tensor freqs =
      at::arange(half, x.options().dtype(at::kFloat)).mul(-std::log(10000.0) / static_cast<double>(half)).exp();
  const at::Tensor angles = t.to(at::kFloat).to(x.device()).unsqueeze(1).mul(freqs.unsqueeze(0));
  at::Tensor e = at::cat({at::sin(angles), at::cos(angles)}, 1);
  e = embed2_->forward(at::silu(embed1_->forward(e)));
  const at::Tensor h0 = in_->forward(x);
  const at::Tensor h1 = block1_->forward(h0, e);                      // base, full size
  const at::Tensor h2 = block2_->forward(down1_->forward(h1), e);     // 2 base, half
  at::Tensor h = block3_->forward(down2_->forward(h2), e);            // 4 base, quarter
  h = middle_->forward(h, e);
  h = block4_->forward(at::cat({up2_->forward(h), h2}, 1), e);
  h = block5_->forward(at::cat({up1_->forward(h), h1}, 1), e);
  return out_->forward(at::silu(out_norm_->forward(h.to(at::kFloat))));
}

baton::Model make_denoiser(const DenoiserSettings& settings, const std::vector<std::int64_t>& input_shape,
                           std::function<at::Generator&()> generator) {
  if (input_shape.size() != 3 || input_shape[1] % 4 != 0 || input_shape[2] % 4 != 0)
    throw baton::Error("denoiser: expected image inputs [C, H, W] with H and W divisible by 4 (two halvings), got " +
                       std::to_string(input_shape.size()) + " dimensions");
  UNet net(input_shape[0], settings.base);
  const std::vector<double> alpha_bar = alphas_bar(settings.schedule, settings.timesteps);
  const DenoiserSettings s = settings;
  // Inputs in the dataset's normalisation to [-1, 1] (DDPM's image range) and back.
  const auto to_unit = [s](const at::Tensor& x) { return x.mul(s.pixel_std).add(s.pixel_mean).mul(2).sub(1); };
  baton::Model model(net, [net, alpha_bar, s, to_unit, generator](const baton::Batch& batch) mutable -> baton::Outputs {
    const at::Tensor x0 = to_unit(batch.inputs().to(at::kFloat));
    // Per sample t ~ U{1..T} and eps ~ N(0, I), from the step's generator (drawn on the CPU, then moved): a
    // resumed run draws what the uninterrupted one did.
    at::Generator& g = generator();
    const at::Tensor t = at::randint(1, s.timesteps + 1, {x0.size(0)}, g, at::TensorOptions().dtype(at::kLong));
    const at::Tensor noise = at::randn(x0.sizes(), g, at::TensorOptions().dtype(at::kFloat)).to(x0.device());
    const at::Tensor x_t = noised(x0, t, noise, alpha_bar);
    return {{"prediction", net->forward(x_t, t.to(x0.device()))}, {"noise", noise}};
  });
  model.with_loss([](const baton::Outputs& outputs, const baton::Batch&) {
    // The "simple" objective: the mean over pixels of the squared error, in fp32 whatever the forward ran in.
    return at::mse_loss(outputs["prediction"].to(at::kFloat), outputs["noise"]);
  });
  model.with_eval_forward([net, alpha_bar, s, generator](const baton::Batch& batch) mutable -> baton::Outputs {
    c10::NoGradGuard no_grad;
    const at::Tensor& like = batch.inputs();
    // Noise of the batch's shape from the evaluation batch's generator: the same for every weight set and every
    // evaluation, so EMA and raw samples (and two evaluations) differ only by the weights.
    const at::Tensor x_T =
        at::randn(like.sizes(), generator(), at::TensorOptions().dtype(at::kFloat)).to(like.device());
    const at::Tensor x0 = ddim_sample(
        x_T, alpha_bar, s.sample_steps, [&](const at::Tensor& x, const at::Tensor& t) { return net->forward(x, t); },
        /*clip=*/true);
    const at::Tensor pixels = x0.add(1).div(2).clamp(0, 1);
    return {{"samples", pixels.sub(s.pixel_mean).div(s.pixel_std)}, {"pixels", pixels}};
  });
  return model;
}

}  // namespace baton_diffusion
