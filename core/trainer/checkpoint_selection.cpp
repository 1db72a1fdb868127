#include "trainer/checkpoint_selection.h"

#include <filesystem>

#include "logging/run_logger.h"
#include "trainer/init_checks.h"

namespace fs = std::filesystem;

namespace baton {
namespace {

// The trainer's own section holds the ranking under this prefix; the EMA plugin's section held it, before the
// selection was the trainer's, under the legacy one.
constexpr const char* kPrefix = "best/";
constexpr const char* kLegacyPrefix = "select/";

std::string describe(const WatchedMetric& metric, std::int64_t keep, bool maximize) {
  return "the best " + std::to_string(keep) + " by " + metric.metric + " (" + (maximize ? "max" : "min") + ")";
}

}  // namespace

CheckpointSelection::CheckpointSelection(const RunContext& run)
    : state_(run.state), logger_(run.logger), options_(run.options) {}

void CheckpointSelection::settle(const Declarations& declared) {
  std::vector<BestCheckpointsRequest> requests;
  if (options_.keep_best.enabled())
    requests.push_back({WatchedMetric{options_.keep_best.metric, "checkpoint.keep_best.metric", options_.keep_best.where,
                                      options_.keep_best.maximize},
                        options_.keep_best.keep});
  if (!requests.empty()) check_watched_metrics(state_.facts, {requests.front().metric});  // the plugins' are checked
  for (const auto& request : declared.keep_best_requests()) requests.push_back(request);
  if (requests.empty()) return;
  const BestCheckpointsRequest& first = requests.front();
  const bool maximize = state_.facts.maximizes(first.metric);
  for (std::size_t i = 1; i < requests.size(); ++i) {
    const BestCheckpointsRequest& other = requests[i];
    const bool other_maximize = state_.facts.maximizes(other.metric);
    if (other.metric.metric != first.metric.metric || other_maximize != maximize || other.keep != first.keep)
      throw ConfigError(other.metric.where, other.metric.key,
                        "asks for " + describe(other.metric, other.keep, other_maximize) + " checkpoints, but " +
                            first.metric.key + " already selects " + describe(first.metric, first.keep, maximize) +
                            ": a run keeps one selection in best/, so give it once (the EMA's select is "
                            "[checkpoint] keep_best with ema.safetensors beside best.json)");
  }
  ranking_.emplace(first.metric.metric, maximize, first.keep);
  top_files_ = declared.best_files();
}

void CheckpointSelection::evaluated(const EvalRecord& record) {
  if (!ranking_) return;
  auto found = record.metrics.find(ranking_->metric());
  // Another evaluation set's record, or an evaluation that did not log the metric: no candidate from it.
  if (found == record.metrics.end() || record.at.batch != state_.progress.now.batch) return;
  candidate_ = Candidate{found->second, record.at};
}

bool CheckpointSelection::offer(const std::string& name, const std::string& path) {
  if (!ranking_ || !candidate_ || candidate_->at.batch != state_.progress.now.batch) return false;
  const Candidate taken = *candidate_;
  candidate_.reset();
  return ranking_->offer(RankedCheckpoint{name, path, taken.value, taken.at.epoch, taken.at.batch});
}

void CheckpointSelection::save(StateDict& trainer_state) const {
  if (ranking_) ranking_->save(trainer_state, kPrefix);
}

void CheckpointSelection::load(const CheckpointData& data, const std::string& path) {
  if (!ranking_) return;
  const StateDict* saved = nullptr;
  std::string prefix = kPrefix;
  if (const StateDict* trainer = data.section("trainer"); trainer && Ranking::saved_in(*trainer, kPrefix)) {
    saved = trainer;
  } else {
    for (const auto& [name, section] : data.sections)
      if (name.rfind("plugin/", 0) == 0 && Ranking::saved_in(section, kLegacyPrefix)) {
        saved = &section;
        prefix = kLegacyPrefix;
      }
  }
  // A checkpoint without a ranking restores an empty one (load() clears it).
  if (!ranking_->load(saved ? *saved : StateDict(), prefix))
    logger_.warn("checkpoint " + path + " ranked checkpoints by " + saved->get_string(prefix + "metric") + " (" +
                 saved->get_string(prefix + "mode") + "); this run selects by " + ranking_->metric() + " (" +
                 ranking_->mode() + "), whose values cannot be compared with those: best/ starts afresh");
}

void CheckpointSelection::publish(const std::string& refresh) {
  if (!ranking_ || options_.run_dir.empty() || options_.rank != 0) return;
  const std::string best = (fs::path(options_.run_dir) / "best").string();
  for (const auto& warning : publish_best(best, *ranking_, top_files_, refresh)) logger_.warn(warning);
}

void CheckpointSelection::fit_start() {
  if (!ranking_ || options_.run_dir.empty() || options_.rank != 0) return;
  if (!options_.quiet)
    logger_.info("checkpoint selection: the best " + std::to_string(ranking_->keep()) + " by " + ranking_->metric() +
                 " (" + ranking_->mode() + ") are kept in " + (fs::path(options_.run_dir) / "best").string());
  if (!ranking_->entries().empty()) publish();
}

}  // namespace baton
