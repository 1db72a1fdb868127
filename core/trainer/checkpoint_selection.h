#pragma once
// The trainer's checkpoint selection ([checkpoint] keep_best, or the same asked for by a plugin through
// Declarations::keep_best, as the EMA's `select` does): the evaluation at a checkpoint's batch gives it its value of
// the metric, the best `keep` are copied into <run folder>/best/ once committed (checkpoint/best_checkpoints.h),
// and the ranking travels in the trainer's checkpoint state, so a resumed run continues the same selection.
#include <optional>
#include <string>
#include <vector>

#include "baton/declarations.h"
#include "baton/trainer.h"
#include "checkpoint/best_checkpoints.h"
#include "checkpoint/checkpoint_store.h"
#include "trainer/run_context.h"

namespace baton {

class CheckpointSelection {
 public:
  explicit CheckpointSelection(const RunContext& run);

  /// After init, once every metric's direction is known: the one selection of the run, from TrainerOptions and the
  /// plugins' requests (two that differ are refused at the later one's key), and the files best/ shows.
  void settle(const Declarations& declared);
  bool enabled() const { return ranking_.has_value(); }

  /// After an evaluation during fit: its value of the metric is the candidate of a checkpoint at its batch.
  void evaluated(const EvalRecord& record);
  /// Before a checkpoint at this batch is captured (so that it holds its own place in the ranking): ranks it when
  /// the metric was evaluated at its batch. True when it is among the best, and best/ must take it once committed.
  bool offer(const std::string& name, const std::string& path);
  /// The ranking, into the trainer's section of a checkpoint.
  void save(StateDict& trainer_state) const;
  /// The ranking a resumed checkpoint holds (also as a checkpoint written before the selection was the trainer's
  /// kept it: the EMA plugin's "select/" scalars); another metric or mode starts afresh, with a warning.
  void load(const CheckpointData& data, const std::string& path);
  /// Makes best/ match the ranking (rank 0 of a run with a folder); `refresh`: a checkpoint just written.
  void publish(const std::string& refresh = "");
  /// At fit start: says what is selected, and puts best/ back to the ranking resumed from (a run may resume from an
  /// earlier checkpoint than best/ reflects, or after a crash between a save and its copy).
  void fit_start();

 private:
  struct Candidate {
    double value = 0;
    Timestamp at;
  };

  State& state_;
  RunLogger& logger_;
  const TrainerOptions& options_;
  std::optional<Ranking> ranking_;
  std::vector<std::string> top_files_;  // Declarations::best_file
  std::optional<Candidate> candidate_;
};

}  // namespace baton
