#pragma once
// What the metric-watching callbacks (early_stopper, threshold_stopper) share: reading `monitor` and `mode`,
// taking the metric's direction from the run when `mode` is not given, telling an evaluation pass's metric from
// the others, and remembering a stop across a resume (stop reasons write values and times with
// baton::format_number and baton::format_timestamp, as the trainer's lines do). Compiled into each plugin that uses
// it (plugins share no library).
#include <cstdint>
#include <optional>
#include <string>

#include "baton/plugin.h"

namespace baton::monitors {

/// Which way is better for the monitored metric.
enum class Goal { minimize, maximize };

const char* goal_name(Goal goal);  // "min", "max"

/// The evaluation pass that logs `metric` ("eval" for "eval/accuracy", "eval_raw" for "eval_raw/loss"), or ""
/// when its prefix is none of RunFacts::eval_passes (then it is a training or plugin metric).
/// Valid from init on (every pass is declared before the run starts).
std::string eval_pass_of(const std::string& metric, const State& state);
/// The evaluation set a pass's metric belongs to: "" for "eval/accuracy", "train" for "eval/train/accuracy".
std::string eval_set_of(const std::string& metric);

/// A stop this plugin requested, kept in its checkpoint state. The checkpoint written when a run stops carries
/// it, so a run resumed from that checkpoint stops again at once, as the uninterrupted run had stopped there;
/// a run resumed from an earlier checkpoint carries none and decides afresh.
class StopMemory {
 public:
  /// Requests the stop and remembers it.
  void stop(State& state, const std::string& reason);
  /// At fit_start: repeats a remembered stop when the run resumes at the batch where it was requested; returns
  /// whether it did.
  bool repeat_if_resumed_there(State& state) const;
  void save(StateDict& out) const;
  void load(const StateDict& in);

 private:
  bool stopped_ = false;
  std::int64_t batch_ = 0;
  std::string reason_;
};

/// The event logic the stoppers share: which way is better (`mode`, else the metric's direction, which the run
/// knows once init is complete: taken at fit_start), where the monitored metric is fresh and checked (an
/// evaluation pass's at eval_after_all, when each pass's own metrics and those plugins log at its eval_end are
/// all in; a training or plugin metric at epoch_end, and at batch_end when `checks_each_batch()`), only between
/// fit_start and fit_end (`baton eval` checks nothing), and a warning at fit_end when the metric never came.
class MetricStopper : public Callback {
 public:
  /// Reads `monitor` (required) and `mode` ("min" or "max", overriding the metric's own direction).
  MetricStopper(std::string plugin_name, const PluginConfig& config);

  void declare(Declarations& run) const override;
  void fit_start(State& state, Logger& logger) override;
  void eval_after_all(State& state, Logger& logger) override;
  void epoch_end(State& state, Logger& logger) override;
  void batch_end(State& state, Logger& logger) override;
  void fit_end(State& state, Logger& logger) override;

 protected:
  /// Looks at a fresh value of the metric; may stop the run through memory_.
  virtual void check(State& state, double value) = 0;
  virtual bool checks_each_batch() const = 0;
  /// Called at fit_start once goal() can be asked, before anything else (a plugin's own checks of what
  /// load_state_dict read, which may depend on the direction).
  virtual void on_fit_start(Logger&) {}
  /// Whether the stop the run asks for now would stop nothing (its last batch) or was asked already.
  static bool too_late(const State& state);
  /// Which way is better, from fit_start on; throws a ConfigError at the monitor's key when neither `mode` nor the
  /// run gives it.
  Goal goal() const;

  const std::string name_;
  const WatchedMetric watched_;  // `monitor` and `mode`, checked against the run's metrics before it starts
  const std::string monitor_;    // watched_.metric
  bool seen_ = false;  // a value of the metric came
  StopMemory memory_;

 private:
  void check_latest(State& state);
  const RunFacts* facts_ = nullptr;  // the run's, from fit_start on: goal() asks it
  std::string pass_;      // the evaluation pass whose metric this is; "" for a training or plugin metric
  std::string set_;       // the evaluation set it is measured on ("" for the main one)
  bool fitting_ = false;  // between fit_start and fit_end
};

}  // namespace baton::monitors
