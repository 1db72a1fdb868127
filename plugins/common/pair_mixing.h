#pragma once
// What MixUp and CutMix share: a batch mixed at after_dataloader with a permutation of itself, whose targets are
// then mixed the same way at before_loss (or whose loss is interpolated at after_loss). Header-only, SDK-only.
//
// Microbatches: the trainer fires before_forward … after_backward once per microbatch, with consecutive slices of
// the batch on State, in order (docs/events.md). The permutation is drawn over the whole batch, so each
// before_loss takes the next rows of the whole batch's permuted targets.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/one_hot.h>
#include <ATen/ops/tensor.h>

#include "baton/error.h"
#include "baton/plugin.h"
#include "baton/state.h"
#include "batch_keys.h"
#include "baton/text.h"

namespace baton_algorithms {

/// Targets as class probabilities shaped like outputs [N, C]: class indices become one-hot rows; probabilities
/// (another plugin's soft targets) are kept. In the outputs' dtype when that is float32 or float64; under mixed
/// precision (bf16/fp16 outputs) in float32, which would otherwise round the mixed or smoothed targets to 8 or 11
/// bits (the loss runs in float32 under autocast anyway).
inline at::Tensor as_probabilities(const at::Tensor& targets, const at::Tensor& outputs) {
  const at::ScalarType type = outputs.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  if (targets.dim() == outputs.dim()) return targets.to(type);
  return at::one_hot(targets, outputs.size(1)).to(type);
}

/// The permutation as an index tensor on `device`.
inline at::Tensor index_tensor(const std::vector<std::int64_t>& indices, const at::Device& device) {
  return at::tensor(indices, at::TensorOptions().dtype(at::kLong)).to(device);
}

class PairMixing {
 public:
  PairMixing(std::string plugin, bool interpolate_loss, BatchKeys keys)
      : plugin_(std::move(plugin)), interpolate_(interpolate_loss), keys_(std::move(keys)) {}

  /// At after_dataloader, once the inputs are mixed: `own` is the weight of each sample's own target, 1 - own
  /// that of the sample it was mixed with (targets[permutation]).
  void start(const at::Tensor& targets, const at::Tensor& permutation, double own) {
    permuted_ = targets.index_select(0, permutation);
    own_ = own;
    next_row_ = 0;
  }

  bool interpolates_loss() const { return interpolate_; }

  /// At before_loss: the rows of this (micro)batch; with target mixing, its targets become
  /// own * p(target) + (1 - own) * p(permuted target).
  void before_loss(baton::State& state) {
    at::Tensor& targets = keys_.target_of(state);
    const at::Tensor& outputs = state.outputs.main();
    const std::int64_t n = targets.size(0);
    if (!permuted_.defined() || next_row_ + n > permuted_.size(0))
      throw baton::Error(plugin_ + ": before_loss got " + std::to_string(n) + " rows after " +
                         std::to_string(next_row_) + " of a batch of " +
                         std::to_string(permuted_.defined() ? permuted_.size(0) : 0) +
                         " (did another plugin resize the batch after after_dataloader?)");
    rows_ = permuted_.narrow(0, next_row_, n);
    next_row_ += n;
    if (interpolate_) return;
    // Tensor methods, not operators: <ATen/TensorOperators.h> would pull in every ATen op.
    targets = as_probabilities(targets, outputs).mul(own_).add(as_probabilities(rows_, outputs).mul(1.0 - own_));
  }

  /// At after_loss, with loss interpolation: loss = own * loss + (1 - own) * cross_entropy(outputs, permuted).
  /// Equal to the loss against mixed targets for cross entropy, the default loss (linear in the targets).
  void after_loss(baton::State& state) {
    if (!interpolate_) return;
    const at::Tensor& outputs = state.outputs.main();
    const at::Tensor other = rows_.dim() == outputs.dim() ? rows_.to(outputs.scalar_type()) : rows_;
    state.loss = state.loss.mul(own_).add(at::cross_entropy_loss(outputs, other).mul(1.0 - own_));
  }

 private:
  std::string plugin_;
  bool interpolate_;
  BatchKeys keys_;
  at::Tensor permuted_;  // the whole batch's targets, permuted
  at::Tensor rows_;      // those of the current (micro)batch
  double own_ = 1.0;
  std::int64_t next_row_ = 0;
};

/// The algorithm MixUp and CutMix both are: `alpha` (the Beta distribution's parameter) and `interpolate_loss`
/// read the same way, the inputs mixed at after_dataloader by the subclass, then the targets at before_loss, or the
/// loss at after_loss with interpolate_loss.
class PairMixingAlgorithm : public baton::Algorithm {
 public:
  /// `metric`: the one metric the subclass logs per batch, declared at init.
  PairMixingAlgorithm(const std::string& plugin, const baton::PluginConfig& config, double default_alpha,
                      std::string metric)
      : metric_(std::move(metric)),
        alpha_(read_alpha(config, default_alpha)),
        keys_(BatchKeys::from(config)),
        mixing_(plugin, config.get_or<bool>("interpolate_loss", false), keys_) {}

  void subscribe(baton::Subscriptions& events) override {
    events.on(baton::Event::after_dataloader, [this](baton::State& state, baton::Logger& logger) {
      mix_inputs(state, logger);
    });
    events.on(baton::Event::before_loss, [this](baton::State& state, baton::Logger&) { mixing_.before_loss(state); });
    if (mixing_.interpolates_loss())
      events.on(baton::Event::after_loss, [this](baton::State& state, baton::Logger&) { mixing_.after_loss(state); });
  }
  void declare(baton::Declarations& run) const override { run.metric(metric_); }

 protected:
  /// Mixes the input field with a permutation of the batch and starts mixing_ with it.
  virtual void mix_inputs(baton::State& state, baton::Logger& logger) = 0;

  const std::string metric_;
  const double alpha_;
  const BatchKeys keys_;
  PairMixing mixing_;

 private:
  static double read_alpha(const baton::PluginConfig& config, double fallback) {
    const double alpha = config.get_or<double>("alpha", fallback);
    if (!(alpha >= 0) || !std::isfinite(alpha))
      config.fail("alpha", "must be a finite number >= 0, got " + baton::format_number(alpha));
    return alpha;
  }
};

}  // namespace baton_algorithms
