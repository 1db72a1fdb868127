#pragma once
// The default loss and the accuracy count, for targets given as class indices (int64 [N]) or as class
// probabilities (float [N, C]: label smoothing, MixUp), which the step's targets on State may have become.
#include <cstdint>

#include <ATen/core/Tensor.h>


namespace baton {

/// Mean cross entropy of logits [N, C] against class indices [N] or class probabilities [N, C].
at::Tensor default_loss(const at::Tensor& outputs, const at::Tensor& targets);

/// How many rows of outputs [N, C] have their argmax at the target class: the index, or the argmax of the
/// probabilities for soft targets.
std::int64_t count_correct(const at::Tensor& outputs, const at::Tensor& targets);

}  // namespace baton
