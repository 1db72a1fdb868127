#pragma once
// Whether a fit stops after the current batch, and why: a plugin's request (State::request_stop), SIGINT/SIGTERM
// (install_stop_signal_handlers), the embedding program's Trainer::request_stop, or, in a data-parallel run,
// another rank's stop. The ranks agree at every check, so all of them stop after the same batch.
#include <atomic>
#include <mutex>
#include <string>

#include "baton/trainer.h"

namespace baton {

class StopAgreement {
 public:
  /// From any thread (Trainer::request_stop): the next check stops the run with `reason`.
  void request(std::string reason);
  /// Called by every rank at the same points of the run; true when the run stops now.
  bool check(State& state);
  StopCause cause() const { return cause_; }

 private:
  void stop(State& state, StopCause why, std::string reason);

  StopCause cause_ = StopCause::none;
  std::atomic<bool> requested_{false};
  std::mutex mutex_;  // guards requested_reason_
  std::string requested_reason_;
};

}  // namespace baton
