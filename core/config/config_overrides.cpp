// --set overrides: each replaces, adds or removes one key of the parsed file before its sections are read, so a
// wrong override gives the error a wrong file would, located at the --set.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config_parts.h"
#include "sdk/toml_node.h"
#include "sdk/words.h"
#include "sdk/nearest.h"

namespace baton::config_parts {
namespace {

using namespace toml_detail;
using config_words::is_digits;

/// A one-key table {x = value} whose nodes carry `origin` as their source, so errors point at the --set.
toml::table parse_override_value(const Override& o, const std::string& origin) {
  try {
    toml::table parsed = toml::parse("x = " + o.value, origin);
    if (parsed.size() == 1 && parsed.contains("x")) return parsed;
  } catch (const toml::parse_error&) {
    // An integer TOML cannot hold would otherwise become a string, and the key would report "expected an
    // integer, got string": say what is wrong with it instead.
    std::string_view digits = o.value;
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
    if (!digits.empty() && digits.find_first_not_of("0123456789_") == std::string_view::npos)
      throw ConfigError(SourceLocation{origin, 0, 0}, o.key,
                        "integer " + o.value + " does not fit in 64 bits (the largest is 9223372036854775807)");
    // not a TOML value: taken as a string below
  }
  try {
    return toml::parse("x = " + quote(o.value), origin);
  } catch (const toml::parse_error& e) {
    throw ConfigError(SourceLocation{origin, 0, 0}, o.key,
                      "the value is not valid text: " + std::string(e.description()));
  }
}

std::vector<std::string> split_key(const Override& o, const SourceLocation& at) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = o.key.find('.', start);
    parts.push_back(o.key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (parts.back().empty())
      throw ConfigError(at, o.key, "expected section.key (e.g. trainer.max_duration), got an empty part");
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

// An entry of an array of tables ([[plugins]], [[loggers]]) by its index or its name, for a --set.
toml::table* find_entry(toml::table& root, const std::string& array_key, const std::string& selector,
                        const Override& o, const SourceLocation& at) {
  const std::string tables = "[[" + array_key + "]]";
  const std::string what = array_key == "plugins" ? "plugin" : "logger";
  toml::node* node = root.get(array_key);
  if (node == nullptr) throw ConfigError(at, o.key, "the config has no " + tables + " entries to override");
  toml::array* array = node->as_array();
  if (array == nullptr) return nullptr;  // the file's own error is reported when the tables are read
  if (is_digits(selector)) {
    const std::size_t index = selector.size() > 9 ? array->size() : std::stoul(selector);
    if (index >= array->size())
      throw ConfigError(at, o.key,
                        "no " + what + " at index " + selector + "; the config has " +
                            std::to_string(array->size()) + " " + tables + " entries (indexes start at 0)");
    return (*array)[index].as_table();
  }
  toml::table* found = nullptr;
  std::vector<std::string> names;
  for (toml::node& element : *array) {
    toml::table* table = element.as_table();
    const toml::node* name = table != nullptr ? table->get("name") : nullptr;
    if (name == nullptr || !name->is_string()) continue;
    names.push_back(name->as_string()->get());
    if (names.back() != selector) continue;
    if (found != nullptr)
      throw ConfigError(at, o.key,
                        "several " + tables + " entries are named '" + selector + "'; use " + array_key +
                            ".<index>.<key>");
    found = table;
  }
  if (found == nullptr) {
    std::vector<std::string_view> shown(names.begin(), names.end());
    throw ConfigError(at, o.key,
                      "unknown " + what + " '" + selector + "'" + detail::did_you_mean(selector, names) +
                          "; the " + tables + " entries are " +
                          (shown.empty() ? std::string("(none with a name)") : join(shown, "'")) +
                          ", or use the 0-based index");
  }
  return found;
}

/// Sets table[path...] = the override's value, creating nested tables on the way.
void assign(toml::table& table, const std::vector<std::string>& path, std::size_t first, toml::table& value,
            const Override& o, const SourceLocation& at) {
  toml::table* target = &table;
  for (std::size_t i = first; i + 1 < path.size(); ++i) {
    toml::node* next = target->get(path[i]);
    if (next == nullptr) next = &target->insert_or_assign(path[i], toml::table{}).first->second;
    target = next->as_table();
    if (target == nullptr)
      throw ConfigError(at, o.key, "cannot set a key inside '" + path[i] + "': it is " + describe(*next));
  }
  toml::source_region origin;
  origin.path = std::make_shared<const std::string>(at.file);
  const toml::key key(path.back(), std::move(origin));
  value.get("x")->visit([&](auto& concrete) { target->insert_or_assign(key, std::move(concrete)); });
}

/// Removes table[path...] (`--set key=`): the key then takes its default. Removing a key that is not there is
/// not an error (the result is the same: the default).
void remove_key(toml::table& table, const std::vector<std::string>& path, std::size_t first) {
  toml::table* target = &table;
  for (std::size_t i = first; i + 1 < path.size() && target != nullptr; ++i) {
    toml::node* next = target->get(path[i]);
    target = next != nullptr ? next->as_table() : nullptr;
  }
  if (target != nullptr) target->erase(path.back());
}

}  // namespace

void apply_override(toml::table& root, const Override& o) {
  const SourceLocation at{o.origin.empty() ? "--set " + o.key + "=" + o.value : o.origin, 0, 0};
  const std::vector<std::string> parts = split_key(o, at);
  const std::string& section = parts.front();
  if (std::find(kSections.begin(), kSections.end(), section) == kSections.end())
    throw ConfigError(at, o.key, "unknown section '" + section + "'; expected one of " + join(kSections));
  if (parts.size() < 2) throw ConfigError(at, o.key, "expected section.key (e.g. trainer.max_duration)");
  // An empty value removes the key (its default applies); a quoted empty string ('""') sets one.
  const bool remove = o.value.empty();
  toml::table value = remove ? toml::table{} : parse_override_value(o, at.file);
  if (section == "plugins" || section == "loggers") {
    if (parts.size() < 3) throw ConfigError(at, o.key, "expected " + section + ".<index or name>.<key>");
    if (toml::table* plugin = find_entry(root, section, parts[1], o, at)) {
      if (remove && (parts[2] == "name" || parts[2] == "path"))
        throw ConfigError(at, o.key, "a [[" + section + "]] entry needs its " + parts[2] + ": it cannot be removed");
      remove ? remove_key(*plugin, parts, 2) : assign(*plugin, parts, 2, value, o, at);
    }
    return;
  }
  if (parts.size() != 2) throw ConfigError(at, o.key, "expected " + section + ".<key>");
  if (remove) {
    if (toml::table* table = root.get(section) ? root.get(section)->as_table() : nullptr) remove_key(*table, parts, 1);
    return;
  }
  toml::node* node = root.get(section);
  if (node == nullptr) node = &root.insert_or_assign(section, toml::table{}).first->second;
  // A section that is not a table is reported, with its own location, when the sections are read.
  if (toml::table* table = node->as_table()) assign(*table, parts, 1, value, o, at);
}

}  // namespace baton::config_parts
