#pragma once
// The run's logger: every metric goes to State::metrics and to <run folder>/metrics.jsonl (one JSON object per line:
// {"epoch":..,"batch":..,"sample":..,"<name>":<value>, ...}), each value in a line stamped with the time at which it
// was logged, so nothing logged between two flushes is merged into another step or dropped; info and warning lines
// go to the console (the trainer's progress bar, progress.h, shows the loss). Only rank 0 writes files and prints.
// The same lines go to the run's logger destinations (baton/logger_destination.h: csv, tensorboard) as they are
// written, so every destination gets every value with the time it was logged at; images go to them at once.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baton/logger.h"
#include "baton/logger_destination.h"
#include "baton/state.h"


namespace baton {

struct RunLoggerOptions {
  std::string metrics_path;  // empty: no metrics.jsonl
  bool console = true;       // print info/warn lines and eval summaries
  bool quiet = false;        // only warnings and errors
  int rank = 0;
  std::FILE* out = stderr;   // where console lines go (tests pass a temporary file)
  /// Destinations besides metrics.jsonl (TrainerOptions::loggers); fed only on rank 0, once opened.
  std::vector<std::shared_ptr<LoggerDestination>> destinations;
};

class RunLogger final : public Logger, public ImageLogger {
 public:
  RunLogger(State& state, RunLoggerOptions options);
  ~RunLogger() override;

  void log_metric(std::string_view name, double value) override;
  void info(std::string_view message) override;
  void warn(std::string_view message) override;
  /// To every open destination, at the current time (the time a metric logged now is stamped with).
  void log_image(std::string_view name, const Image& image) override;

  /// Opens the destinations (rank 0 only; fit start). A destination that fails to open is closed with those
  /// opened before it and the error propagates.
  void open_destinations(const LoggerContext& context);
  /// Flushes and closes the open destinations (every exit path of a run), telling those that record it how the run
  /// ended (RunEndRecorder) first; throws the first error after closing all.
  void close_destinations(const RunEnd& end = {});

  /// Writes the metrics logged since the last flush to metrics.jsonl: one line per time at which metrics were
  /// logged, stamped with that time (a value logged at batch_end of batch N is in a line of batch N). A name logged
  /// twice at the same time gets a second line, so no value is lost. fsyncs nothing (a crash loses at most the
  /// lines of one flush). No-op when nothing is pending.
  /// NaN and infinite values are written as null (JSON has no literal for them). The destructor flushes too.
  /// The open destinations get the same lines (LoggerDestination::log_metrics), then flush.
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
  bool destinations_open_ = false;
};

}  // namespace baton
