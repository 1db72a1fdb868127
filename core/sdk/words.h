#pragma once
// Small text helpers the config component's readers and checks share, so their messages read alike.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "baton/time.h"

namespace baton::config_words {

/// True for a non-empty run of ASCII digits ("12"; not "", "-1", "1.5").
inline bool is_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// The units as an error lists them: "ep, ba or sp".
inline std::string units_text(const std::vector<TimeUnit>& units) {
  std::string text;
  for (std::size_t i = 0; i < units.size(); ++i)
    text += (i == 0 ? "" : i + 1 == units.size() ? " or " : ", ") +
            (units[i] == TimeUnit::second ? std::string("s/min/h") : std::string(unit_suffix(units[i])));
  return text;
}

}  // namespace baton::config_words
