#pragma once
// What a plugin logs through. Metrics go to the console, metrics.jsonl and State::metrics at the current time.
#include <string_view>

#include "baton/export.h"

namespace baton {

class BATON_API Logger {
 public:
  virtual ~Logger();
  /// Records a metric, e.g. "ema/smoothing", at the current timestamp.
  virtual void log_metric(std::string_view name, double value) = 0;
  /// A line for the user (rank 0 only in distributed runs).
  virtual void info(std::string_view message) = 0;
  /// A warning; also collected in the run's summary.
  virtual void warn(std::string_view message) = 0;
};

}  // namespace baton
