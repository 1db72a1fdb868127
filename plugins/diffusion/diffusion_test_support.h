#pragma once
// For the tests that run the diffusion plugin (its own, the tensorboard logger's): a tiny run of it, and the fd
// metric's classifier that run reads. Include after "baton_test.h".
#include <filesystem>
#include <fstream>
#include <string>

#include "baton/models.h"
#include "baton/safetensors.h"

namespace diffusion_test {

/// The fd metric's classifier, a convnet of random weights (its features are features all the same), and its
/// config, as a main job's run would leave them.
inline void write_classifier(const std::filesystem::path& dir) {
  at::manual_seed(11);
  baton::ModelSpec spec;
  spec.name = "convnet";
  spec.widths = {8};
  auto model = baton::make_model(spec).ptr();
  baton::NamedTensors tensors;
  for (const auto& p : model->named_parameters()) tensors.emplace_back(p.key(), p.value().detach());
  for (const auto& b : model->named_buffers()) tensors.emplace_back(b.key(), b.value());
  baton::write_safetensors((dir / "classifier.safetensors").string(), tensors);
  std::ofstream(dir / "classifier.toml") << "[model]\nname = \"convnet\"\nwidths = [8]\n";
}

/// A run of a small denoiser for `duration` on 128 synthetic images (4 batches an epoch), evaluated (EMA and raw
/// weights, sample grids of 8 by the diffusion library `plugin_file`, their fd) and saved every 4 batches.
inline std::string tiny_config(const std::string& name, const std::string& duration, const std::string& plugin_file) {
  return R"([run]
name = ")" + name + R"("
dir = "runs"
seed = 3
[data]
name = "synthetic"
train_size = 128
eval_size = 32
batch_size = 32
eval_batch_size = 16
metrics = [{ name = "fd", classifier = "classifier.safetensors", classifier_config = "classifier.toml" }]
[model]
name = "denoiser"
channels = 8
timesteps = 100
sample_steps = 4
[optimizer]
name = "adam"
lr = 0.002
[trainer]
precision = "fp32"
max_duration = ")" + duration + R"("
eval_interval = "4ba"
progress = false
[checkpoint]
save_interval = "4ba"
[[plugins]]
name = "ema"
half_life = "4ba"
eval = "both"
[[plugins]]
path = ")" + plugin_file + R"("
grid = 8
columns = 4
)";
}

}  // namespace diffusion_test
