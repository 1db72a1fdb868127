#include "trainer/loss_scaler.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/zeros.h>

#include "baton/error.h"

namespace baton {

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options_.init_scale > 0) || !(options_.growth_factor > 1) || !(options_.backoff_factor > 0) ||
      !(options_.backoff_factor < 1) || options_.growth_interval < 1)
    throw Error("loss scaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1");
}

at::Tensor LossScaler::scale(const at::Tensor& loss) const { return loss * scale_; }

bool LossScaler::unscale(const std::vector<at::Tensor>& parameters) const {
  const double inverse = 1.0 / scale_;
  at::Tensor bad;
  for (const auto& p : parameters) {
    at::Tensor grad = p.grad();
    if (!grad.defined()) continue;
    grad.mul_(inverse);
    // Counting the non-finite entries (not any()) keeps this one reduction per tensor, summed on the device.
    at::Tensor count = grad.isfinite().logical_not().sum();
    bad = bad.defined() ? bad + count : count;
  }
  return bad.defined() && bad.item<std::int64_t>() > 0;
}

void LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
    skipped_ += 1;
    return;
  }
  good_steps_ += 1;
  if (good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
}

void LossScaler::state_dict(StateDict& out) const {
  out.set_double("loss_scaler/scale", scale_);
  out.set_int("loss_scaler/good_steps", good_steps_);
  out.set_int("loss_scaler/skipped_steps", skipped_);
}

void LossScaler::load_state_dict(const StateDict& in) {
  if (!in.has("loss_scaler/scale")) return;
  scale_ = in.get_double("loss_scaler/scale");
  good_steps_ = in.get_int("loss_scaler/good_steps");
  skipped_ = in.get_int("loss_scaler/skipped_steps");
}

}  // namespace baton
