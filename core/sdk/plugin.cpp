#include "baton/plugin.h"

namespace baton {

Plugin::~Plugin() = default;
void Plugin::state_dict(StateDict&) const {}
void Plugin::load_state_dict(const StateDict&) {}
void Plugin::close() {}
void Plugin::subscribe(Subscriptions&) {}
void Plugin::declare(Declarations&) const {}

Subscriptions::Subscriptions() = default;
Subscriptions::~Subscriptions() = default;

void Subscriptions::add(std::string_view event, Handler handler) {
  entries_.push_back(Entry{std::string(event), nullptr, std::move(handler)});
}

void Subscriptions::add_matched(std::string_view event, Match match, Handler handler) {
  entries_.push_back(Entry{std::string(event), std::move(match), std::move(handler)});
}

const std::vector<Subscriptions::Entry>& Subscriptions::entries() const { return entries_; }

Algorithm::~Algorithm() = default;
bool Algorithm::match(Event, const State&) { return false; }
void Algorithm::apply(Event, State&, Logger&) {}

Callback::~Callback() = default;
#define BATON_EVENT(name) \
  void Callback::name(State&, Logger&) {}
#include "baton/events.def"
#undef BATON_EVENT

Logger::~Logger() = default;
CheckpointInProgress::~CheckpointInProgress() = default;

void State::request_stop(std::string reason) {
  // The first reason wins: it is the one that explains why the run ended.
  if (!stop_request.requested) stop_request.reason = std::move(reason);
  stop_request.requested = true;
}

void State::request_rollback(std::string reason) {
  if (reason.empty()) reason = "a plugin asked for a rollback";
  if (rollback_reason.empty()) rollback_reason = std::move(reason);
}

}  // namespace baton
