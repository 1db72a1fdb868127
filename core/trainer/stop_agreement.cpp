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

bool StopAgreement::check(State& state) {
  if (state.stop_requested() && cause_ == StopCause::none) cause_ = StopCause::plugin;
  if (g_signal_count.load() > 0 && !state.stop_requested()) stop(state, StopCause::interrupted, kInterruptedReason);
  if (requested_.load() && !state.stop_requested()) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop(state, StopCause::requested, requested_reason_);
  }
  // A signal reaches the ranks one after another: the ranks agree on whether any had one, so a rank that is asked a
  // moment before its own signal lands still reports the interrupt (and exits 130).
  if (state.facts.communicator()) {
    const bool interrupted = cause_ == StopCause::interrupted;
    const auto counts = state.facts.communicator()->sum({state.stop_requested() ? 1.0 : 0.0, interrupted ? 1.0 : 0.0});
    if (counts[1] > 0 && !state.stop_requested())
      stop(state, StopCause::interrupted, kInterruptedReason);
    else if (counts[0] > 0 && !state.stop_requested())
      stop(state, StopCause::other_rank, "another rank stopped");
  }
  return state.stop_requested();
}

}  // namespace baton
