// baton's EMA in a hand-written LibTorch loop, without the trainer: the way ema-pytorch or NeMo's EMAManager are
// used. After each optimizer step, update the average; to evaluate with it, swap it in for a scope (in eval mode);
// to keep it, write ema.state_dict() to a safetensors file, which baton::load_safetensors_into loads into a model.
//
// The task: a noisy linear regression, where the averaged weights land closer to the truth than the last SGD
// iterate. Exits with status 1 unless (a) the EMA beats the raw weights and (b) the swap restored the raw weights
// bitwise, so the test suite can run it.
#include <cstdio>
#include <memory>

#include <ATen/Context.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/randn.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "baton/ema.h"
#include "baton/safetensors.h"

int main() {
  at::manual_seed(0);
  const int64_t features = 16;
  at::Tensor truth = at::randn({1, features});
  torch::nn::Linear model(torch::nn::LinearOptions(features, 1).bias(false));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));

  baton::EmaOptions options;
  options.smoothing = baton::smoothing_from_half_life(/*half_life=*/200, /*interval=*/1);
  baton::ExponentialMovingAverage ema(*model, options);
  std::printf("EMA of %zu tensors, smoothing %.6f (half life 200 steps)\n", ema.size(), options.smoothing);

  for (int step = 0; step < 3000; ++step) {
    at::Tensor x = at::randn({8, features});
    at::Tensor y = at::matmul(x, truth.t()) + 0.5 * at::randn({8, 1});  // noisy targets keep SGD jittering
    optimizer.zero_grad();
    at::mse_loss(model(x), y).backward();
    optimizer.step();
    ema.update(*model);
  }

  auto distance = [&] { return (model->weight - truth).norm().item<double>(); };
  at::Tensor raw_before = model->weight.detach().clone();
  double raw_error = distance();
  double ema_error = 0;
  {
    baton::EmaSwapGuard guard(ema, *model);  // EMA weights in for this scope
    ema_error = distance();
  }
  bool restored = at::equal(raw_before, model->weight);
  std::printf("distance to the true weights: raw %.4f, EMA %.4f; raw weights restored bitwise: %s\n", raw_error,
              ema_error, restored ? "yes" : "no");

  // The EMA weights by name (copies), saved as a file Python's safetensors reads, and loaded into a fresh model:
  // as a run's ema.safetensors loads into a program's model.
  baton::write_safetensors("ema_loop.safetensors", ema.state_dict());
  torch::nn::Linear deployed(torch::nn::LinearOptions(features, 1).bias(false));
  baton::load_safetensors_into(*deployed, "ema_loop.safetensors");
  const double deployed_error = (deployed->weight - truth).norm().item<double>();
  std::printf("a fresh model loaded from ema_loop.safetensors: distance %.4f\n", deployed_error);
  std::remove("ema_loop.safetensors");
  return (ema_error < raw_error && restored && deployed_error == ema_error) ? 0 : 1;
}
