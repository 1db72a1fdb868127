// A callback that logs the global gradient norm as the metric "grad_norm/total" at after_train_batch (the step's
// final gradients, before the optimizer steps) of every `every`-th batch. Algorithms run before callbacks there, so
// with grad_clip loaded it sees the clipped gradients.
//
//   [[plugins]]
//   path = "build/grad_norm_logger.so"
//   every = 10        # optional, batches; default 1
#include <cstdint>
#include <string>

#include "baton/plugin.h"
#include "grad_norm.h"

namespace {

class GradNormLogger final : public baton::Callback {
 public:
  explicit GradNormLogger(const baton::PluginConfig& config)
      : every_(config.get_int_or("every", 1, baton::Range::at_least(1), "batches between two measurements")) {}

  void declare(baton::Declarations& run) const override { run.metric("grad_norm/total"); }

  void after_train_batch(baton::State& state, baton::Logger& logger) override {
    // The batch counter counts finished batches: the first batch is 0 here, so batches 0, every, 2*every, ...
    if (state.timestamp().batch % every_ != 0) return;
    logger.log_metric("grad_norm/total", grad_norm::global_norm(grad_norm::model_of(state, "grad_norm_logger")));
  }

 private:
  std::int64_t every_;
};

}  // namespace

BATON_PLUGIN(GradNormLogger, "grad_norm_logger", "1.0.0", "logs the global gradient norm before the optimizer steps")
