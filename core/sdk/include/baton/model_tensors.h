#pragma once
// The one walk over a module's tensors that the trainer, its checkpoints, the EMA and post-hoc EMA share, so they
// all agree on names and order: every parameter, then every buffer, each in registration order, under its dotted
// name ("features.0.weight"). Undefined tensors (an optional bias left out) are skipped.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"

namespace torch::nn {
class Module;
}

namespace baton {

/// Tensors under their names, in order: a module's (below), a safetensors file's (baton/safetensors.h).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct ModelTensor {
  std::string name;
  at::Tensor tensor;  // the module's own tensor (not a copy)
  bool parameter;     // false: a buffer (batch-norm statistics, counters)
};

/// A weight a run keeps only as this rank's rows between steps (sharding zero3 releases the model's parameters
/// outside their unit's forward): its name in the model, its global shape, and this rank's rows of it (dim-0 rows as
/// torch.chunk(t, W, 0) gives rank r; [0, ...] rows on a rank that holds none) as a view into the run's shard, so
/// writing it writes the weight.
struct HeldRows {
  std::string name;
  std::vector<std::int64_t> shape;
  at::Tensor rows;
};

/// Parameters, then buffers.
BATON_API std::vector<ModelTensor> model_tensors(const torch::nn::Module& module);

/// The same as (name, tensor) pairs; with `buffers` false, the parameters alone.
BATON_API NamedTensors named_model_tensors(const torch::nn::Module& module, bool buffers = true);

}  // namespace baton
