#include "trainer/init_checks.h"

#include <algorithm>

#include "baton/error.h"
#include "sdk/nearest.h"

namespace baton {

void settle_metric_directions(State& state, std::map<std::string, bool> run) {
  // The run's answer for its own metrics stands; insert() leaves it where a plugin declared the same name.
  run.insert(state.metric_higher_is_better.begin(), state.metric_higher_is_better.end());
  state.metric_higher_is_better = std::move(run);
  const auto& logged = state.metric_names;
  for (const auto& directed : state.directed_metrics) {
    if (state.higher_is_better(directed.metric)) continue;
    if (std::find(logged.begin(), logged.end(), directed.metric) == logged.end()) continue;
    throw ConfigError(directed.where, directed.key,
                      "whether a higher or lower '" + directed.metric + "' is better is not known to the run (it " +
                          "knows the direction of evaluation metrics and losses, and of the metrics plugins " +
                          "declare in State::metric_higher_is_better); set mode = \"max\" or \"min\" beside it");
  }
}

void check_weight_request(const State& state, const std::string& requested, const char* command) {
  if (requested.empty()) return;
  const auto& declared = state.weight_sets;
  if (std::find(declared.begin(), declared.end(), requested) != declared.end()) return;
  if (state.eval_weights != requested) return;  // taken by a plugin built before State::weight_sets
  std::vector<std::string> sets;  // each once: two plugins may both keep a "raw" set
  for (const auto& set : declared)
    if (std::find(sets.begin(), sets.end(), set) == sets.end()) sets.push_back(set);
  std::string message = std::string(command) + " with the \"" + requested + "\" weights asked for, but ";
  if (sets.empty()) {
    message += "no plugin of this run keeps more than one set of weights: run it without --weights, or with a "
               "config that loads such a plugin";
  } else {
    std::string list;
    for (const auto& set : sets) list += (list.empty() ? "\"" : ", \"") + set + "\"";
    message += "the plugins of this run keep no such set" + detail::did_you_mean(requested, sets) +
               "; they keep " + list;
  }
  // A request the run cannot serve is a usage error (exit 2), located at the option.
  throw ConfigError(SourceLocation{"--weights " + requested, 0, 0}, "", message);
}

}  // namespace baton
