#include "trainer/stop_agreement.h"

#include <unistd.h>

#include <csignal>

#include "baton/communicator.h"

namespace baton {
namespace {

std::atomic<int> g_signal_count{0};

void on_stop_signal(int) {
  // Only async-signal-safe work here: count, and on the second signal leave at once.
  if (g_signal_count.fetch_add(1) >= 1) _exit(130);
}

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

void StopAgreement::request(std::string reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requested_reason_ = std::move(reason);
  }
  requested_.store(true);
}

void StopAgreement::stop(State& state, StopCause why, std::string reason) {
  state.request_stop(std::move(reason));
  cause_ = why;
}

bool StopAgreement::check(State& state, const ClockReading& clock) {
  if (state.stop_requested() && cause_ == StopCause::none) cause_ = StopCause::plugin;
  if (g_signal_count.load() > 0 && !state.stop_requested()) stop(state, StopCause::interrupted, kInterruptedReason);
  if (requested_.load() && !state.stop_requested()) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop(state, StopCause::requested, requested_reason_);
  }
  if (clock.time_up && !state.stop_requested()) stop(state, StopCause::time_limit, clock.why);
  save_due_ = clock.save_due;
  // A signal reaches the ranks one after another: the ranks agree on whether any had one, so a rank that is asked a
  // moment before its own signal lands still reports the interrupt (and exits 130). Clocks differ a little between
  // ranks: one rank's time limit or checkpoint by time is every rank's.
  if (state.facts.communicator()) {
    const bool interrupted = cause_ == StopCause::interrupted;
    const bool timed_out = cause_ == StopCause::time_limit;
    const auto counts = state.facts.communicator()->sum({state.stop_requested() ? 1.0 : 0.0, interrupted ? 1.0 : 0.0,
                                                         timed_out ? 1.0 : 0.0, clock.save_due ? 1.0 : 0.0,
                                                         state.rollback_requested() ? 1.0 : 0.0});
    if (counts[4] > 0 && !state.rollback_requested()) state.request_rollback("another rank asked for a rollback");
    if (counts[1] > 0 && !state.stop_requested())
      stop(state, StopCause::interrupted, kInterruptedReason);
    else if (counts[2] > 0 && !state.stop_requested())
      stop(state, StopCause::time_limit, "another rank reached trainer.time_limit");
    else if (counts[0] > 0 && !state.stop_requested())
      stop(state, StopCause::other_rank, "another rank stopped");
    save_due_ = counts[3] > 0;
  }
  return state.stop_requested();
}

}  // namespace baton
