#pragma once
// The sample-grid callback (docs/algorithms.md, `image_grid`): during every evaluation pass and prediction it keeps
// the first images of one of the model's outputs and, when the pass ends, writes them as one PNG grid to
// <run_dir>/samples/<pass>_ba<batch>.png (predict.png for a prediction, in ./samples: a prediction has no run
// folder) and logs it as the image "samples/<pass>" for the run's loggers that keep images (tensorboard). An image
// generator's evaluation forward (a GAN's G, a diffusion model's sampler) makes those outputs. Compiled into the
// image_grid plugin and into the diffusion library, whose [[plugins]] entry brings it with output "pixels".
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/plugin.h"

namespace baton_plugins {

class SampleGrids : public baton::Callback {
 public:
  /// Keys: output (the field, `default_output` when absent), `count_key` (how many images: 64), columns (8),
  /// range ([0, 1]: the values shown black and white).
  SampleGrids(const baton::PluginConfig& config, const std::string& default_output, const std::string& count_key,
              std::string log_prefix);

  void init(baton::State& state, baton::Logger& logger) override;
  void eval_start(baton::State& state, baton::Logger& logger) override;
  void eval_after_forward(baton::State& state, baton::Logger& logger) override;
  void eval_end(baton::State& state, baton::Logger& logger) override;
  void predict_start(baton::State& state, baton::Logger& logger) override;
  void predict_after_forward(baton::State& state, baton::Logger& logger) override;
  void predict_end(baton::State& state, baton::Logger& logger) override;

 private:
  void collect(const baton::State& state);
  void write(const baton::State& state, baton::Logger& logger, const std::string& tag, const std::string& file);

  baton::PluginConfig config_;  // where an output the model never makes is reported
  std::string output_;
  std::int64_t count_, columns_;
  double low_ = 0, high_ = 1;
  std::string log_prefix_;  // "image_grid", "diffusion": the plugin the console lines name
  std::vector<at::Tensor> collected_;
  bool seen_output_ = false;  // the current pass's outputs held `output_`
};

}  // namespace baton_plugins
