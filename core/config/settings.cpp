#include "baton/settings.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "config/settings_table.h"
#include "sdk/words.h"

namespace baton {
namespace {

using settings_table::Setting;

// The one list of the precisions' names; the enum's order.
constexpr std::pair<Precision, const char*> kPrecisions[] = {
    {Precision::fp32, "fp32"},
    {Precision::amp_bf16, "amp_bf16"},
    {Precision::amp_fp16, "amp_fp16"},
    {Precision::automatic, "auto"}};

// The one list of the shardings' names; the enum's order.
constexpr std::pair<Sharding, const char*> kShardings[] = {
    {Sharding::none, "none"}, {Sharding::zero1, "zero1"}, {Sharding::zero2, "zero2"}, {Sharding::zero3, "zero3"}};

// An enum setting's names, from its one list: each lookup goes through the list, so a name added there is known
// to parsing, writing and the error's choices at once.
template <class Enum, std::size_t N>
const char* name_of(const std::pair<Enum, const char*> (&names)[N], Enum value) {
  for (const auto& [v, name] : names)
    if (v == value) return name;
  return names[0].second;  // not reached: every enumerator is listed
}

template <class Enum, std::size_t N>
std::optional<Enum> value_named(const std::pair<Enum, const char*> (&names)[N], std::string_view name) {
  for (const auto& [v, text] : names)
    if (name == text) return v;
  return std::nullopt;
}

template <class Enum, std::size_t N>
std::vector<std::string> names_of(const std::pair<Enum, const char*> (&names)[N]) {
  std::vector<std::string> out;
  for (const auto& entry : names) out.emplace_back(entry.second);
  return out;
}

// What the setting's own rule expects when its value breaks it, else "".
std::string own_rule_problem(const TrainerSettings& s, const Setting& setting) {
  const settings_table::Rule& rule = setting.rule;
  if (const auto member = std::get_if<std::int64_t TrainerSettings::*>(&setting.member)) {
    const std::int64_t value = s.**member;
    if (value >= rule.min && value <= rule.max) return "";
    return (rule.max == std::numeric_limits<std::int64_t>::max()
                ? "an integer >= " + std::to_string(rule.min)
                : "an integer in [" + std::to_string(rule.min) + ", " + std::to_string(rule.max) + "]") +
           rule.note;
  }
  if (const auto member = std::get_if<Time TrainerSettings::*>(&setting.member)) {
    const Time& time = s.**member;
    if (!rule.units.empty() && std::find(rule.units.begin(), rule.units.end(), time.unit()) == rule.units.end())
      return "a time in " + config_words::units_text(rule.units);
    if (rule.positive && time.value() <= 0) return "a time > 0";
  }
  return "";
}

}  // namespace

const char* precision_name(Precision precision) { return name_of(kPrecisions, precision); }
std::optional<Precision> precision_from_name(std::string_view name) { return value_named(kPrecisions, name); }
const std::vector<std::string>& settings_table::precision_names() {
  static const std::vector<std::string> names = names_of(kPrecisions);
  return names;
}

const char* sharding_name(Sharding sharding) { return name_of(kShardings, sharding); }
std::optional<Sharding> sharding_from_name(std::string_view name) { return value_named(kShardings, name); }
const std::vector<std::string>& settings_table::sharding_names() {
  static const std::vector<std::string> names = names_of(kShardings);
  return names;
}

std::vector<SettingProblem> setting_problems(const TrainerSettings& s) {
  std::vector<SettingProblem> problems;
  for (const Setting& setting : settings_table::settings()) {
    std::string expected = own_rule_problem(s, setting);
    if (expected.empty() && setting.rule.relation != nullptr) expected = setting.rule.relation(s);
    if (!expected.empty())
      problems.push_back(SettingProblem{setting.config_key(), setting.option, std::move(expected),
                                        settings_table::value_text(s, setting)});
  }
  return problems;
}

}  // namespace baton
