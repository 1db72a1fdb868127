#include "trainer/precision.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include <ATen/autocast_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
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

Bf16Support cpu_bf16_support(std::string_view cpuinfo) {
  // The first "flags" (x86) or "Features" (Arm) line: every core of a machine lists the same.
  auto words_of = [&](std::string_view key) -> std::vector<std::string> {
    std::size_t at = 0;
    while (at < cpuinfo.size()) {
      std::size_t end = cpuinfo.find('\n', at);
      if (end == std::string_view::npos) end = cpuinfo.size();
      const std::string_view line = cpuinfo.substr(at, end - at);
      at = end + 1;
      const std::size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view name = line.substr(0, colon);
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
      if (name != key) continue;
      std::vector<std::string> words;
      std::istringstream in{std::string(line.substr(colon + 1))};
      for (std::string word; in >> word;) words.push_back(word);
      return words;
    }
    return {};
  };
  auto has = [](const std::vector<std::string>& words, const char* word) {
    return std::find(words.begin(), words.end(), word) != words.end();
  };
  if (const auto flags = words_of("flags"); !flags.empty()) {
    for (const char* flag : {"amx_bf16", "avx512_bf16"})
      if (has(flags, flag)) return {true, std::string(flag) + " in /proc/cpuinfo"};
    return {false, "no avx512_bf16 or amx_bf16 in /proc/cpuinfo"};
  }
  if (const auto features = words_of("Features"); !features.empty()) {
    if (has(features, "bf16")) return {true, "bf16 in /proc/cpuinfo"};
    return {false, "no bf16 in /proc/cpuinfo's Features"};
  }
  return {false, "no CPU flags in /proc/cpuinfo"};
}

Bf16Support bf16_support(c10::DeviceType device) {
  if (device == c10::DeviceType::CUDA) {
    // LibTorch's answer to whether cuDNN runs bfloat16 natively here: compute capability 8.0 (Ampere) or later.
    if (at::detail::getCUDAHooks().supportsBFloat16ConvolutionWithCuDNNv8())
      return {true, "the CUDA device has compute capability 8.0 or later"};
    return {false, "the CUDA device is older than compute capability 8.0 (or LibTorch has no cuDNN)"};
  }
  std::ifstream in("/proc/cpuinfo");
  if (!in) return {false, "/proc/cpuinfo could not be read"};
  std::ostringstream text;
  text << in.rdbuf();
  return cpu_bf16_support(text.str());
}

PrecisionChoice choose_precision(Precision requested, c10::DeviceType device, const Bf16Support& support,
                                 bool own_training_step, std::string& warning) {
  warning.clear();
  const char* where = device == c10::DeviceType::CUDA ? "this CUDA device" : "this CPU";
  if (requested == Precision::automatic) {
    if (own_training_step) return {Precision::fp32, "auto: a model with its own training step trains in fp32"};
    if (support.native)
      return {Precision::amp_bf16, std::string("auto: ") + where + " computes bfloat16 natively (" +
                                       support.evidence + ")"};
    return {Precision::fp32, std::string("auto: ") + where + " would emulate bfloat16, slower than fp32 (" +
                                 support.evidence + ")"};
  }
  if (requested != Precision::amp_bf16 || support.evidence.empty()) return {requested, "as configured"};
  const std::string seen = std::string(where) + (support.native ? " computes bfloat16 natively (" : " emulates bfloat16 (") +
                           support.evidence + ")";
  if (device == c10::DeviceType::CPU && !support.native)
    warning = "precision = \"amp_bf16\" on a CPU that emulates bfloat16 (" + support.evidence +
              "): expect it slower than fp32; precision = \"auto\" chooses fp32 here";
  return {requested, "as configured; " + seen};
}

}  // namespace baton
