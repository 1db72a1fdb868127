#pragma once
// Optimizer state in checkpoints, keyed by parameter name (not by tensor address, which changes between runs):
// per-parameter buffers (SGD momentum; Adam/AdamW step, exp_avg, exp_avg_sq, max_exp_avg_sq) as tensors
// "<param name>/<buffer>", and each param group's options (lr, ...) as scalars "group<i>/<option>".
// Supported: torch::optim::SGD, Adam, AdamW. Another optimizer type is a baton::Error naming it.
//
// Public so that a plugin that creates and keeps an optimizer of its own can carry it in its state_dict (and
// resume bitwise) the way the trainer carries the run's.
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"
#include "baton/state_dict.h"


namespace torch::optim {
class Optimizer;
}

namespace baton {

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

/// The optimizer's state, keyed by the names of `parameters` (the parameters it optimizes, e.g.
/// module.named_parameters()).
BATON_API StateDict export_optimizer_state(const torch::optim::Optimizer& optimizer, const NamedParameters& parameters);

/// Restores what export_optimizer_state wrote into an optimizer over the same parameters. Throws CheckpointError
/// naming the tensor on a missing entry or a shape/dtype mismatch.
BATON_API void import_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& parameters,
                            const StateDict& state);

}  // namespace baton
