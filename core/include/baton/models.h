#pragma once
// The built-in models. Both map float32 [N, 1, 28, 28] images to [N, num_classes] logits.
//   mlp     — flatten, Linear+ReLU per hidden width, Linear.
//   convnet — per width: Conv3x3 (no bias) + BatchNorm + ReLU + MaxPool2; then Linear(128)+ReLU, Linear.
//             BatchNorm's running stats and num_batches_tracked are buffers, so checkpoints must carry buffers.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>

#include "baton/export.h"

namespace baton {

struct BATON_API ModelSpec {
  std::string name = "convnet";       // mlp | convnet
  std::vector<std::int64_t> widths;   // empty: the model's default (mlp {256, 128}, convnet {32, 64})
  std::int64_t input_channels = 1;
  std::int64_t input_size = 28;       // height = width
  std::int64_t num_classes = 10;
};

/// Builds the model with LibTorch's default initialisation (so the global RNG seed decides the weights).
/// Throws baton::Error for an unknown name.
BATON_API torch::nn::AnyModule make_model(const ModelSpec& spec);

}  // namespace baton
