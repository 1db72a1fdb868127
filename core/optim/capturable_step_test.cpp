#include "baton_test.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "checkpoint/optimizer_compat.h"
#include "optim/capturable_step.h"

using namespace baton;
using optim::CapturableStep;

namespace {

// Two parameters of shapes [5, 7] and [7] (a weight and a bias), drawn from `seed`.
std::vector<at::Tensor> parameters(std::uint64_t seed) {
  at::manual_seed(seed);
  return {at::randn({5, 7}).requires_grad_(true), at::randn({7}).requires_grad_(true)};
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// The same gradient into both sets: step `k`'s, drawn from k.
void set_gradients(std::vector<at::Tensor>& a, std::vector<at::Tensor>& b, int k) {
  at::manual_seed(1000 + k);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const at::Tensor g = at::randn(a[i].sizes());
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

// A rate that changes every step, as a cosine schedule's does.
double rate(double peak, int k) { return peak * (0.5 + 0.5 * std::cos(0.3 * k)); }

void set_rate(torch::optim::Optimizer& o, double lr) {
  for (auto& group : o.param_groups()) group.options().set_lr(lr);
}

double max_relative_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, ((a[i] - b[i]).abs() / (b[i].abs() + 1e-12)).max().item<double>());
  return worst;
}

bool bitwise(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

// 40 steps at a changing rate: `reference` by LibTorch's own step throughout, `recorded` by its own first step
// and CapturableStep after. Returns the two parameter sets.
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> run_both(const MakeOptimizer& make, double peak) {
  std::vector<at::Tensor> reference = parameters(7), recorded = copies(reference);
  auto by_libtorch = make(reference);
  auto by_capture = make(recorded);
  std::unique_ptr<CapturableStep> capturable;
  for (int k = 0; k < 40; ++k) {
    set_gradients(reference, recorded, k);
    set_rate(*by_libtorch, rate(peak, k));
    set_rate(*by_capture, rate(peak, k));
    by_libtorch->step();
    if (!capturable) {
      by_capture->step();  // the eager first step creates the state
      capturable = std::make_unique<CapturableStep>(*by_capture);
    } else {
      capturable->prepare();
      capturable->step();
    }
  }
  return {reference, recorded};
}

}  // namespace

TEST_SUITE("optim") {
  TEST_CASE("the recorded SGD step follows a rate that changes per step: within one rounding of LibTorch's") {
    for (const bool nesterov : {false, true}) {
      CAPTURE(nesterov);
      const auto [reference, recorded] = run_both(
          [&](std::vector<at::Tensor> ps) {
            return std::make_unique<torch::optim::SGD>(
                ps, torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(1e-3));
          },
          0.1);
      const double difference = max_relative_difference(recorded, reference);
      MESSAGE("SGD nesterov=" << nesterov << ": max relative difference after 40 steps " << difference
                              << (bitwise(recorded, reference) ? std::string(" (bitwise equal)") : std::string()));
      CHECK(difference < 1e-5);
      // What the rate does: had the first rate been kept (a graph replaying host numbers), the weights would be
      // far from LibTorch's.
      std::vector<at::Tensor> frozen = parameters(7), unused = copies(frozen);
      torch::optim::SGD fixed(frozen, torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(1e-3));
      for (int k = 0; k < 40; ++k) {
        set_gradients(frozen, unused, k);
        fixed.step();
      }
      CHECK(max_relative_difference(frozen, reference) > 1e-2);
    }
  }

  TEST_CASE("the recorded Adam and AdamW steps equal LibTorch's bit for bit on the CPU, step counts included") {
    const auto adam = run_both(
        [](std::vector<at::Tensor> ps) {
          return std::make_unique<torch::optim::Adam>(ps, torch::optim::AdamOptions(1e-2).weight_decay(1e-2));
        },
        1e-2);
    CHECK(bitwise(adam.second, adam.first));
    const auto adamw = run_both(
        [](std::vector<at::Tensor> ps) {
          return std::make_unique<torch::optim::AdamW>(ps, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
        },
        1e-2);
    CHECK(bitwise(adamw.second, adamw.first));
    MESSAGE("Adam: max relative difference " << max_relative_difference(adam.second, adam.first) << ", AdamW: "
                                             << max_relative_difference(adamw.second, adamw.first));

    // The optimizer's own state advanced as its own steps advance it: a checkpoint holds step 3 after 3 steps.
    std::vector<at::Tensor> ps = parameters(3), others = copies(ps);
    torch::optim::Adam o(ps, torch::optim::AdamOptions(1e-3));
    set_gradients(ps, others, 0);
    o.step();
    CapturableStep step(o);
    step.prepare();
    step.step();
    step.prepare();
    step.step();
    for (const auto& p : ps)
      CHECK(static_cast<torch::optim::AdamParamState&>(*o.state().at(optimizer_compat::state_key(p))).step() == 3);
  }

  TEST_CASE("what cannot be recorded is named") {
    std::vector<at::Tensor> ps = parameters(1);
    torch::optim::RMSprop rmsprop(ps, torch::optim::RMSpropOptions(0.01));
    CHECK(CapturableStep::refusal(rmsprop).find("not one of sgd, adam, adamw") != std::string::npos);
    CHECK_THROWS_WITH_AS(CapturableStep{rmsprop}, doctest::Contains("not one of sgd, adam, adamw"), Error);

    torch::optim::Adam ams(ps, torch::optim::AdamOptions(0.01).amsgrad(true));
    CHECK(CapturableStep::refusal(ams).find("amsgrad") != std::string::npos);

    torch::optim::SGD fresh(ps, torch::optim::SGDOptions(0.01).momentum(0.9));
    CHECK(CapturableStep::refusal(fresh).empty());
    std::vector<at::Tensor> others = copies(ps);
    set_gradients(ps, others, 0);
    // No step of its own yet: no momentum buffer to record against.
    CHECK_THROWS_WITH_AS(CapturableStep{fresh}, doctest::Contains("no momentum buffer yet for parameter 0 of group 0"),
                         Error);
  }
}
