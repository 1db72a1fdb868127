#include "trainer/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "baton/error.h"

// LibTorch 2.4 made autocast's state per device type (set_autocast_enabled(device, on)) and deprecated the
// per-device functions (set_cpu_enabled) that 1.13 has alone.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define BATON_AUTOCAST_BY_DEVICE_TYPE 1
#else
#define BATON_AUTOCAST_BY_DEVICE_TYPE 0
#endif

namespace baton {

namespace {

bool autocast_enabled(c10::DeviceType device) {
#if BATON_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_autocast_enabled(c10::DeviceType device, bool enabled) {
#if BATON_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CUDA)
    at::autocast::set_enabled(enabled);
  else
    at::autocast::set_cpu_enabled(enabled);
#endif
}

c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if BATON_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
#if BATON_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CUDA)
    at::autocast::set_autocast_gpu_dtype(dtype);
  else
    at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

}  // namespace

AutocastScope::AutocastScope(Precision precision, c10::DeviceType device) {
  if (precision == Precision::fp32) return;
  active_ = true;
  device_ = device;
  was_enabled_ = autocast_enabled(device);
  previous_dtype_ = autocast_dtype(device);
  set_autocast_dtype(device, precision == Precision::amp_fp16 ? c10::ScalarType::Half : c10::ScalarType::BFloat16);
  set_autocast_enabled(device, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Leaving the outermost scope drops autocast's cache of lower-precision weight copies, which are only valid
  // until the optimizer changes the weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_enabled(device_, was_enabled_);
  set_autocast_dtype(device_, previous_dtype_);
}

}  // namespace baton
