// Sharpness-aware minimisation (Foret et al. 2021, https://arxiv.org/abs/2010.01412) as Composer's SAM algorithm,
// with its keys and defaults:
//
//   [[plugins]]
//   name = "sam"
//   rho = 0.05        # > 0: the radius of the ascent step
//   epsilon = 1e-12   # >= 0: added to the gradient's norm (a zero gradient makes no step)
//   interval = 1      # >= 1: SAM runs on every interval-th step (the batches whose count is a multiple of it)
//
// On such a step, at after_train_batch (the batch's gradient g complete: accumulated over microbatches, averaged
// across ranks, unscaled under amp_fp16), the weights move to w + rho g / (||g|| + epsilon), ||g|| the 2-norm of
// every gradient as one vector; the trainer runs the step's forward and backward again there
// (RunFacts::passes()->recompute_gradients(), Composer's optimizer closure); the weights go back to w (restored, not
// subtracted, so they are exactly w) and the optimizer steps with the gradient at the perturbed point. The other
// steps are plain ones. A SAM step costs two forward and backward passes. Unlike Composer, whose ascent uses each
// rank's own gradient, the ascent uses the gradient averaged across ranks, so every rank perturbs alike.
#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/plugin.h"

namespace {

using baton::Event;

class Sam final : public baton::Algorithm {
 public:
  explicit Sam(const baton::PluginConfig& config)
      : rho_(config.get_number_or("rho", 0.05, baton::Range::above(0))),
        epsilon_(config.get_number_or("epsilon", 1e-12, baton::Range::at_least(0))),
        interval_(config.get_int_or("interval", 1, baton::Range::at_least(1))) {}

  void subscribe(baton::Subscriptions& events) override {
    // The batch count moves after the step: this is batch now.batch + 1.
    events.on_match(
        Event::after_train_batch,
        [this](const baton::State& state) { return (state.progress.now.batch + 1) % interval_ == 0; },
        [this](baton::State& state, baton::Logger& logger) { ascend(state, logger); });
  }
  void declare(baton::Declarations& run) const override {
    run.metric("sam/grad_norm");
    run.replicated_only("reads the model's gradients after the reduce and moves its weights inside the step");
  }

  void ascend(baton::State& state, baton::Logger& logger) {
    if (state.facts.model() == nullptr) throw baton::Error("sam: State::model is null");
    if (state.facts.passes() == nullptr) throw baton::Error("sam: needs a trainer that can run the step again");
    // No gradient at all: a model's own training_step has stepped and cleared them (LibTorch 2.x's zero_grad leaves
    // them undefined; 1.13's leaves zeros, which reach the recompute below). The trainer's recompute refuses such a
    // step with the reason, on every LibTorch version.
    bool any_gradient = false;
    for (const auto& p : state.facts.model()->parameters()) any_gradient = any_gradient || p.grad().defined();
    if (!any_gradient) {
      state.facts.passes()->recompute_gradients();
      return;
    }
    std::vector<at::Tensor> params, saved;
    std::vector<at::Tensor> norms;
    {
      c10::NoGradGuard no_grad;
      for (const auto& p : state.facts.model()->parameters())
        if (p.grad().defined()) {
          params.push_back(p);
          norms.push_back(at::linalg_vector_norm(p.grad(), 2));
        }
      if (params.empty()) return;
      const double norm = at::linalg_vector_norm(at::stack(norms), 2).item<double>();
      // An overflowing amp_fp16 step (inf or NaN gradients) is skipped by the trainer: no ascent from it.
      if (!std::isfinite(norm)) return;
      const double scale = rho_ / (norm + epsilon_);
      for (auto& p : params) {
        saved.push_back(p.detach().clone());
        p.add_(p.grad(), scale);
      }
      logger.log_metric("sam/grad_norm", norm);
    }
    std::exception_ptr failure;
    try {
      state.facts.passes()->recompute_gradients();
    } catch (...) {
      failure = std::current_exception();
    }
    {
      c10::NoGradGuard no_grad;
      for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(saved[i]);
    }
    if (failure) std::rethrow_exception(failure);
  }

 private:
  double rho_;
  double epsilon_;
  std::int64_t interval_;
};

}  // namespace

BATON_PLUGIN(Sam, "sam", "1.0.0",
             "sharpness-aware minimisation: the step's gradient taken again at w + rho g / ||g|| (two passes per "
             "SAM step)")
