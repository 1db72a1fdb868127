#pragma once
// When the trainer evaluates and saves: pure functions of the run's progress and its intervals, so the decisions
// are unit-tested without a training loop. No LibTorch here.
#include <cstdint>

#include "baton/time.h"

namespace baton {

/// What follows a training batch's batch_end.
struct AfterBatch {
  bool evaluate = false;
  bool save = false;
};

class Schedule {
 public:
  /// `eval_interval` in ep, ba or dur, `save_interval` in ep or ba; 0 disables either. `has_eval_data` and
  /// `can_save` (a run folder to write to) gate them as well.
  Schedule(Time eval_interval, Time save_interval, bool has_eval_data, bool can_save);

  bool evaluations_enabled() const { return evaluations_; }
  bool saves_enabled() const { return saves_; }

  /// After a batch: an evaluation when one falls due (ba: every n batches; dur: whenever the run crosses a
  /// multiple of the interval, `fraction_before` being the fraction before the batch), a save every n batches.
  /// The run's last batch (`final_batch`) always evaluates and saves, unless the epoch end right after does.
  /// `epoch_ends`: the batch is its epoch's last (the epoch count in `progress` does not include it yet).
  AfterBatch after_batch(const Progress& progress, double fraction_before, bool epoch_ends, bool final_batch) const;

  /// Whether the end of epoch `epoch` (1-based: the count once it has ended) evaluates / saves. As in Composer,
  /// ep intervals are checked after epoch_end, so an algorithm acting at epoch_end is seen by that evaluation.
  bool eval_due_at_epoch(std::int64_t epoch) const;
  bool save_due_at_epoch(std::int64_t epoch) const;

  /// The run's end (batch `now`) still lacks its evaluation / its checkpoint: they are enabled and the last one was
  /// taken at another batch (`last`, -1 for none). A run that ends with no batch (resumed at its end), or stops
  /// outside batch_end, gets them then; a stop at an epoch's end saves there unless its last batch did.
  bool final_eval_missing(std::int64_t last, std::int64_t now) const { return evaluations_ && last != now; }
  bool final_save_missing(std::int64_t last, std::int64_t now) const { return saves_ && last != now; }

 private:
  Time eval_interval_;
  Time save_interval_;
  bool evaluations_;
  bool saves_;
};

}  // namespace baton
