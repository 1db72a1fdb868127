#pragma once
// Mixed precision (Composer's `precision`): which dtype autocast runs the forward pass and the loss in, and the
// scope that turns LibTorch's autocast on for a device. Weights, gradients, optimizer state and the EMA stay fp32;
// only the operations autocast lists (matrix products, convolutions, ...) run in bf16 or fp16.
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include "baton/settings.h"

namespace baton {

// Precision itself (the enum and its names) is a setting: baton/settings.h.

/// Autocast on `device` in `precision`'s dtype for the scope's lifetime, restoring the thread's previous autocast
/// state (on, off, dtype) when it ends. A no-op for fp32. Not copyable: one scope per forward or loss.
class AutocastScope {
 public:
  AutocastScope(Precision precision, c10::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_ = c10::DeviceType::CPU;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

}  // namespace baton
