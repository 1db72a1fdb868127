// An algorithm that clips the global gradient norm to `max_norm` at after_train_batch — once per step, after the
// microbatches' gradients are summed, averaged across ranks and unscaled (amp_fp16), before the optimizer steps:
// the gradients the optimizer will use — and logs "grad_clip/clipped": the fraction of steps so far whose norm was
// above max_norm. The counts are kept in checkpoints, so the fraction continues across a resume.
//
//   [[plugins]]
//   path = "build/grad_clip.so"
//   max_norm = 1.0    # required, > 0
#include <cstdint>

#include "baton/plugin.h"
#include "grad_norm.h"

namespace {

class GradClip final : public baton::Algorithm {
 public:
  // The getter checks the range and says what the key is for in its error, at the key's file and line.
  explicit GradClip(const baton::PluginConfig& config)
      : max_norm_(config.get_number("max_norm", baton::Range::above(0), "the largest global gradient norm")) {}

  // One line per event it acts on.
  void subscribe(baton::Subscriptions& events) override {
    events.on(baton::Event::after_train_batch, this, &GradClip::clip);
  }

  // What it logs, declared before the run, so a stopper may watch it and `baton check` knows the name.
  void declare(baton::Declarations& run) const override { run.metric("grad_clip/clipped"); }

  void clip(baton::State& state, baton::Logger& logger) {
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

BATON_PLUGIN(GradClip, "grad_clip", "1.0.0", "clips the global gradient norm to max_norm before the optimizer steps")
