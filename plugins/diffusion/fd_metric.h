#pragma once
// The `fd` metric: the Frechet distance between features of real evaluation images and of the model's samples, the
// features being the penultimate activations (after the hidden ReLU) of a convnet classifier that baton trained.
#include <memory>
#include <string>

#include "baton/components.h"

namespace baton_diffusion {

/// The metric's factory: keys `classifier` (its model.safetensors), `classifier_config` (the TOML it was trained
/// with: its [model] says the architecture), `samples` (the output to score, default "samples") and `real` (the
/// batch field of real images, default "inputs").
std::unique_ptr<baton::Metric> make_fd_metric(const baton::PluginConfig& config, const baton::DataSpec& data);

}  // namespace baton_diffusion
