#pragma once
// Mixed precision (Composer's `precision`): which dtype autocast runs the forward pass and the loss in, and the
// scope that turns LibTorch's autocast on for a device. Weights, gradients, optimizer state and the EMA stay fp32;
// only the operations autocast lists (matrix products, convolutions, ...) run in bf16 or fp16.
#include <string>
#include <string_view>

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

/// Whether a device computes bfloat16 natively, and what showed it (the CPU's flags, the CUDA device's capability).
struct Bf16Support {
  bool native = false;
  std::string evidence;  // "avx512_bf16 in /proc/cpuinfo", "no avx512_bf16 or amx_bf16 in /proc/cpuinfo", ...
};

/// From the text of /proc/cpuinfo: x86's amx_bf16 or avx512_bf16 flag, Arm's bf16 feature.
Bf16Support cpu_bf16_support(std::string_view cpuinfo);
/// This machine's: the CPU's from /proc/cpuinfo; a CUDA device's from LibTorch's CUDA hooks (compute capability 8.0
/// or later, where cuDNN runs bfloat16 natively).
Bf16Support bf16_support(c10::DeviceType device);

/// The precision a run trains in. "auto" becomes amp_bf16 where `support` is native and fp32 elsewhere (and fp32
/// for a model with its own training step, which trains in fp32 only). An explicit choice stays; `warning` is set
/// when amp_bf16 is asked of a CPU that emulates it, and cleared otherwise.
PrecisionChoice choose_precision(Precision requested, c10::DeviceType device, const Bf16Support& support,
                                 bool own_training_step, std::string& warning);

}  // namespace baton
