#pragma once
// The run's logger: every metric goes to State::metrics and to <run folder>/metrics.jsonl (one JSON object per line:
// {"epoch":..,"batch":..,"sample":..,"<name>":<value>, ...}, one line per flush); info and warning lines go to the
// console (the trainer's progress bar, progress.h, shows the loss). Only rank 0 writes files and prints.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/logger.h"
#include "baton/state.h"

#include "baton/export.h"

namespace baton {

struct BATON_API RunLoggerOptions {
  std::string metrics_path;  // empty: no metrics.jsonl
  bool console = true;       // print info/warn lines and eval summaries
  bool quiet = false;        // only warnings and errors
  int rank = 0;
  std::FILE* out = stderr;   // where console lines go (tests pass a temporary file)
};

class BATON_API RunLogger final : public Logger {
 public:
  RunLogger(State& state, RunLoggerOptions options);
  ~RunLogger() override;

  void log_metric(std::string_view name, double value) override;
  void info(std::string_view message) override;
  void warn(std::string_view message) override;

  /// Writes the metrics logged since the last flush as one metrics.jsonl line stamped with the state's current
  /// timestamp, and fsyncs nothing (a crash loses at most the last line). No-op when nothing is pending.
  /// NaN and infinite values are written as null (JSON has no literal for them). The destructor flushes too.
  /// Throws baton::Error naming the file and the system's reason when the line cannot be written.
  void flush();
  /// Every warning so far, for the end-of-run summary.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  State& state_;
  RunLoggerOptions options_;
  int metrics_fd_ = -1;  // POSIX, so a failed write can say why (errno): a full disk, a read-only file system
  std::map<std::string, double> pending_;
  std::vector<std::string> warnings_;
};

}  // namespace baton
