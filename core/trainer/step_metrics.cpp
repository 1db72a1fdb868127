#include "trainer/step_metrics.h"

#include <ATen/ops/argmax.h>
#include <ATen/ops/cross_entropy_loss.h>

namespace baton {

at::Tensor default_loss(const at::Tensor& outputs, const at::Tensor& targets) {
  // ATen's cross entropy takes both forms itself: a floating target of the input's shape is read as
  // probabilities (PyTorch >= 1.10), an integral one as class indices.
  return at::cross_entropy_loss(outputs, targets);
}

std::int64_t count_correct(const at::Tensor& outputs, const at::Tensor& targets) {
  const at::Tensor classes = targets.dim() == outputs.dim() ? targets.argmax(1) : targets;
  return outputs.argmax(1).eq(classes).sum().item<std::int64_t>();
}

}  // namespace baton
