#include "metric_watch.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace baton::monitors {



const char* goal_name(Goal goal) { return goal == Goal::minimize ? "min" : "max"; }

std::string eval_pass_of(const std::string& metric, const State& state) {
  const auto slash = metric.find('/');
  if (slash == std::string::npos) return "";
  const std::string prefix = metric.substr(0, slash);
  for (const auto& label : state.facts.eval_passes())
    if (label == prefix) return label;
  return "";
}

std::string eval_set_of(const std::string& metric) {
  const auto first = metric.find('/'), last = metric.rfind('/');
  return first == last ? "" : metric.substr(first + 1, last - first - 1);
}

void StopMemory::stop(State& state, const std::string& reason) {
  stopped_ = true;
  batch_ = state.timestamp().batch;
  reason_ = reason;
  state.request_stop(reason);
}

bool StopMemory::repeat_if_resumed_there(State& state) const {
  if (!stopped_ || state.timestamp().batch != batch_) return false;
  state.request_stop(reason_ + " (before the resume)");
  return true;
}

void StopMemory::save(StateDict& out) const {
  out.set_bool("stopped", stopped_);
  if (!stopped_) return;
  out.set_int("stopped_at_batch", batch_);
  out.set_string("stop_reason", reason_);
}

void StopMemory::load(const StateDict& in) {
  *this = StopMemory();
  if (!in.has("stopped") || !in.get_bool("stopped")) return;
  stopped_ = true;
  batch_ = in.get_int("stopped_at_batch");
  reason_ = in.get_string("stop_reason");
}

MetricStopper::MetricStopper(std::string plugin_name, const PluginConfig& config)
    : name_(std::move(plugin_name)), watched_(read_watched_metric(config, "monitor")), monitor_(watched_.metric) {}

// Without `mode` the metric's own direction decides: the trainer checks before the run starts that it knows it.
void MetricStopper::declare(Declarations& run) const { run.watch(watched_); }

Goal MetricStopper::goal() const {
  if (facts_ == nullptr) throw Error(name_ + ": the direction of '" + monitor_ + "' is asked before fit_start");
  // `mode`, else the metric's direction; the run's one error at the monitor's key when neither is known (a run
  // refuses that before it starts; a State filled by hand meets it at the first value).
  return facts_->maximizes(watched_) ? Goal::maximize : Goal::minimize;
}

void MetricStopper::fit_start(State& state, Logger& logger) {
  facts_ = &state.facts;
  on_fit_start(logger);
  pass_ = eval_pass_of(monitor_, state);
  set_ = eval_set_of(monitor_);
  fitting_ = true;
  // A run that stops again at once checks nothing, and its fit_end has no reason to warn about that.
  if (memory_.repeat_if_resumed_there(state)) seen_ = true;
}

void MetricStopper::eval_after_all(State& state, Logger&) {
  // Each evaluation set ends with its own eval_after_all: only the monitored one's counts as a check.
  if (!fitting_ || pass_.empty() || state.eval_set != set_) return;
  auto it = state.metrics.find(monitor_);
  if (it == state.metrics.end())
    throw Error(name_ + ": the '" + pass_ + "' evaluation logged no metric '" + monitor_ + "' (it logs " + pass_ +
                "/loss and " + pass_ + "/accuracy; plugins may add others)");
  check(state, it->second);
}

void MetricStopper::epoch_end(State& state, Logger&) {
  if (fitting_ && pass_.empty()) check_latest(state);
}

void MetricStopper::batch_end(State& state, Logger&) {
  if (fitting_ && pass_.empty() && checks_each_batch()) check_latest(state);
}

void MetricStopper::fit_end(State&, Logger& logger) {
  fitting_ = false;
  if (!seen_)
    logger.warn(name_ + ": no metric '" + monitor_ + "' was logged during the run, so it never checked; is the name "
                "right (e.g. \"eval/accuracy\", \"train/loss\")?");
}

bool MetricStopper::too_late(const State& state) {
  // A stop at the run's last batch would stop nothing and only make a finished run read as stopped.
  return state.stop_requested() || state.progress.reached(state.progress.max_duration);
}

void MetricStopper::check_latest(State& state) {
  auto it = state.metrics.find(monitor_);
  if (it != state.metrics.end()) check(state, it->second);
}

}  // namespace baton::monitors
