#pragma once
// The run's wall-clock decisions: a checkpoint every `save_interval` of training time ("30min"), and a stop early
// enough before `time_limit` ("2h", a cluster job's limit) that the stop's own batch, evaluation and checkpoint end
// before it. Pure: the trainer passes in the seconds since its fit started and how long each activity took, so the
// decisions are unit-tested without a clock. No LibTorch here.
#include <string>

#include "baton/time.h"

namespace baton {

class WallClock {
 public:
  enum class Activity { batch, evaluation, save };

  /// `save_interval` and `time_limit` count wall-clock time (TimeUnit::second) or are off: zero, or (save_interval)
  /// a time in another unit, which the Schedule handles.
  WallClock(Time save_interval, Time time_limit);

  /// The seconds a checkpoint is taken to need before one has been timed (the trainer derives them from the bytes
  /// it will write).
  void guess_first_save(double seconds) { first_save_guess_ = seconds; }
  bool has_limit() const { return limit_ > 0; }
  double limit() const { return limit_; }

  /// One batch, evaluation or checkpoint took `seconds`; the longest of each kind is what the stop plans for.
  void took(Activity what, double seconds);
  /// A checkpoint was written at `now`: the next one by time is due `save_interval` later.
  void saved_at(double now);

  /// A checkpoint by time is due at `now`.
  bool save_due(double now) const;
  /// The run must stop at `now` to end within the limit: what is left of it is no more than margin().
  bool limit_near(double now) const;
  /// What a stop still costs: the longest batch and evaluation seen and twice the longest checkpoint (the stop's,
  /// and the model's export at the end; a checkpoint not yet timed counts first_save_guess), with a quarter more for
  /// their variation.
  double margin() const;
  /// Why the run stops at `now`: the limit, the time used and what the margin was made of.
  std::string stop_reason(double now) const;

 private:
  /// The longest checkpoint timed, or first_save_guess before one was.
  double save_estimate() const;

  Time limit_time_;
  double save_every_ = 0;
  double limit_ = 0;
  double first_save_guess_ = 0;
  double longest_batch_ = 0;
  double longest_evaluation_ = 0;
  double longest_save_ = -1;  // -1: none timed yet
  double last_save_ = 0;
};

}  // namespace baton
