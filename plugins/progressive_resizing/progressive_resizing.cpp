// Progressive resizing (fast.ai) as Composer's ProgressiveResizing algorithm: training images start small and grow
// to full size, then a final stretch trains at full size. At after_dataloader, with f the fraction of training
// done before this batch:
//   ramp  = 0 before delay_fraction, then (f - delay_fraction) / (1 - finetune_fraction - delay_fraction), at most 1
//   scale = initial_scale + (1 - initial_scale) * ramp
//   width = round_half_even(W * scale / size_increment) * size_increment,  scale' = width / W
// and the inputs [N, C, H, W] become floor(H scale') x floor(W scale') ("resize": nearest-neighbour interpolation)
// or int(H scale') x int(W scale') ("crop": a random window). Nothing changes once scale' >= 1.
//
//   [[plugins]]
//   name = "progressive_resizing"
//   mode = "resize"           # or "crop"
//   initial_scale = 0.5       # in [0, 1]
//   delay_fraction = 0.5      # in [0, 1]
//   finetune_fraction = 0.2   # in [0, 1], with delay_fraction + finetune_fraction <= 1
//   size_increment = 4        # integer >= 1: widths are multiples of it
//
// The model must accept the smaller images (global pooling before the classifier, as baton's convnet with
// global_pool = true); a model that flattens a fixed size (baton's mlp, its convnet without it) cannot, and at init the plugin runs the model on one training sample at the
// smallest size it will make, so such a run (and `baton check`) fails before training with the model's reason.
// Logs "progressive_resizing/height", "/width" and "/scale_factor".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ops/upsample_nearest2d.h>
#include <c10/util/Exception.h>

#include "baton/plugin.h"
#include "batch_keys.h"
#include "baton/text.h"
#include "batch_random.h"

namespace {

using baton::Event;


double read_fraction(const baton::PluginConfig& config, const char* key, double fallback) {
  const double value = config.get_or<double>(key, fallback);
  if (!(value >= 0 && value <= 1)) config.fail(key, "must be in [0, 1], got " + baton::format_number(value));
  return value;
}

class ProgressiveResizing final : public baton::Algorithm {
 public:
  explicit ProgressiveResizing(const baton::PluginConfig& config)
      : mode_(config.get_or("mode", "resize")),
        initial_scale_(read_fraction(config, "initial_scale", 0.5)),
        delay_fraction_(read_fraction(config, "delay_fraction", 0.5)),
        finetune_fraction_(read_fraction(config, "finetune_fraction", 0.2)),
        size_increment_(config.get_or<std::int64_t>("size_increment", 4)),
        keys_(baton_algorithms::BatchKeys::from(config)) {
    if (mode_ != "resize" && mode_ != "crop") config.fail("mode", "must be \"resize\" or \"crop\", got \"" + mode_ + "\"");
    if (delay_fraction_ + finetune_fraction_ > 1)
      config.fail("finetune_fraction", "delay_fraction + finetune_fraction must be <= 1, got " +
                                           baton::format_number(delay_fraction_) + " + " + baton::format_number(finetune_fraction_));
    if (size_increment_ < 1) config.fail("size_increment", "must be an integer >= 1, got " + std::to_string(size_increment_));
  }

  void subscribe(baton::Subscriptions& events) override {
    events.on(Event::init, [this](baton::State& state, baton::Logger&) { check_model(state); });
    events.on(Event::after_dataloader, this, &ProgressiveResizing::resize_batch);
  }
  void declare(baton::Declarations& run) const override {
    for (const char* name : {"progressive_resizing/height", "progressive_resizing/width",
                             "progressive_resizing/scale_factor"})
      run.metric(name);
  }

  void resize_batch(baton::State& state, baton::Logger& logger) {
    at::Tensor& inputs = keys_.images_of(state, "progressive_resizing");
    const double scale = scale_at(state.progress.fraction());
    const double factor = factor_for(inputs.size(3), scale);
    if (factor < 1) inputs = mode_ == "crop" ? crop(state, inputs, factor) : resize(inputs, factor);
    logger.log_metric("progressive_resizing/height", static_cast<double>(inputs.size(2)));
    logger.log_metric("progressive_resizing/width", static_cast<double>(inputs.size(3)));
    logger.log_metric("progressive_resizing/scale_factor", scale);
  }

 private:
  // The scale is pinned on the width (the height follows it): Python's round() (half to even, the current rounding
  // mode's default), as Composer pins the width, and at least one increment, since a scale rounding to a width of
  // 0 would leave no image (Composer fails there).
  double factor_for(std::int64_t width, double scale) const {
    const double increment = static_cast<double>(size_increment_);
    const double pinned =
        std::max(std::nearbyint(static_cast<double>(width) * scale / increment) * increment, increment);
    return pinned / static_cast<double>(width);
  }

  // The smallest images of the run are those at initial_scale (the scale only grows); crop and resize make the same
  // size. A model that cannot take them fails here, before training, with its own reason.
  void check_model(const baton::State& state) const {
    if (!state.facts.can_probe() || !state.facts.example_batch().has(keys_.input)) return;
    baton::Batch probe = state.facts.example_batch();
    const at::Tensor images = probe[keys_.input];
    if (images.dim() != 4) return;  // the first batch reports it, naming the field and its shape
    const double factor = factor_for(images.size(3), initial_scale_);
    if (factor >= 1) return;
    const at::Tensor small = resize(images, factor);
    probe.set(keys_.input, small);
    std::string reason;
    try {
      state.facts.probe_forward(probe);
      return;
    } catch (const c10::Error& e) {
      reason = e.what_without_backtrace();
    } catch (const std::exception& e) {
      reason = e.what();
    }
    const auto size = [](const at::Tensor& t) { return std::to_string(t.size(2)) + "x" + std::to_string(t.size(3)); };
    throw baton::Error("progressive_resizing: the model cannot take the smaller images this plugin makes: at "
                       "initial_scale " + baton::format_number(initial_scale_) + " the " + size(images) + " images of '" +
                       keys_.input + "' become " + size(small) + ", and the model's forward fails on them (" +
                       reason + "); use a model that pools globally before its classifier (baton's convnet with "
                       "global_pool = true; its mlp, and its convnet without it, flatten a fixed size), or leave "
                       "progressive_resizing out");
  }

  double scale_at(double elapsed) const {
    double ramp = 0;
    if (elapsed >= delay_fraction_) {
      const double length = 1 - finetune_fraction_ - delay_fraction_;
      // A ramp of length 0 is a step to full size at delay_fraction.
      ramp = length > 0 ? std::min((elapsed - delay_fraction_) / length, 1.0) : 1.0;
    }
    return initial_scale_ + (1 - initial_scale_) * ramp;
  }

  // Nearest-neighbour with the scale given, as torch's interpolate(scale_factor=…, recompute_scale_factor=False):
  // the output is floor(size * factor) and source pixels are picked by the factor, not the size ratio.
  static at::Tensor resize(const at::Tensor& inputs, double factor) {
    const auto h = static_cast<std::int64_t>(std::floor(static_cast<double>(inputs.size(2)) * factor));
    const auto w = static_cast<std::int64_t>(std::floor(static_cast<double>(inputs.size(3)) * factor));
    return at::upsample_nearest2d(inputs, {h, w}, factor, factor);
  }

  // A window of int(size * factor) at a random offset, the same for the whole batch (from the batch's generator,
  // so a resumed run crops where the uninterrupted one did).
  static at::Tensor crop(const baton::State& state, const at::Tensor& inputs, double factor) {
    const auto h = static_cast<std::int64_t>(factor * static_cast<double>(inputs.size(2)));
    const auto w = static_cast<std::int64_t>(factor * static_cast<double>(inputs.size(3)));
    baton_algorithms::BatchRandom random(state, "progressive_resizing");
    const std::int64_t top = inputs.size(2) > h ? random.below(inputs.size(2) - h) : 0;
    const std::int64_t left = inputs.size(3) > w ? random.below(inputs.size(3) - w) : 0;
    return inputs.narrow(2, top, h).narrow(3, left, w).contiguous();
  }

  std::string mode_;
  double initial_scale_;
  double delay_fraction_;
  double finetune_fraction_;
  std::int64_t size_increment_;
  baton_algorithms::BatchKeys keys_;
};

}  // namespace

BATON_PLUGIN(ProgressiveResizing, "progressive_resizing", "1.0.0",
             "progressive resizing: trains on smaller images early, growing to full size")
