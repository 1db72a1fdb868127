#include "baton/plugin.h"

namespace baton {

Plugin::~Plugin() = default;
void Plugin::state_dict(StateDict&) const {}
void Plugin::load_state_dict(const StateDict&) {}
void Plugin::close() {}

Algorithm::~Algorithm() = default;

Callback::~Callback() = default;
#define BATON_EVENT(name) \
  void Callback::name(State&, Logger&) {}
#include "baton/events.def"
#undef BATON_EVENT

void Callback::run_event(Event event, State& state, Logger& logger) {
  switch (event) {
#define BATON_EVENT(name) \
  case Event::name:       \
    name(state, logger);  \
    return;
#include "baton/events.def"
#undef BATON_EVENT
  }
}

Logger::~Logger() = default;
CheckpointInProgress::~CheckpointInProgress() = default;

void State::request_stop(std::string reason) {
  // The first reason wins: it is the one that explains why the run ended.
  if (!stop_requested_) stop_reason_ = std::move(reason);
  stop_requested_ = true;
}

}  // namespace baton
