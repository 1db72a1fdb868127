#pragma once
// The global gradient norm of a model, shared by both example plugins: the L2 norm of all gradients taken as one
// vector, which is what gradient clipping by norm bounds.
#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/nn/module.h>

#include "baton/state.h"

namespace grad_norm {

// Plugins also run in programs that embed baton; say clearly when there is no model rather than crash.
inline torch::nn::Module& model_of(const baton::State& state, const char* plugin) {
  if (state.facts.model() == nullptr) throw std::logic_error(std::string(plugin) + ": the state has no model");
  return *state.facts.model();
}

/// sqrt(sum over parameters of ||grad||^2); parameters without a gradient count as zero.
inline double global_norm(torch::nn::Module& model) {
  double squares = 0;
  for (const auto& parameter : model.parameters()) {
    const auto& grad = parameter.grad();
    if (!grad.defined()) continue;
    const double norm = grad.norm().item<double>();
    squares += norm * norm;
  }
  return std::sqrt(squares);
}

/// Multiplies every gradient by factor, in place.
inline void scale(torch::nn::Module& model, double factor) {
  for (auto& parameter : model.parameters()) {
    auto& grad = parameter.mutable_grad();
    if (grad.defined()) grad.mul_(factor);
  }
}

}  // namespace grad_norm
