#include "logging/metrics_history.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace baton {

std::vector<LoggedEvaluation> read_logged_evaluations(const std::string& path, std::int64_t resumed_at) {
  std::vector<LoggedEvaluation> out;
  std::ifstream in(path);
  std::int64_t previous_batch = -1;
  const auto drop_from = [&out](std::int64_t batch) {
    out.erase(std::remove_if(out.begin(), out.end(), [&](const LoggedEvaluation& e) { return e.at.batch >= batch; }),
              out.end());
  };
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object() || !line.contains("batch") || !line["batch"].is_number_integer()) continue;
    LoggedEvaluation record;
    record.at.batch = line["batch"].get<std::int64_t>();
    if (line.contains("epoch") && line["epoch"].is_number_integer()) record.at.epoch = line["epoch"].get<std::int64_t>();
    if (line.contains("sample") && line["sample"].is_number_integer())
      record.at.sample = line["sample"].get<std::int64_t>();
    if (record.at.batch < previous_batch) drop_from(record.at.batch);
    previous_batch = record.at.batch;
    bool evaluation = false;
    for (const auto& [name, value] : line.items()) {
      if (name == "epoch" || name == "batch" || name == "sample") continue;
      if (!value.is_number() && !value.is_null()) continue;
      record.metrics[name] = value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
      evaluation = evaluation || name.rfind("eval", 0) == 0;
    }
    if (!evaluation) continue;
    // One evaluation point per batch: a later line for the same batch (a run resumed at its end evaluates again)
    // replaces the earlier one.
    drop_from(record.at.batch);
    out.push_back(std::move(record));
  }
  drop_from(resumed_at + 1);
  return out;
}

std::vector<std::pair<double, double>> read_logged_metric(const std::string& path, const std::string& metric) {
  std::vector<std::pair<double, double>> out;
  std::ifstream in(path);
  std::int64_t previous_batch = -1;
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object() || !line.contains("batch") || !line["batch"].is_number_integer()) continue;
    const std::int64_t batch = line["batch"].get<std::int64_t>();
    if (batch < previous_batch)
      out.erase(std::remove_if(out.begin(), out.end(), [&](const auto& p) { return p.first >= batch; }), out.end());
    previous_batch = batch;
    if (!line.contains(metric) || !(line[metric].is_number() || line[metric].is_null())) continue;
    out.emplace_back(static_cast<double>(batch), line[metric].is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                                        : line[metric].get<double>());
  }
  return out;
}

}  // namespace baton
