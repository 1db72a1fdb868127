#include "trainer/run_outputs.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include "baton/model_tensors.h"
#include "baton/safetensors.h"
#include "logging/eval_plot.h"
#include "logging/metrics_history.h"
#include "baton/time.h"

namespace fs = std::filesystem;

namespace baton {

void ModelExport::fit_end(State& state, Logger&) {
  if (failed_ || state.facts.rank() != 0 || state.facts.run_dir().empty() || state.facts.model() == nullptr) return;
  fs::create_directories(state.facts.run_dir());
  const std::map<std::string, std::string> metadata{{"format", "pt"},
                                                    {"baton.timestamp", format_timestamp(state.progress.now)}};
  write_safetensors_atomic((fs::path(state.facts.run_dir()) / "model.safetensors").string(), named_model_tensors(*state.facts.model()),
                           metadata);
}

void EvalPlots::fit_end(State& state, Logger&) {
  if (state.facts.rank() != 0 || state.facts.run_dir().empty()) return;
  std::vector<std::string> names;
  for (const auto& metric : metrics_) names.push_back(metric.name);
  names.push_back("loss");
  for (const auto& metric : names) {
    // One line per evaluation pass that logged it: eval/<metric>, eval_raw/<metric>, ...
    const std::string suffix = "/" + metric;
    std::vector<PlotSeries> series;
    for (const auto& record : history_)
      for (const auto& [name, value] : record.metrics) {
        if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
          continue;
        auto it = std::find_if(series.begin(), series.end(), [&](const PlotSeries& s) { return s.label == name; });
        if (it == series.end()) it = series.insert(series.end(), PlotSeries{name, {}});
        it->points.emplace_back(static_cast<double>(record.at.batch), value);
      }
    if (series.empty()) continue;
    PlotOptions plot;
    plot.title = "evaluation " + metric;
    plot.y_label = metric;
    fs::create_directories(state.facts.run_dir());
    write_line_chart_svg((fs::path(state.facts.run_dir()) / ("eval_" + metric + ".svg")).string(), series, plot);
  }
  // The training loss per logged step (trainer.log_interval), from metrics.jsonl: a resumed run's whole curve.
  PlotSeries train_loss{"train/loss", read_logged_metric((fs::path(state.facts.run_dir()) / "metrics.jsonl").string(),
                                                         "train/loss")};
  if (!train_loss.points.empty()) {
    PlotOptions plot;
    plot.title = "training loss";
    plot.y_label = "loss";
    fs::create_directories(state.facts.run_dir());
    write_line_chart_svg((fs::path(state.facts.run_dir()) / "train_loss.svg").string(), {train_loss}, plot);
  }
}

}  // namespace baton
