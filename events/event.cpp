// The event helpers are all inline (baton/event.h says why); what is left here is a check of the list itself,
// done once at compile time in baton's own build: engines resolve plugins' subscriptions by name, so two events
// with one name, or a name the parser does not give back, would send a plugin's handler to the wrong event.
#include "baton/event.h"

namespace baton {
namespace {

constexpr bool names_round_trip() {
  for (std::size_t i = 0; i < kEventCount; ++i) {
    const auto parsed = parse_event(event_name(static_cast<Event>(i)));
    if (!parsed || static_cast<std::size_t>(*parsed) != i) return false;  // a duplicate parses to the first one
  }
  return true;
}

static_assert(names_round_trip(), "events.def: every event needs a name of its own");

}  // namespace
}  // namespace baton
