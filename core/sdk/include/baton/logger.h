#pragma once
// What a plugin logs through. Metrics go to State::metrics at once and to the run's metrics.jsonl at the current
// time (written at the trainer's next flush: a train/loss log, the end of an evaluation, the end of the run).
// The console shows only those logged during an evaluation pass (eval_start to eval_end): they are printed on
// that pass's line after its loss and accuracy, as "  <name> <value>" with 4 decimals, each name once with its
// latest value, in the order first logged (not with --quiet, which drops the line). Metrics logged at any other
// event are not printed.
// info and warn lines go to the console (rank 0).
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
