#pragma once
// The best `keep` checkpoints by a metric measured at the evaluation just before each save ([checkpoint] keep_best,
// the EMA's select), mirrored in <run_dir>/best/: one folder per checkpoint, best.json ranking them, and the files
// plugins name (the EMA's ema.safetensors) from the top one. The ranking is part of the trainer's checkpointed
// state, so a resumed run continues the same selection. No LibTorch here.
#include <cstdint>
#include <string>
#include <vector>

#include "baton/state_dict.h"

namespace baton {

struct RankedCheckpoint {
  std::string name;  // the checkpoint folder's name, e.g. "ep3"
  std::string path;  // where it was committed
  double value = 0;  // the metric at the evaluation before it
  std::int64_t epoch = 0;
  std::int64_t batch = 0;
};

class Ranking {
 public:
  Ranking() = default;
  Ranking(std::string metric, bool maximize, std::int64_t keep);

  /// Adds a candidate (replacing an entry of the same name); true when it is among the best `keep`. Equal values
  /// keep the earlier checkpoint ahead; NaN never enters.
  bool offer(const RankedCheckpoint& candidate);
  /// Best first.
  const std::vector<RankedCheckpoint>& entries() const { return entries_; }
  const std::string& metric() const { return metric_; }
  std::string mode() const { return maximize_ ? "max" : "min"; }
  std::int64_t keep() const { return keep_; }

  /// Saved as "<prefix>metric", "<prefix>count", "<prefix>0/name", … scalars.
  void save(StateDict& out, const std::string& prefix) const;
  /// Whether `in` holds a ranking saved under `prefix`.
  static bool saved_in(const StateDict& in, const std::string& prefix);
  /// Restores entries saved by save(); false (and nothing restored) when they were ranked by another metric or
  /// mode, whose values cannot be compared with this run's.
  bool load(const StateDict& in, const std::string& prefix);

 private:
  bool better(double a, double b) const;

  std::string metric_;
  bool maximize_ = true;
  std::int64_t keep_ = 1;
  std::vector<RankedCheckpoint> entries_;
};

/// Makes `best_dir` match the ranking: a copy of each ranked checkpoint (`refresh` names one whose folder must be
/// copied again because it was just rewritten), no other checkpoint folder, best.json, and each of `top_files`
/// (file names inside a checkpoint folder) as the top checkpoint holds it, beside best.json. Every folder and file
/// appears complete or not at all. Returns warnings for ranked checkpoints that can no longer be found (they are
/// left out).
std::vector<std::string> publish_best(const std::string& best_dir, const Ranking& ranking,
                                      const std::vector<std::string>& top_files, const std::string& refresh = "");

}  // namespace baton
