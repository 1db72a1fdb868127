// nan_monitor: fails the run on a non-finite training loss, before the backward pass and the optimizer step can
// carry it into the weights (Composer's NaNMonitor, which catches nan; inf is caught too). docs/algorithms.md has
// the details.
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>
#include <ATen/ops/all.h>
#include <ATen/ops/isfinite.h>

#include "baton/communicator.h"
#include "baton/plugin.h"

namespace {

class NanMonitor final : public baton::Callback {
 public:
  NanMonitor() = default;

  // after_loss: the loss as the backward pass will take it (algorithms' loss terms included: they run before
  // callbacks), with the weights still those after the previous batch. With microbatches it fires per microbatch.
  void after_loss(baton::State& state, baton::Logger&) override {
    if (!state.loss.defined()) return;
    const at::Tensor loss = state.loss.detach();
    bool bad = !at::isfinite(loss).all().item<bool>();
    // Every rank must stop at the same point: a rank left alone in the gradient average would wait for the others
    // until the timeout.
    if (state.facts.communicator()) bad = state.facts.communicator()->any(bad);
    if (!bad) return;
    const auto& now = state.timestamp();
    // Before the batch ends the timestamp counts the batches before it: this one is number batch + 1.
    const std::int64_t batch = now.batch + 1;
    std::string value = "is non-finite on another rank";
    if (!at::isfinite(loss).all().item<bool>()) value = loss.numel() == 1 ? "is " + baton::format_number(loss.item<double>())
                                                                          : "has non-finite elements";
    throw baton::Error("nan_monitor: the training loss of batch " + std::to_string(batch) + " (epoch " +
                       std::to_string(now.epoch + 1) + ", batch " + std::to_string(now.batch_in_epoch + 1) +
                       " of the epoch) " + value + "; stopped before its backward pass and optimizer step, so the "
                       "weights are those after batch " + std::to_string(now.batch));
  }
};

}  // namespace

BATON_PLUGIN(NanMonitor, "nan_monitor", "1.0.0", "fails the run on a non-finite training loss, naming the batch")
