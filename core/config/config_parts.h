#pragma once
// Private to core/config: the jobs parse_config (config.cpp) hands to the other files of the run configuration,
// one file each: reading the sections (config_sections.cpp), applying --set overrides (config_overrides.cpp) and
// writing the resolved configuration (config_resolved.cpp).
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "config/config.h"

namespace baton::config_parts {

/// The sections a run config may have, in the order errors list them.
inline const std::vector<std::string_view> kSections = {
    "run",  "data",    "model",      "optimizer",   "scheduler",     "loss", "trainer",
    "checkpoint", "distributed", "plugins", "plugin_search", "eval", "loggers"};

/// "a, b, c", each item between `quote`s.
std::string join(const std::vector<std::string_view>& items, std::string_view quote = "");

/// Reads and checks every section of `root` (the file with the overrides applied; its tables are moved into the
/// sections' views). Throws ConfigError at the culprit key.
RunConfig read_sections(toml::table& root, const std::string& source);

/// Applies one --set to the parsed file, before it is read; errors are located at the --set.
void apply_override(toml::table& root, const Override& o);

/// The text RunConfig::resolved_text holds: a comment naming `source` and the overrides, then `root` (the file as
/// the overrides left it).
std::string stored_text(const toml::table& root, const std::string& source, const std::vector<Override>& overrides);

}  // namespace baton::config_parts
