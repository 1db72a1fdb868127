#pragma once
// The data the trainer consumes: an in-memory dataset of inputs [N, ...] and int64 class targets [N]. Programs that
// embed baton fill one with their own tensors; `baton train` loads Fashion-MNIST, MNIST or a synthetic set into one.
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "baton/export.h"

namespace baton {

struct BATON_API TensorDataset {
  std::string name;     // "fashion-mnist/train", "synthetic/eval", ...
  at::Tensor inputs;    // float32 [N, ...], normalised
  at::Tensor targets;   // int64 [N]
  std::int64_t num_classes = 10;
  std::int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

struct BATON_API Batch {
  at::Tensor inputs;
  at::Tensor targets;
  std::int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

}  // namespace baton
