#pragma once
// A LibTorch error inside a step (a model's forward, a loss, a metric, backward) becomes a baton::Error that says
// what baton was doing and on which batch, with LibTorch's message and without its C++ backtrace:
//   training batch 3 (ep 0 ba 2): the model's forward failed on inputs [64, 1, 14, 14] Float, targets [64] Long
//   (the data's inputs are [1, 28, 28] per sample: a plugin changed them before the forward): mat1 and mat2 ...
// baton's own errors (a plugin's, already naming it and the event) pass through unchanged.
#include <string>
#include <utility>

#include "baton/batch.h"
#include "baton/dataset.h"
#include "baton/error.h"
#include "baton/text.h"
#include "sdk/exception_text.h"
#include "trainer/precision.h"

namespace baton::detail {

// " (the data's inputs are [1, 28, 28] per sample: ...)" when the batch's inputs no longer have the data's shape.
inline std::string changed_inputs_hint(const Batch& batch, const DataSpec& spec) {
  const at::Tensor* inputs = batch.find("inputs");
  if (inputs == nullptr || spec.input_shape.empty() || inputs->dim() == 0) return "";
  const auto per_sample = inputs->sizes().slice(1).vec();
  if (per_sample == spec.input_shape) return "";
  return " (the data's inputs are " + format_shape(spec.input_shape) + " per sample: a plugin changed them before this step; the model " +
         "must accept the changed shape, e.g. with global pooling)";
}

// Runs `call`; a LibTorch error (or any non-baton exception) is rethrown as Error("<where()>: <what> failed on
// <batch>: <message>"). `where` and `spec` are called only on failure, so the step's path builds no strings.
template <class Where, class Spec, class Call>
decltype(auto) during_step(Where&& where, const char* what, const Batch& batch, Spec&& spec, Call&& call) {
  try {
    return call();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(where() + ": " + what + " failed on " + batch.describe() + changed_inputs_hint(batch, spec()) + ": " +
                exception_text(e));
  }
}

// during_step under autocast in `precision` on `device` (a no-op for fp32): the forward pass and the loss of a
// training step, of an evaluation and of a prediction all run this way (Composer's precision context covers the
// forward and the loss, not the plugins' events).
template <class Where, class Spec, class Call>
decltype(auto) autocast_step(Precision precision, c10::DeviceType device, Where&& where, const char* what,
                             const Batch& batch, Spec&& spec, Call&& call) {
  AutocastScope autocast(precision, device);
  return during_step(where, what, batch, spec, call);
}

}  // namespace baton::detail
