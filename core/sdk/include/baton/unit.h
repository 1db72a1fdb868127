#pragma once
// Units: the sub-modules whose parameters a run sharded "zero3" gathers one at a time. C++ modules have no forward
// hooks, so a model marks where a unit's forward runs by calling it through run_unit:
//
//   h = baton::run_unit(*block.ptr(), [block](const at::Tensor& x) mutable { return block->forward(x); }, h);
//
// Under zero3, when `block` is one of the run's units, its parameters are all-gathered for that call and released
// after it; the backward gathers them again and recomputes the call (so `forward` runs twice per training step:
// capture what it uses by value, as above), reduce-scatters the unit's gradients and releases them. Outside a
// zero3 run, or for a module that is not a unit, run_unit is `forward(input)`. The built-in models call their
// layers this way; torch::nn::Sequential models given to baton::Model run each part through it.
#include <functional>

#include <ATen/core/Tensor.h>

#include "baton/export.h"

namespace torch::nn {
class Module;
class AnyModule;
}

namespace baton {

/// A unit's forward: one tensor in, one out.
using UnitForward = std::function<at::Tensor(const at::Tensor&)>;

/// `forward(input)`, as the forward of unit `module` when the run shards it (above).
BATON_API at::Tensor run_unit(const torch::nn::Module& module, const UnitForward& forward, const at::Tensor& input);
/// The same for a part of a torch::nn::Sequential (its forward: one tensor in, one out).
BATON_API at::Tensor run_unit(torch::nn::AnyModule& part, const at::Tensor& input);

}  // namespace baton
