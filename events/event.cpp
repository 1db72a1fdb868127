#include "baton/event.h"

namespace baton {
namespace {

constexpr std::array<std::string_view, kEventCount> kNames = {
#define BATON_EVENT(name) #name,
#include "baton/events.def"
#undef BATON_EVENT
};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

}  // namespace

std::string_view event_name(Event event) noexcept {
  auto index = static_cast<std::size_t>(event);
  return index < kNames.size() ? kNames[index] : std::string_view("unknown");
}

std::optional<Event> parse_event(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return kAllEvents[i];
  return std::nullopt;
}

// The predicates read the names, as Composer's do, so a new event in events.def is classified without edits here.
bool is_before_event(Event event) noexcept { return contains(event_name(event), "before_"); }
bool is_after_event(Event event) noexcept { return contains(event_name(event), "after_"); }
bool is_eval_event(Event event) noexcept { return starts_with(event_name(event), "eval_"); }
bool is_predict_event(Event event) noexcept { return starts_with(event_name(event), "predict_"); }
bool is_checkpoint_event(Event event) noexcept {
  auto name = event_name(event);
  return name.size() > 11 && name.substr(name.size() - 11) == "_checkpoint";
}

}  // namespace baton
