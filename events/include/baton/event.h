#pragma once
// The lifecycle events a trainer fires, generated from events.def. No LibTorch here: this header is part of the
// light plugin SDK.
//
// Everything here is inline (constexpr), never a function exported by libbaton: an Event's number is the position
// in the events.def of whoever compiled the code, so a plugin built against an older list and a newer libbaton
// number the events differently. Only names cross between them (Subscriptions in baton/plugin.h); the helpers below
// compile into the plugin with the plugin's own list, so what they say about a plugin's Event is right for it.
// They also keep clear of inline variables in their bodies (a default-visibility inline variable is one object in
// the whole process, whichever library defined it first).
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace baton {

enum class Event : unsigned char {
#define BATON_EVENT(name) name,
#include "baton/events.def"
#undef BATON_EVENT
};

inline constexpr std::size_t kEventCount = 0
#define BATON_EVENT(name) +1
#include "baton/events.def"
#undef BATON_EVENT
    ;

/// Every event in firing order.
inline constexpr std::array<Event, kEventCount> kAllEvents = {
#define BATON_EVENT(name) Event::name,
#include "baton/events.def"
#undef BATON_EVENT
};

/// The lowercase name, e.g. "batch_end" ("unknown" for a value outside the list).
constexpr std::string_view event_name(Event event) noexcept {
  switch (event) {
#define BATON_EVENT(name) \
  case Event::name:       \
    return #name;
#include "baton/events.def"
#undef BATON_EVENT
  }
  return "unknown";
}

/// The event with this lowercase name, or nothing.
constexpr std::optional<Event> parse_event(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kEventCount; ++i)
    if (event_name(static_cast<Event>(i)) == name) return static_cast<Event>(i);
  return std::nullopt;
}

// The predicates read the names, as Composer's do, so a new event in events.def is classified without edits here.

/// "before_*" events (before_load, before_forward, eval_before_forward, ...).
constexpr bool is_before_event(Event event) noexcept {
  return event_name(event).find("before_") != std::string_view::npos;
}

/// "after_*" events; the engine reverses algorithm order on these.
constexpr bool is_after_event(Event event) noexcept {
  return event_name(event).find("after_") != std::string_view::npos;
}

/// Events fired during evaluation (eval_*), standalone evaluation included.
constexpr bool is_eval_event(Event event) noexcept { return event_name(event).substr(0, 5) == "eval_"; }

/// Events fired during prediction (predict_*).
constexpr bool is_predict_event(Event event) noexcept { return event_name(event).substr(0, 8) == "predict_"; }

/// batch_checkpoint, epoch_checkpoint, iteration_checkpoint.
constexpr bool is_checkpoint_event(Event event) noexcept {
  constexpr std::string_view suffix = "_checkpoint";
  const std::string_view name = event_name(event);
  return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
}

}  // namespace baton
