// Gradient clipping as Composer's GradientClipping algorithm, at after_train_batch: once the batch's gradients are
// complete (accumulated over microbatches, averaged across ranks) and before the optimizer step.
//
//   [[plugins]]
//   name = "gradient_clipping"
//   clipping_type = "norm"     # required: "norm" | "value" | "adaptive"
//   clipping_threshold = 1.0   # required, > 0
//
//   norm      torch.nn.utils.clip_grad_norm_: all gradients scaled by min(1, threshold / (total_norm + 1e-6)), where
//             total_norm is the 2-norm of all gradients as one vector. Logs it as "gradient_clipping/grad_norm".
//   value     torch.nn.utils.clip_grad_value_: every gradient element clamped to [-threshold, threshold].
//   Under sharding (zero1/zero2) the optimizer steps this rank's shard of the parameters: norm and value act on
//   the shard's gradients, the norm summed over the ranks (one collective: the global norm, never a rank's own);
//   adaptive, whose vector units would span ranks, is refused there.
//   adaptive  AGC (Brock et al. 2021, https://arxiv.org/abs/2102.06171): per unit (a row of a weight matrix, an
//             output filter of a convolution, a whole bias vector) the gradient is scaled by
//             min(1, threshold * max(||W_unit||, 1e-3) / ||G_unit||). The paper's eps keeps parameters that start at
//             zero (biases) trainable; Composer's version has no eps and would freeze them.
// Composer's GradientClipping has no defaults for either key, so neither has one here.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ops/clamp.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "baton/communicator.h"
#include "baton/plugin.h"
#include "baton/text.h"

namespace {

using baton::Event;


enum class Clipping { norm, value, adaptive };

Clipping read_type(const baton::PluginConfig& config) {
  const std::string type = config.get<std::string>("clipping_type");
  if (type == "norm") return Clipping::norm;
  if (type == "value") return Clipping::value;
  if (type == "adaptive") return Clipping::adaptive;
  config.fail("clipping_type", "must be \"norm\", \"value\" or \"adaptive\", got \"" + type + "\"");
}

double read_threshold(const baton::PluginConfig& config) {
  const double threshold = config.get<double>("clipping_threshold");
  if (!(threshold > 0) || !std::isfinite(threshold))
    config.fail("clipping_threshold", "must be a finite number > 0, got " + baton::format_number(threshold));
  return threshold;
}

// The paper's eps: a unit whose weights have a norm below it is allowed gradients of threshold * eps.
constexpr double kAgcEps = 1e-3;

// Norms per unit, shaped to broadcast against the tensor: over every dimension but the first for matrices and
// convolution kernels, over the whole tensor for vectors and scalars (Brock et al.'s unit-wise norm).
at::Tensor unitwise_norm(const at::Tensor& t) {
  if (t.dim() <= 1) return at::linalg_vector_norm(t, 2);
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 1; d < t.dim(); ++d) dims.push_back(d);
  return at::linalg_vector_norm(t, 2, dims, /*keepdim=*/true);
}

class GradientClipping final : public baton::Algorithm {
 public:
  explicit GradientClipping(const baton::PluginConfig& config)
      : type_(read_type(config)), threshold_(read_threshold(config)) {}

  void subscribe(baton::Subscriptions& events) override {
    events.on(Event::after_train_batch, this, &GradientClipping::clip);
  }
  void declare(baton::Declarations& run) const override {
    run.metric("gradient_clipping/grad_norm");
    // A unit of AGC is a row of a matrix but a whole vector, whose rows a sharded run spreads over the ranks.
    if (type_ == Clipping::adaptive) run.replicated_only("clips adaptively per unit, and a vector's unit spans ranks");
  }

  void clip(baton::State& state, baton::Logger& logger) {
    if (state.facts.model() == nullptr) throw baton::Error("gradient_clipping: State::model is null");
    c10::NoGradGuard no_grad;
    std::vector<at::Tensor> grads, weights;
    if (state.facts.sharded()) {
      // What the optimizers step: this rank's shards, whose gradients are its shard of the averaged ones.
      for (const auto& named : state.facts.optimizers())
        for (const auto& group : named.second->param_groups())
          for (const auto& p : group.params())
            if (p.grad().defined()) grads.push_back(p.grad());
    } else {
      for (const auto& p : state.facts.model()->parameters()) {
        if (!p.grad().defined()) continue;
        grads.push_back(p.grad());
        weights.push_back(p.detach());
      }
    }
    // Sharded, every rank takes part even with no gradient in its shard: the norm is a collective.
    if (grads.empty() && !state.facts.sharded()) return;
    if (type_ == Clipping::norm) {
      clip_norm(grads, state.facts.sharded() ? state.facts.communicator().get() : nullptr, logger);
    } else if (type_ == Clipping::value) {
      for (auto& g : grads) g.clamp_(-threshold_, threshold_);
    } else {
      for (std::size_t i = 0; i < grads.size(); ++i) clip_adaptive(weights[i], grads[i]);
    }
  }

 private:
  // `ranks`: the communicator when the gradients are this rank's shard (the global norm sums every rank's squares;
  // the padding of a shard is 0 and adds nothing), null when they are whole.
  void clip_norm(std::vector<at::Tensor>& grads, baton::Communicator* ranks, baton::Logger& logger) const {
    std::vector<at::Tensor> norms;
    for (const auto& g : grads) norms.push_back(at::linalg_vector_norm(g, 2));
    at::Tensor total = norms.empty() ? at::zeros({}, at::kDouble) : at::linalg_vector_norm(at::stack(norms), 2);
    if (ranks) {
      const double local = total.item<double>();
      total = at::full({}, std::sqrt(ranks->sum({local * local}).front()), total.options());
    }
    if (grads.empty()) {
      logger.log_metric("gradient_clipping/grad_norm", total.item<double>());
      return;
    }
    // As clip_grad_norm_: the coefficient stays a tensor (no host sync) and is clamped at 1, so gradients below the
    // threshold are multiplied by exactly 1.
    const at::Tensor coefficient = at::clamp(total.add(1e-6).reciprocal().mul(threshold_), c10::nullopt, 1.0);
    for (auto& g : grads) g.mul_(coefficient.to(g.scalar_type()));
    logger.log_metric("gradient_clipping/grad_norm", total.item<double>());
  }

  void clip_adaptive(const at::Tensor& weight, at::Tensor& grad) const {
    const at::Tensor allowed = at::clamp(unitwise_norm(weight), kAgcEps).mul(threshold_);
    const at::Tensor norm = unitwise_norm(grad);
    // A unit with a zero gradient needs no clipping (allowed / 0 would be inf, clamped to 1 anyway; 0 / 0 is not).
    const at::Tensor coefficient = at::where(norm.gt(allowed), allowed.div(norm), at::ones_like(norm));
    grad.mul_(coefficient.to(grad.scalar_type()));
  }

  Clipping type_;
  double threshold_;
};

}  // namespace

BATON_PLUGIN(GradientClipping, "gradient_clipping", "1.0.0",
             "clips the gradients before the optimizer step: by global norm, by value, or adaptively (AGC)")
