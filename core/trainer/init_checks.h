#pragma once
// What the trainer checks of the plugins' declarations (baton/declarations.h): that every metric a plugin watches
// is one the run logs and, when the plugin ranks by it without `mode`, one whose direction the run knows; and that
// the weight set a standalone evaluation or prediction asks for is one a plugin keeps. Each refusal is a
// ConfigError (exit 2) at the key or option that asked, before anything runs.
#include <string>
#include <vector>

#include "baton/declarations.h"
#include "baton/run_facts.h"

namespace baton {

/// Refuses, at its key, a watched metric the run does not log (facts.logs; the error lists the logged ones, with
/// a near miss first) and then one without `mode` whose direction the run does not know (RunFacts::maximizes).
void check_watched_metrics(const RunFacts& facts, const std::vector<WatchedMetric>& watched);

/// Refuses `requested` (TrainerOptions::eval_weights, from `baton eval/predict --weights`) when it is not empty and
/// is none of `declared` (the sets the run's plugins keep). The error, located at "--weights <name>", lists the
/// sets that are kept, or says that no plugin keeps more than one. `command`: "evaluation" or "prediction".
void check_weight_request(const std::vector<std::string>& declared, const std::string& requested,
                          const char* command);

}  // namespace baton
