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
#include <filesystem>
#include <string>
#include <vector>

#include "baton/components.h"
#include "baton/plugin.h"
#include "denoiser.h"
#include "fd_metric.h"
#include "sample_grids.h"

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

// The library's callback: image_grid's sample grids of the denoiser's "pixels", with the count under `grid`.
class SampleGrids final : public baton_plugins::SampleGrids {
 public:
  explicit SampleGrids(const baton::PluginConfig& config)
      : baton_plugins::SampleGrids(config, "pixels", "grid", "diffusion") {}
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
