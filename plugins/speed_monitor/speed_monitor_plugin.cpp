// The speed_monitor plugin's entry: SpeedMonitor (speed_monitor.h) on a steady clock.
#include <chrono>

#include "speed_monitor.h"

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class SteadySpeedMonitor final : public baton::speed_monitor::SpeedMonitor {
 public:
  explicit SteadySpeedMonitor(const baton::PluginConfig& config) : SpeedMonitor(config, steady_seconds) {}
};

}  // namespace

BATON_PLUGIN(SteadySpeedMonitor, "speed_monitor", "1.0.0",
             "logs training throughput over a window of batches, and wall-clock time")
