#pragma once
// What the trainer settles and checks once init is complete (every plugin has added its passes and declared its
// metrics and weight sets): each metric's direction, the directions plugins rely on, and the weight set a
// standalone evaluation or prediction asks for. Each refusal is a ConfigError (exit 2) at the key or option that
// asked, before anything runs.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "baton/state.h"

namespace baton {

/// Puts the run's own directions (`run`: each evaluation metric's and each loss's) into
/// State::metric_higher_is_better, keeping what plugins declared for the metrics the run gives none, then refuses
/// a metric of State::directed_metrics that the run logs (State::metric_names) but gives no direction, at the key
/// that named it. One the run does not log is left to the check of watched metrics, which names the logged ones.
void settle_metric_directions(State& state, std::map<std::string, bool> run);

/// Refuses `requested` (TrainerOptions::eval_weights, from `baton eval/predict --weights`) when it is not empty and
/// no plugin of the run keeps that set: not in State::weight_sets, and not taken by a plugin built before those
/// (which cleared State::eval_weights). The error, located at "--weights <name>", lists the sets that are kept,
/// or says that no plugin keeps more than one. `command`: "evaluation" or "prediction".
void check_weight_request(const State& state, const std::string& requested, const char* command);

}  // namespace baton
