#include "config/config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/config_parts.h"
#include "sdk/toml_node.h"

namespace baton {

std::string config_parts::join(const std::vector<std::string_view>& items, std::string_view quote) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::string(quote) + std::string(items[i]) + std::string(quote);
  }
  return out;
}

SourceLocation RunConfig::where(const std::string& key) const {
  auto it = locations.find(key);
  return it != locations.end() ? it->second : SourceLocation{source, 0, 0};
}

Override Override::parse(std::string_view text) {
  const SourceLocation at{"--set " + std::string(text), 0, 0};
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) throw ConfigError(at, "", "expected section.key=value, got no '='");
  std::string_view key = text.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  if (key.empty()) throw ConfigError(at, "", "expected section.key=value, got an empty key");
  return Override{std::string(key), std::string(text.substr(eq + 1)), ""};
}

std::string eval_set_name_problem(const std::string& name) {
  if (name.empty()) return "expected a name for the evaluation set, got \"\"";
  if (name == "eval") return "\"eval\" names the evaluation split of [data]; give this set another name";
  if (name.find_first_of("/ ") != std::string::npos)
    return "expected a name without '/' or spaces (it is part of metric names), got " + toml_detail::quote(name);
  return "";
}

RunConfig parse_config(std::string_view toml_text, const std::string& source, const std::vector<Override>& overrides) {
  toml::table root = toml_detail::parse_table(toml_text, source);
  for (const Override& o : overrides) config_parts::apply_override(root, o);
  // What a checkpoint records is what the run used: the file as the overrides left it (docs/checkpoints.md).
  // Written before the sections are read, which hands their tables over to the components' configs.
  std::string resolved = config_parts::stored_text(root, source, overrides);
  RunConfig config = config_parts::read_sections(root, source);
  config.resolved_text = std::move(resolved);
  return config;
}

RunConfig load_config(const std::string& path, const std::vector<Override>& overrides) {
  const SourceLocation at{path, 0, 0};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(at, "", "cannot read the config file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(at, "", std::string("cannot open the config file: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(at, "", std::string("cannot read the config file: ") + std::strerror(errno));
  return parse_config(text.str(), path, overrides);
}

}  // namespace baton
