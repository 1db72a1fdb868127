#include "logging/metrics_history.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace baton {
namespace {

// Calls `visit` with each line of metrics.jsonl that is a JSON object with an integer "batch". Only a regular file
// is read: a metrics.jsonl that is a device or a pipe (a full disk simulated with /dev/full) gives endless bytes
// with no newline, and reading them as one line took 17 GB before failing.
template <class Visit>
void for_each_logged_line(const std::string& path, Visit visit) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return;
  std::ifstream in(path);
  for (std::string text; std::getline(in, text);) {
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object() || !line.contains("batch") || !line["batch"].is_number_integer()) continue;
    visit(line);
  }
}

}  // namespace

std::vector<LoggedEvaluation> read_logged_evaluations(const std::string& path, std::int64_t resumed_at) {
  std::vector<LoggedEvaluation> out;
  std::int64_t previous_batch = -1;
  const auto drop_from = [&out](std::int64_t batch) {
    out.erase(std::remove_if(out.begin(), out.end(), [&](const LoggedEvaluation& e) { return e.at.batch >= batch; }),
              out.end());
  };
  for_each_logged_line(path, [&](const nlohmann::json& line) {
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
    if (!evaluation) return;
    // One evaluation point per batch: a later line for the same batch (a run resumed at its end evaluates again)
    // replaces the earlier one.
    drop_from(record.at.batch);
    out.push_back(std::move(record));
  });
  drop_from(resumed_at + 1);
  return out;
}

std::vector<std::pair<double, double>> read_logged_metric(const std::string& path, const std::string& metric) {
  std::vector<std::pair<double, double>> out;
  std::int64_t previous_batch = -1;
  for_each_logged_line(path, [&](const nlohmann::json& line) {
    const std::int64_t batch = line["batch"].get<std::int64_t>();
    if (batch < previous_batch)
      out.erase(std::remove_if(out.begin(), out.end(), [&](const auto& p) { return p.first >= batch; }), out.end());
    previous_batch = batch;
    if (!line.contains(metric) || !(line[metric].is_number() || line[metric].is_null())) return;
    out.emplace_back(static_cast<double>(batch), line[metric].is_null() ? std::numeric_limits<double>::quiet_NaN()
                                                                        : line[metric].get<double>());
  });
  return out;
}

}  // namespace baton
