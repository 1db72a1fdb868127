#pragma once
// Checks of a run's best/ folder ([checkpoint] keep_best, the EMA's select) against the ranking worked out from the
// run's own evaluation records, for the tests of the trainer's selection and of the EMA plugin.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/trainer.h"
#include "test_files.h"

namespace baton::test {

struct BestEntry {
  std::string name;
  double value;
};

/// The best `keep` of the run's evaluations by `metric`, each named as the checkpoint saved at its batch
/// ("ba<batch>"), sorted here (ties: the earlier first).
inline std::vector<BestEntry> expected_best(const std::vector<EvalRecord>& evals, const std::string& metric,
                                            bool maximize, std::size_t keep) {
  std::vector<BestEntry> all;
  for (const auto& e : evals) all.push_back({"ba" + std::to_string(e.at.batch), e.metrics.at(metric)});
  std::stable_sort(all.begin(), all.end(), [&](const BestEntry& a, const BestEntry& b) {
    return maximize ? a.value > b.value : a.value < b.value;
  });
  if (all.size() > keep) all.resize(keep);
  return all;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline std::set<std::string> folders_in(const std::filesystem::path& dir) {
  std::set<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_directory()) out.insert(entry.path().filename().string());
  return out;
}

/// best/ of `run_dir` against `expected`: one complete copy per entry and no other folder, best.json in that order
/// (name, value, rank; the batch of a "ba<batch>" name), and each of `top_files` as the top copy holds it.
inline void check_best_folder(const std::filesystem::path& run_dir, const std::vector<BestEntry>& expected,
                              const std::vector<std::string>& top_files = {}) {
  const std::filesystem::path best = run_dir / "best";
  std::set<std::string> names;
  for (const auto& e : expected) names.insert(e.name);
  CHECK(folders_in(best) == names);
  const auto doc = read_json(best / "best.json");
  REQUIRE(doc["checkpoints"].size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(doc["checkpoints"][i]["name"] == expected[i].name);
    CHECK(doc["checkpoints"][i]["value"].get<double>() == expected[i].value);
    CHECK(doc["checkpoints"][i]["rank"] == i + 1);
    if (expected[i].name.rfind("ba", 0) == 0)
      CHECK(doc["checkpoints"][i]["timestamp"]["batch"] == std::stoll(expected[i].name.substr(2)));
    CHECK(std::filesystem::exists(best / expected[i].name / "meta.json"));
    CHECK(std::filesystem::exists(best / expected[i].name / "state.safetensors"));
  }
  for (const auto& file : top_files) {
    REQUIRE_FALSE(expected.empty());
    CHECK(read_bytes(best / file) == read_bytes(best / expected.front().name / file));
  }
}

/// The ConfigError with which `trainer` refuses to run before its first batch (a selection it cannot make); the
/// test fails when the run is accepted.
inline std::string refusal_before_training(Trainer& trainer) {
  std::string what;
  try {
    trainer.fit();
  } catch (const ConfigError& e) {
    what = e.what();
  }
  CHECK_MESSAGE(!what.empty(), "the run was accepted");
  CHECK(trainer.state().progress.now.batch == 0);
  return what;
}

}  // namespace baton::test
