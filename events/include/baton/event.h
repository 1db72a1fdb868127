#pragma once
// The lifecycle events a trainer fires, generated from events.def. No LibTorch here: this header is part of the
// light plugin SDK.
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "baton/export.h"

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

/// The lowercase name, e.g. "batch_end".
BATON_API std::string_view event_name(Event event) noexcept;

/// The event with this lowercase name, or nothing.
BATON_API std::optional<Event> parse_event(std::string_view name) noexcept;

/// "before_*" events (before_load, before_forward, eval_before_forward, ...).
BATON_API bool is_before_event(Event event) noexcept;

/// "after_*" events; the engine reverses algorithm order on these.
BATON_API bool is_after_event(Event event) noexcept;

/// Events fired during evaluation (eval_*), standalone evaluation included.
BATON_API bool is_eval_event(Event event) noexcept;

/// Events fired during prediction (predict_*).
BATON_API bool is_predict_event(Event event) noexcept;

/// batch_checkpoint, epoch_checkpoint, iteration_checkpoint.
BATON_API bool is_checkpoint_event(Event event) noexcept;

}  // namespace baton
