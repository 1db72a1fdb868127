// The built-in losses: [loss] name = "cross_entropy" | "mse" | "l1" | "smooth_l1" | "bce_with_logits".
// Each returns the batch's mean loss as a scalar, computed in float32 at least: under mixed precision the model's
// outputs are bfloat16 or float16, and a loss summed in those would lose the small differences training lives on.
#include <ATen/core/Tensor.h>
#include <ATen/ops/binary_cross_entropy_with_logits.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/l1_loss.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/smooth_l1_loss.h>

#include <cstdint>
#include <string>
#include <utility>

#include "baton/text.h"
#include "baton/components.h"
#include "baton/error.h"
#include "components/builtins.h"
#include "metrics/outputs.h"

namespace baton {
namespace {

using metrics_detail::fit_outputs;

/// Reduced-precision outputs (bfloat16, float16) as float32; float32 and float64 as they are.
at::Tensor at_least_float(const at::Tensor& outputs) {
  const auto type = outputs.scalar_type();
  return type == at::kHalf || type == at::kBFloat16 ? outputs.to(at::kFloat) : outputs;
}

/// Outputs (float32 at least) and float targets of the same shape, for the elementwise losses.
std::pair<at::Tensor, at::Tensor> elementwise(const std::string& loss, const at::Tensor& outputs,
                                              const at::Tensor& targets) {
  const at::Tensor out = fit_outputs(loss, at_least_float(outputs), targets);
  return {out, targets.scalar_type() == out.scalar_type() ? targets : targets.to(out.scalar_type())};
}

LossFunction cross_entropy(const PluginConfig& config, const DataSpec& all) {
  const auto [keys, data] = metrics_detail::keyed_spec(config, all);
  const double smoothing = config.get_number_or("label_smoothing", 0.0, Range::half_open(0, 1));
  if (!data.classification())
    config.fail("name", "cross_entropy needs class targets, but the data has " + data.describe() +
                            " (for values, use mse, l1 or smooth_l1)");
  return tensor_loss(keys, [smoothing](const at::Tensor& outputs, const at::Tensor& targets) {
    const at::Tensor out = at_least_float(outputs);
    // ATen takes both forms itself: a floating target of the outputs' shape holds class probabilities (after
    // label smoothing or MixUp), an integral one [N] holds class indices.
    if (at::isFloatingType(targets.scalar_type())) {
      if (targets.sizes() != out.sizes())
        throw Error("cross_entropy: class probabilities of shape " + format_shape(targets.sizes()) +
                    " do not match the outputs' shape " + format_shape(out.sizes()));
      return at::cross_entropy_loss(out, targets.to(out.scalar_type()), {}, at::Reduction::Mean, -100, smoothing);
    }
    if (out.dim() < 1 || targets.dim() != out.dim() - 1 || targets.size(0) != out.size(0))
      throw Error("cross_entropy: class indices of shape " + format_shape(targets.sizes()) + " do not fit outputs of shape " +
                  format_shape(out.sizes()) + " (one index per output row)");
    return at::cross_entropy_loss(out, targets.to(at::kLong), {}, at::Reduction::Mean, -100, smoothing);
  });
}

// The elementwise losses compare outputs with values: class indices are not values (the model has one output per
// class, the targets one index per row), so the pairing is refused where `baton check` sees it, not at the first
// batch as a shape error.
FieldKeys value_keys(const char* loss, const PluginConfig& config, const DataSpec& all) {
  const auto [keys, data] = metrics_detail::keyed_spec(config, all);
  if (data.classification())
    config.fail("name", std::string(loss) + " compares outputs with values, but the data's '" + keys.target +
                            "' are class indices (" + std::to_string(data.num_classes) +
                            " classes): use cross_entropy, or read the targets as values (the dataset's task = " +
                            "\"regression\")");
  return keys;
}

LossFunction mse(const PluginConfig& config, const DataSpec& data) {
  return tensor_loss(value_keys("mse", config, data), [](const at::Tensor& outputs, const at::Tensor& targets) {
    auto [out, target] = elementwise("mse", outputs, targets);
    return at::mse_loss(out, target);
  });
}

LossFunction l1(const PluginConfig& config, const DataSpec& data) {
  return tensor_loss(value_keys("l1", config, data), [](const at::Tensor& outputs, const at::Tensor& targets) {
    auto [out, target] = elementwise("l1", outputs, targets);
    return at::l1_loss(out, target);
  });
}

LossFunction smooth_l1(const PluginConfig& config, const DataSpec& data) {
  const FieldKeys keys = value_keys("smooth_l1", config, data);
  const double beta = config.get_number_or("beta", 1.0, Range::above(0));
  return tensor_loss(keys, [beta](const at::Tensor& outputs, const at::Tensor& targets) {
    auto [out, target] = elementwise("smooth_l1", outputs, targets);
    return at::smooth_l1_loss(out, target, at::Reduction::Mean, beta);
  });
}

LossFunction bce_with_logits(const PluginConfig& config, const DataSpec& data) {
  return tensor_loss(metrics_detail::keyed_spec(config, data).first, [](const at::Tensor& outputs,
                                                                        const at::Tensor& targets) {
    auto [out, target] = elementwise("bce_with_logits", outputs, targets);  // 0/1 integers become floats
    return at::binary_cross_entropy_with_logits(out, target);
  });
}

}  // namespace

void register_builtin_losses(Components& components) {
  auto& losses = components.losses;
  losses.add("cross_entropy",
             "softmax cross entropy of logits [N, C] against class indices or probabilities; key label_smoothing",
             cross_entropy);
  losses.add("mse", "mean squared error of outputs against float targets", mse);
  losses.add("l1", "mean absolute error of outputs against float targets", l1);
  losses.add("smooth_l1", "Huber-like loss: squared below `beta` (default 1.0), absolute above", smooth_l1);
  losses.add("bce_with_logits", "binary cross entropy of logits against 0/1 targets (one per output)",
             bce_with_logits);
}

}  // namespace baton
