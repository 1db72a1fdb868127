#pragma once
// The built-in models (also registered as components "mlp" and "convnet", their shapes taken from the dataset).
//   mlp     — flatten, Linear+ReLU per hidden width, Linear: any input shape.
//   convnet — per width: Conv3x3 (no bias) + BatchNorm + ReLU + MaxPool2; then Linear(128)+ReLU, Linear: inputs
//             [N, C, H, W]. BatchNorm's running stats and num_batches_tracked are buffers, so checkpoints must
//             carry buffers.
// Both end in `outputs` values per sample: class logits, or regressed values.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>

#include "baton/export.h"

namespace baton {

struct BATON_API ModelSpec {
  std::string name = "convnet";       // mlp | convnet
  std::vector<std::int64_t> widths;   // mlp: hidden widths, empty for a linear model; convnet: block channels,
                                      // empty for the default {32, 64}
  std::vector<std::int64_t> input_shape = {1, 28, 28};  // one sample's (convnet: channels, height, width)
  std::int64_t outputs = 10;                            // per sample: classes, or values to regress
  double dropout = 0;  // in [0, 1): dropout after each hidden ReLU of the mlp / the convnet's classifier, in training
  // convnet: average each channel over the image before the classifier, so images of any size fit it (progressive
  // resizing); false flattens the feature maps of the data's size, as trained before this existed.
  bool global_pool = false;
};

/// Builds the model with LibTorch's default initialisation (so the global RNG seed decides the weights).
/// Throws baton::Error for an unknown name.
BATON_API torch::nn::AnyModule make_model(const ModelSpec& spec);

}  // namespace baton
