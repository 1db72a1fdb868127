#pragma once
// For the tests that run the diffusion plugin (its own, the tensorboard logger's): the fd metric's classifier, a
// convnet of random weights (its features are features all the same) and its config, as a main job's run would
// leave them. Include after "baton_test.h".
#include <filesystem>
#include <fstream>

#include "baton/models.h"
#include "baton/safetensors.h"

namespace diffusion_test {

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

}  // namespace diffusion_test
