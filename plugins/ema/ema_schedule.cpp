#include "ema_schedule.h"

#include <algorithm>
#include <cmath>

namespace baton::ema_plugin {

bool update_due(Event event, const Progress& progress, const Time& interval) {
  const std::int64_t every = interval.count();
  if (event == Event::batch_end && interval.unit() == TimeUnit::batch) return progress.now.batch % every == 0;
  if (event == Event::epoch_end && interval.unit() == TimeUnit::epoch) return progress.now.epoch % every == 0;
  return false;
}

double warmup_smoothing(const EmaSettings& settings, double s, std::int64_t updates) {
  const double n = static_cast<double>(updates);
  switch (settings.warmup) {
    case Warmup::tf: return std::min(s, (1.0 + n) / (10.0 + n));
    case Warmup::power: {
      if (n <= 0) return 0.0;
      double value = 1.0 - std::pow(1.0 + n / settings.inv_gamma, -settings.power);
      // min_smoothing above s would make the warmup overshoot the target: the target wins.
      return std::min(std::max(value, settings.min_smoothing), s);
    }
    case Warmup::none: break;
  }
  return s;
}

}  // namespace baton::ema_plugin
