// memory_monitor: the process's memory at batch_end every `interval` batches, into that batch's line (Composer's
// MemoryMonitor; docs/algorithms.md), in MiB (2^20 bytes):
//   memory/rss_mib, memory/peak_rss_mib   resident memory now (VmRSS of /proc/self/status) and at its highest so
//                                         far (getrusage's ru_maxrss), on every device
//   memory/cuda_allocated_mib, memory/cuda_peak_allocated_mib, memory/cuda_reserved_mib
//                                         LibTorch's CUDA caching allocator on the run's device: tensor memory now
//                                         and at its peak, and what the allocator holds from the driver; only when
//                                         the plugin is built against a CUDA LibTorch and the run is on a GPU
#include <sys/resource.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "baton/plugin.h"

#ifdef BATON_MEMORY_MONITOR_CUDA
#include <c10/core/Device.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// ru_maxrss is in KiB on Linux.
double peak_rss_mib() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return -1;
  return static_cast<double>(usage.ru_maxrss) * 1024.0 / kMiB;
}

// VmRSS of /proc/self/status ("VmRSS:     1234 kB"); -1 when the file does not have it.
double rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    double kib = -1;
    fields >> kib;
    return kib < 0 ? -1 : kib * 1024.0 / kMiB;
  }
  return -1;
}

class MemoryMonitor final : public baton::Callback {
 public:
  explicit MemoryMonitor(const baton::PluginConfig& config)
      : interval_(config.get_int_or("interval", 1, baton::Range::at_least(1))) {}

  void declare(baton::Declarations& run) const override {
    run.metric("memory/rss_mib");
    run.metric("memory/peak_rss_mib");
#ifdef BATON_MEMORY_MONITOR_CUDA
    if (run.device().rfind("cuda", 0) == 0)
      for (const char* name :
           {"memory/cuda_allocated_mib", "memory/cuda_peak_allocated_mib", "memory/cuda_reserved_mib"})
        run.metric(name);
#endif
  }

  void init(baton::State& state, baton::Logger& logger) override {
    cuda_ = state.facts.device().rfind("cuda", 0) == 0;
#ifndef BATON_MEMORY_MONITOR_CUDA
    if (cuda_)
      logger.warn("memory_monitor was built against a LibTorch without CUDA: it logs the process's resident memory "
                  "only, not the CUDA allocator's");
    cuda_ = false;
#endif
  }

  // At batch_end the timestamp counts this batch, so the values land in its line.
  void batch_end(baton::State& state, baton::Logger& logger) override {
    if (state.timestamp().batch % interval_ != 0) return;
    logger.log_metric("memory/rss_mib", rss_mib());
    logger.log_metric("memory/peak_rss_mib", peak_rss_mib());
#ifdef BATON_MEMORY_MONITOR_CUDA
    if (!cuda_) return;
    const c10::Device device(state.facts.device());
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
    // Index 0 of each statistic is the aggregate over pool types (StatType::AGGREGATE).
    logger.log_metric("memory/cuda_allocated_mib", static_cast<double>(stats.allocated_bytes[0].current) / kMiB);
    logger.log_metric("memory/cuda_peak_allocated_mib", static_cast<double>(stats.allocated_bytes[0].peak) / kMiB);
    logger.log_metric("memory/cuda_reserved_mib", static_cast<double>(stats.reserved_bytes[0].current) / kMiB);
#endif
  }

 private:
  std::int64_t interval_;
  bool cuda_ = false;
};

}  // namespace

BATON_PLUGIN(MemoryMonitor, "memory_monitor", "1.0.0",
             "logs resident memory (current and peak) and, on CUDA, the caching allocator's memory")
