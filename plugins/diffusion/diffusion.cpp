// The diffusion example as one plugin library (docs/diffusion.md):
//   model  `denoiser`  a U-Net trained DDPM-style (its own loss), sampling with DDIM at evaluation and prediction;
//   metric `fd`        the Frechet distance of its samples from the real evaluation images, in the features of a
//                      classifier baton trained;
//   and, as the library's callback, the sample grids: at every evaluation a PNG of each weight set's first samples
//   (samples/eval_ba1000.png, samples/eval_raw_ba1000.png), also logged as images ("samples/eval",
//   "samples/eval_raw") for the run's loggers that keep them (tensorboard), and samples/predict.png from `baton
//   predict` (under the current folder: a prediction has no run folder).
// A callback library may register components too (the loader registers them when it loads the library), so one
// [[plugins]] entry brings all three; its keys are the grid's.
#include <ATen/ops/cat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "baton/components.h"
#include "baton/durable_file.h"
#include "baton/logger_destination.h"
#include "baton/plugin.h"
#include "denoiser.h"
#include "fd_metric.h"
#include "png_encode.h"
#include "png_grid.h"

namespace {

using baton_diffusion::DenoiserSettings;
using baton_diffusion::Schedule;

baton::Model make_denoiser(const baton::PluginConfig& config, const baton::DataSpec& data) {
  DenoiserSettings s;
  s.schedule = config.get_choice_or("schedule", "linear", {"linear", "cosine"}) == "cosine" ? Schedule::cosine
                                                                                           : Schedule::linear;
  s.timesteps = config.get_int_or("timesteps", 1000, baton::Range::at_least(1));
  s.sample_steps = config.get_int_or("sample_steps", 50, baton::Range::closed(1, static_cast<double>(s.timesteps)));
  s.base = config.get_int_or("channels", 32, baton::Range::at_least(2));
  if (s.base % 2 != 0) config.fail("channels", "expected an even width (sines and cosines of the timestep)");
  s.pixel_mean = config.get_number_or("pixel_mean", 0.2860, baton::Range::closed(-1e6, 1e6));
  s.pixel_std = config.get_number_or("pixel_std", 0.3530, baton::Range::above(0));
  const baton::FieldSpec* inputs = data.field("inputs");
  const std::vector<std::int64_t> shape = inputs ? inputs->shape : data.input_shape;
  if (shape.size() != 3 || shape[1] % 4 != 0 || shape[2] % 4 != 0)
    config.fail("name", "the denoiser takes images [C, H, W] with H and W divisible by 4; the data gives " +
                            data.describe());
  return baton_diffusion::make_denoiser(s, shape, []() -> at::Generator& { return baton::step_generator(); });
}

// Collects the first `count` images of an output during an evaluation pass (or a prediction) and writes them as a
// grid when it ends.
class SampleGrids final : public baton::Callback {
 public:
  explicit SampleGrids(const baton::PluginConfig& config)
      : count_(config.get_int_or("grid", 64, baton::Range::at_least(1))),
        columns_(config.get_int_or("columns", 8, baton::Range::at_least(1))),
        output_(config.get_or("output", "pixels")) {}

  void eval_start(baton::State&, baton::Logger&) override { collected_.clear(); }
  void eval_after_forward(baton::State& state, baton::Logger&) override { collect(state); }
  void eval_end(baton::State& state, baton::Logger& logger) override {
    // A standalone evaluation (baton eval, each width of baton posthoc --sweep) has no run folder: no grid, rather
    // than one in the current folder that every evaluation overwrites.
    if (state.facts.run_dir().empty()) return;
    std::string name = state.eval_label;
    if (!state.eval_set.empty()) name += "_" + state.eval_set;
    write(state, logger, name, name + "_ba" + std::to_string(state.timestamp().batch) + ".png");
  }
  void predict_start(baton::State&, baton::Logger&) override { collected_.clear(); }
  void predict_after_forward(baton::State& state, baton::Logger&) override { collect(state); }
  void predict_end(baton::State& state, baton::Logger& logger) override { write(state, logger, "", "predict.png"); }

 private:
  void collect(const baton::State& state) {
    std::int64_t have = 0;
    for (const auto& t : collected_) have += t.size(0);
    const at::Tensor* images = state.outputs.find(output_);
    if (images == nullptr || have >= count_) return;
    collected_.push_back(images->detach().slice(0, 0, count_ - have).to(at::kFloat).cpu());
  }
  // `tag` names the grid for the run's loggers ("samples/<tag>"); empty: the file only.
  void write(const baton::State& state, baton::Logger& logger, const std::string& tag, const std::string& file) {
    // Rank 0 draws its own share (the grid's first samples); a run that writes nothing gets no pictures.
    if (collected_.empty() || state.facts.rank() != 0) return;
    const std::filesystem::path folder = std::filesystem::path(state.facts.run_dir().empty() ? "." : state.facts.run_dir()) / "samples";
    std::filesystem::create_directories(folder);
    const std::string path = (folder / file).string();
    const baton::Image grid = baton_diffusion::grid_image(at::cat(collected_), columns_);
    collected_.clear();
    const std::vector<std::uint8_t> png = baton_plugins::encode_png(grid, "sample grid '" + path + "'");
    // Durable like a checkpoint: a reader finds the previous grid or the complete new one.
    baton::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
    if (!tag.empty()) baton::log_image(logger, "samples/" + tag, grid);
    logger.info("diffusion: wrote " + path);
  }

  std::int64_t count_, columns_;
  std::string output_;
  std::vector<at::Tensor> collected_;
};

void register_diffusion(baton::Components& components) {
  components.models.add("denoiser",
                        "U-Net denoiser trained DDPM-style, DDIM samples at evaluation; keys schedule, timesteps, "
                        "sample_steps, channels, pixel_mean, pixel_std",
                        &make_denoiser);
  components.metrics.add("fd",
                         "Frechet distance of samples from real images in a baton-trained convnet's features; keys "
                         "classifier, classifier_config, samples, real",
                         &baton_diffusion::make_fd_metric);
}

}  // namespace

BATON_PLUGIN_ENTRY_POINT("diffusion", "1.0.0",
                         "DDPM denoiser (model denoiser), Frechet distance (metric fd), PNG sample grids",
                         BATON_PLUGIN_CALLBACK, &::baton::detail::create_plugin<SampleGrids>, &register_diffusion)
