#pragma once
// Private to core/config: the one table of the settings TrainerSettings holds, each with its config key, its
// member and what its values may be. The config reader (config_sections.cpp), the resolved configuration
// (config_resolved.cpp) and setting_problems (settings.cpp) go through it, and a test holds docs/config.md's tables
// to it, so a setting is added in one place. No toml++ and no LibTorch here.
#include <cstdint>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "baton/settings.h"
#include "baton/time.h"

namespace baton::settings_table {

/// What a setting's value may be beyond its type. setting_problems checks it for a config file and TrainerOptions
/// alike; the config reader checks only the type (and the few rules a type carries: see Setting::member).
struct Rule {
  std::int64_t min = std::numeric_limits<std::int64_t>::min();  // integers: [min, max]
  std::int64_t max = std::numeric_limits<std::int64_t>::max();
  std::string note;              // after the range in the message: " (0: two per worker)"
  std::vector<TimeUnit> units;   // times: the units the key takes
  bool positive = false;         // times: zero refused too (a length, a logging interval)
  /// A rule against the other settings (prefetch against workers, the device's form, amp_fp16 on a CUDA device),
  /// asked once the setting's own rule holds: what is expected, or "" when the settings satisfy it.
  std::string (*relation)(const TrainerSettings&) = nullptr;
};

/// The member, whose type is the setting's kind: an integer, the seed (read as an integer >= 0), a boolean, a text,
/// a time string, a precision name, a sharding name.
using Member = std::variant<std::int64_t TrainerSettings::*, std::uint64_t TrainerSettings::*, bool TrainerSettings::*,
                            std::string TrainerSettings::*, Time TrainerSettings::*, Precision TrainerSettings::*,
                            Sharding TrainerSettings::*>;

struct Setting {
  std::string section;  // in a config file: "data"
  std::string key;      // "batch_size"
  std::string option;   // its TrainerSettings member (TrainerOptions' option), "batch_size"
  Member member;
  Rule rule;
  bool non_empty = false;  // a text that, when given, may not be "" (checked as the key is read)

  std::string config_key() const { return section + "." + key; }  // "data.batch_size"
};

/// Every setting, in TrainerSettings' member order (setting_problems reports in it).
const std::vector<Setting>& settings();

/// The precisions' names ("fp32", "amp_bf16", "amp_fp16", "auto"), in the enum's order: the choices of trainer.precision.
const std::vector<std::string>& precision_names();

/// The shardings' names ("none", "zero1", "zero2", "zero3"), in the enum's order: the choices of
/// distributed.sharding.
const std::vector<std::string>& sharding_names();

/// A setting's value as messages show it: 128, 1ep, "cuda:x", amp_fp16, true.
std::string value_text(const TrainerSettings& settings, const Setting& setting);

}  // namespace baton::settings_table
