#pragma once
// Dynamic loss scaling for amp_fp16 (PyTorch's GradScaler, Composer's default for fp16): fp16 gradients of small
// losses underflow to zero, so the loss is multiplied by a large scale before backward and the gradients divided by
// it before anything reads them (clipping, the step). A step whose gradients hold inf or NaN is skipped and the
// scale lowered; after `growth_interval` good steps in a row the scale grows again. Its state goes into
// checkpoints so a resumed run scales (and skips) exactly as an uninterrupted one.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/state_dict.h"

namespace baton {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, PyTorch's and Composer's
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  /// The loss to backpropagate: loss × scale.
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides each defined gradient of `parameters` by the scale, in place, and returns whether any of them holds
  /// an inf or a NaN (then the step must be skipped). One host synchronisation for all of them.
  bool unscale(const std::vector<at::Tensor>& parameters) const;
  /// After the step (taken or skipped): a skipped step multiplies the scale by backoff_factor and restarts the
  /// count of good steps; the growth_interval-th good step in a row multiplies it by growth_factor.
  void update(bool found_inf);

  double scale_value() const { return scale_; }
  std::int64_t good_steps() const { return good_steps_; }
  std::int64_t skipped_steps() const { return skipped_; }

  /// Saves/restores scale, the good-step count and the skipped-step count under "loss_scaler/".
  void state_dict(StateDict& out) const;
  /// A checkpoint without the keys (written in another precision) leaves the scaler as it is.
  void load_state_dict(const StateDict& in);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t good_steps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace baton
