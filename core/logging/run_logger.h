#pragma once
// The run's logger: every metric goes to State::metrics and to <run folder>/metrics.jsonl (one JSON object per line:
// {"epoch":..,"batch":..,"sample":..,"<name>":<value>, ...}), each value in a line stamped with the time at which it
// was logged, so nothing logged between two flushes is merged into another step or dropped; info and warning lines
// go to the console (the trainer's progress bar, progress.h, shows the loss). Only rank 0 writes files and prints.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baton/logger.h"
#include "baton/state.h"


namespace baton {

struct RunLoggerOptions {
  std::string metrics_path;  // empty: no metrics.jsonl
  bool console = true;       // print info/warn lines and eval summaries
  bool quiet = false;        // only warnings and errors
  int rank = 0;
  std::FILE* out = stderr;   // where console lines go (tests pass a temporary file)
};

class RunLogger final : public Logger {
 public:
  RunLogger(State& state, RunLoggerOptions options);
  ~RunLogger() override;

  void log_metric(std::string_view name, double value) override;
  void info(std::string_view message) override;
  void warn(std::string_view message) override;

  /// Writes the metrics logged since the last flush to metrics.jsonl: one line per time at which metrics were
  /// logged, stamped with that time (a value logged at batch_end of batch N is in a line of batch N). A name logged
  /// twice at the same time gets a second line, so no value is lost. fsyncs nothing (a crash loses at most the
  /// lines of one flush). No-op when nothing is pending.
  /// NaN and infinite values are written as null (JSON has no literal for them). The destructor flushes too.
  /// Throws baton::Error naming the file and the system's reason when the line cannot be written.
  void flush();
  /// Every warning so far, for the end-of-run summary.
  const std::vector<std::string>& warnings() const { return warnings_; }

  /// Starts keeping the metrics logged from now on (the trainer prints those of an evaluation pass on its line).
  void begin_capture();
  /// The metrics logged since begin_capture, in the order first logged, each with its latest value; stops keeping.
  std::vector<std::pair<std::string, double>> end_capture();

 private:
  struct PendingLine {
    Timestamp at;
    std::map<std::string, double> values;
  };
  State& state_;
  RunLoggerOptions options_;
  int metrics_fd_ = -1;  // POSIX, so a failed write can say why (errno): a full disk, a read-only file system
  std::vector<PendingLine> pending_;
  bool capturing_ = false;
  std::vector<std::pair<std::string, double>> captured_;
  std::vector<std::string> warnings_;
};

}  // namespace baton
