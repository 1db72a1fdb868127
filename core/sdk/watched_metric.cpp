// read_watched_metric (baton/declarations.h): here, beside the getters it reads with.
#include "baton/declarations.h"
#include "baton/plugin_config.h"

namespace baton {

WatchedMetric read_watched_metric(const PluginConfig& table, const std::string& metric_key,
                                  const std::string& mode_key) {
  WatchedMetric out;
  if (!table.has(metric_key)) table.fail(metric_key, "missing: expected a metric name such as \"eval/accuracy\"");
  out.metric = table.get<std::string>(metric_key);
  if (out.metric.empty()) table.fail(metric_key, "expected a metric name such as \"eval/accuracy\", got \"\"");
  out.key = table.full_key(metric_key);
  out.where = table.where(metric_key);
  if (table.has(mode_key)) out.maximize = table.get_choice(mode_key, {"min", "max"}) == "max";
  return out;
}

}  // namespace baton
