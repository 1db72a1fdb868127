// lr_monitor: logs every parameter group's learning rate after each batch (Composer's LRMonitor), as
// "lr/group<i>". docs/algorithms.md has the details.
#include <string>

#include <torch/optim/optimizer.h>

#include "baton/plugin.h"

namespace {

class LrMonitor final : public baton::Callback {
 public:
  LrMonitor() = default;

  // At batch_end the optimizer holds the lr this batch was trained with (the schedule sets it before the batch,
  // at before_train_batch), and the timestamp counts the batch, so the values land in that batch's line.
  // One metric per parameter group of the optimizer, which is built after plugins declare: "lr/group0", ...
  void declare(baton::Declarations& run) const override { run.metric_family("lr/group"); }

  void batch_end(baton::State& state, baton::Logger& logger) override {
    if (!state.facts.optimizer()) return;
    const auto& groups = state.facts.optimizer()->param_groups();
    for (std::size_t i = 0; i < groups.size(); ++i)
      logger.log_metric("lr/group" + std::to_string(i), groups[i].options().get_lr());
  }
};

}  // namespace

BATON_PLUGIN(LrMonitor, "lr_monitor", "1.0.0", "logs each parameter group's learning rate after every batch")
