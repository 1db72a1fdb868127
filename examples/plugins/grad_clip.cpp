// An algorithm that clips the global gradient norm to `max_norm` after the backward pass, before the optimizer
// step, and logs "grad_clip/clipped": the fraction of batches so far whose norm was above max_norm. The counts
// are kept in checkpoints, so the fraction continues across a resume.
//
//   [[plugins]]
//   path = "build/grad_clip.so"
//   max_norm = 1.0    # required, > 0
#include <cstdint>
#include <sstream>
#include <string>

#include "baton/plugin.h"
#include "grad_norm.h"

namespace {

std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

class GradClip final : public baton::Algorithm {
 public:
  explicit GradClip(const baton::PluginConfig& config) : max_norm_(config.get<double>("max_norm")) {
    if (!(max_norm_ > 0)) config.fail("max_norm", "must be > 0, got " + number_text(max_norm_));
  }

  bool match(baton::Event event, const baton::State&) override { return event == baton::Event::after_backward; }

  void apply(baton::Event, baton::State& state, baton::Logger& logger) override {
    torch::nn::Module& model = grad_norm::model_of(state, "grad_clip");
    const double norm = grad_norm::global_norm(model);
    ++batches_;
    if (norm > max_norm_) {
      grad_norm::scale(model, max_norm_ / norm);
      ++clipped_;
    }
    logger.log_metric("grad_clip/clipped", static_cast<double>(clipped_) / static_cast<double>(batches_));
  }

  void state_dict(baton::StateDict& out) const override {
    out.set_int("batches", batches_);
    out.set_int("clipped", clipped_);
  }

  void load_state_dict(const baton::StateDict& in) override {
    // Empty when the checkpoint was written without this plugin: start counting afresh.
    batches_ = in.has("batches") ? in.get_int("batches") : 0;
    clipped_ = in.has("clipped") ? in.get_int("clipped") : 0;
  }

 private:
  double max_norm_;
  std::int64_t batches_ = 0;
  std::int64_t clipped_ = 0;
};

}  // namespace

BATON_PLUGIN(GradClip, "grad_clip", "1.0.0", "clips the global gradient norm to max_norm after backward")
