#pragma once
// Whether a fit stops after the current batch, and why: a plugin's request (State::request_stop), SIGINT/SIGTERM
// (install_stop_signal_handlers), the embedding program's Trainer::request_stop, the wall clock's time limit, or, in a
// data-parallel run, another rank's stop. The ranks agree at every check, so all of them stop after the same batch;
// the same check agrees on the wall clock's checkpoints, so every rank saves after the same batch too.
#include <atomic>
#include <mutex>
#include <string>

#include "baton/trainer.h"

namespace baton {

/// What this rank's wall clock says at a check (WallClock).
struct ClockReading {
  bool time_up = false;    // the time limit is near: stop now, with `why` as the reason
  bool save_due = false;   // a checkpoint by time is due
  std::string why;
};

class StopAgreement {
 public:
  /// From any thread (Trainer::request_stop): the next check stops the run with `reason`.
  void request(std::string reason);
  /// Called by every rank at the same points of the run; true when the run stops now.
  bool check(State& state, const ClockReading& clock = {});
  StopCause cause() const { return cause_; }
  /// Whether any rank's clock had a checkpoint due at the last check.
  bool save_due() const { return save_due_; }

 private:
  void stop(State& state, StopCause why, std::string reason);

  StopCause cause_ = StopCause::none;
  bool save_due_ = false;
  std::atomic<bool> requested_{false};
  std::mutex mutex_;  // guards requested_reason_
  std::string requested_reason_;
};

}  // namespace baton
