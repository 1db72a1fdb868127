#include "run_params.h"

#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace baton_mlflow {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

std::string value_text(const toml::node& node) {
  if (const auto* text = node.as_string()) return text->get();
  std::ostringstream out;
  if (const auto* array = node.as_array()) out << *array;
  else if (const auto* integer = node.as_integer()) out << integer->get();
  else if (const auto* boolean = node.as_boolean()) out << (boolean->get() ? "true" : "false");
  else if (const auto* number = node.as_floating_point()) out << *number;
  else if (const auto* date = node.as_date()) out << *date;
  else if (const auto* time = node.as_time()) out << *time;
  else if (const auto* date_time = node.as_date_time()) out << *date_time;
  return out.str();
}

// An array of tables is named by the entries' `name` when every entry has a distinct one.
bool named_entries(const toml::array& array) {
  std::set<std::string> names;
  for (const auto& element : array) {
    const auto* table = element.as_table();
    if (table == nullptr) return false;
    const auto* name = table->get_as<std::string>("name");
    if (name == nullptr || !names.insert(name->get()).second) return false;
  }
  return !array.empty();
}

void add(const toml::node& node, const std::string& path, Params& out) {
  if (const auto* table = node.as_table()) {
    for (const auto& [key, value] : *table) add(value, path.empty() ? std::string(key.str()) : path + "." +
                                                                                                 std::string(key.str()),
                                                out);
    return;
  }
  if (const auto* array = node.as_array(); array != nullptr && array->is_array_of_tables()) {
    const bool by_name = named_entries(*array);
    for (std::size_t i = 0; i < array->size(); ++i) {
      const auto& entry = *array->get(i)->as_table();
      const std::string prefix =
          path + "." + (by_name ? entry.get_as<std::string>("name")->get() : std::to_string(i));
      for (const auto& [key, value] : entry) {
        if (by_name && key.str() == "name") continue;  // the entry's name is in its prefix
        add(value, prefix + "." + std::string(key.str()), out);
      }
      if (by_name && entry.size() == 1) out.emplace_back(prefix, "");  // a plugin with no keys is still listed
    }
    return;
  }
  out.emplace_back(path, value_text(node));
}

}  // namespace

std::optional<Params> run_params(const std::string& config_text, std::size_t max_value) {
  if (config_text.empty()) return std::nullopt;
  toml::table config;
  try {
    config = toml::parse(config_text);
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  Params params;
  add(config, "", params);
  for (auto& [key, value] : params)
    if (value.size() > max_value) value.resize(max_value);
  return params;
}

}  // namespace baton_mlflow
