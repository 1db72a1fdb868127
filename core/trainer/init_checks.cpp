#include "trainer/init_checks.h"

#include <algorithm>

#include "baton/error.h"
#include "sdk/nearest.h"

namespace baton {
namespace {

std::string quoted_list(const std::vector<std::string>& items) {
  std::string list;
  for (const auto& item : items) list += (list.empty() ? "\"" : ", \"") + item + "\"";
  return list;
}

}  // namespace

void check_watched_metrics(const RunFacts& facts, const std::vector<WatchedMetric>& watched) {
  for (const auto& metric : watched) {
    if (!facts.logs(metric.metric)) {
      const auto& names = facts.metric_names();
      std::string all;
      for (const auto& name : names) all += (all.empty() ? "" : ", ") + name;
      throw ConfigError(metric.where, metric.key,
                        "this run logs no metric '" + metric.metric + "'" +
                            detail::did_you_mean(metric.metric, names) + "; it logs " + all +
                            " (a plugin's own metrics count when it declares them: Declarations::metric)");
    }
    facts.maximizes(metric);  // throws at the key when neither `mode` nor the run gives a direction
  }
}

void check_weight_request(const std::vector<std::string>& declared, const std::string& requested,
                          const char* command) {
  if (requested.empty()) return;
  if (std::find(declared.begin(), declared.end(), requested) != declared.end()) return;
  std::string message = std::string(command) + " with the \"" + requested + "\" weights asked for, but ";
  if (declared.empty()) {
    message += "no plugin of this run keeps more than one set of weights: run it without --weights, or with a "
               "config that loads such a plugin";
  } else {
    message += "the plugins of this run keep no such set" + detail::did_you_mean(requested, declared) +
               "; they keep " + quoted_list(declared);
  }
  // A request the run cannot serve is a usage error (exit 2), located at the option.
  throw ConfigError(SourceLocation{"--weights " + requested, 0, 0}, "", message);
}

}  // namespace baton
