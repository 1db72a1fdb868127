// The configuration as a run uses it, written back as TOML: the stored text (RunConfig::resolved_text, which
// checkpoints keep), `baton check --print`'s with every default filled in, and what changed between two.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/config_parts.h"
#include "config/settings_table.h"
#include "sdk/toml_node.h"

namespace baton {

std::string config_parts::stored_text(const toml::table& root, const std::string& source,
                                      const std::vector<Override>& overrides) {
  std::string text = "# " + source + (overrides.empty() ? "" : " with");
  for (const Override& o : overrides) text += " " + (o.origin.empty() ? "--set " + o.key + "=" + o.value : o.origin);
  return text + "\n" + toml_detail::document_text(root) + "\n";
}

std::string resolved_config_text(const RunConfig& c) {
  toml::table root;
  try {
    // The first line is the comment naming the file and the overrides.
    root = toml::parse(c.resolved_text);
  } catch (const toml::parse_error&) {
    return c.resolved_text;
  }
  const auto section = [&](const std::string& name) -> toml::table& {
    if (!root.contains(name) || !root[name].is_table()) root.insert_or_assign(name, toml::table{});
    return *root[name].as_table();
  };
  for (const settings_table::Setting& setting : settings_table::settings()) {
    toml::table& table = section(setting.section);
    std::visit(
        [&](auto member) {
          const auto& value = c.settings.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, Time>)
            table.insert_or_assign(setting.key, value.str());
          else if constexpr (std::is_same_v<T, Precision>)
            table.insert_or_assign(setting.key, std::string(precision_name(value)));
          else if constexpr (std::is_same_v<T, Sharding>)
            table.insert_or_assign(setting.key, std::string(sharding_name(value)));
          else if constexpr (std::is_same_v<T, std::uint64_t>)  // the seed (read as an integer >= 0)
            table.insert_or_assign(setting.key, static_cast<std::int64_t>(value));
          else
            table.insert_or_assign(setting.key, value);
        },
        setting.member);
  }
  // The batches the loader fetches ahead, 0 ("two per worker") resolved, so the text says what the run used.
  section("data").insert_or_assign("prefetch", c.settings.prefetch_batches());
  section("run").insert_or_assign("name", c.run.name);
  section("run").insert_or_assign("dir", c.run.dir);
  section("data").insert_or_assign("name", c.data.name);
  section("model").insert_or_assign("name", c.model.name);
  section("optimizer").insert_or_assign("name", c.optimizer.name);
  section("scheduler").insert_or_assign("name", c.scheduler.name);
  if (!c.loss.name.empty()) section("loss").insert_or_assign("name", c.loss.name);
  toml::table& distributed = section("distributed");
  distributed.insert_or_assign("backend", c.distributed.backend);
  distributed.insert_or_assign("timeout_seconds", c.distributed.timeout_seconds);
  if (!c.distributed.units.empty()) {
    toml::array units;
    for (const auto& unit : c.distributed.units) units.push_back(unit);
    distributed.insert_or_assign("units", std::move(units));
  }
  toml::table& search = section("plugin_search");
  toml::array paths;
  for (const auto& p : c.plugin_search_paths) paths.push_back(p);
  search.insert_or_assign("paths", std::move(paths));
  search.insert_or_assign("allow_insecure", c.allow_insecure_plugins);
  const std::string first_line = c.resolved_text.substr(0, c.resolved_text.find('\n'));
  return first_line +
         "\n# every key of baton's own sections at its value (defaults filled in); a component's own keys as given "
         "(their defaults: baton plugins)\n" +
         (c.loss.name.empty() ? "# [loss] name: the data's task decides (cross_entropy for classes, mse for values)\n"
                              : "") +
         toml_detail::document_text(root) + "\n";
}

std::vector<std::string> changed_settings(const std::string& before, const std::string& after,
                                          const std::vector<std::string>& sections) {
  toml::table old_root, new_root;
  try {
    old_root = toml::parse(before);
    new_root = toml::parse(after);
  } catch (const toml::parse_error&) {
    return {};
  }
  const auto text = [](const toml::node* node) {
    return node == nullptr ? std::string("not set") : toml_detail::value_text(*node);
  };
  std::vector<std::string> changed;
  for (const auto& section : sections) {
    const toml::table* a = old_root[section].as_table();
    const toml::table* b = new_root[section].as_table();
    std::vector<std::string> keys;
    for (const toml::table* t : {a, b})
      if (t != nullptr)
        for (const auto& [key, node] : *t)
          if (std::find(keys.begin(), keys.end(), std::string(key.str())) == keys.end()) keys.emplace_back(key.str());
    std::sort(keys.begin(), keys.end());
    for (const auto& key : keys) {
      const toml::node* x = a ? a->get(key) : nullptr;
      const toml::node* y = b ? b->get(key) : nullptr;
      const std::string was = text(x), now = text(y);
      if (was != now) changed.push_back(section + "." + key + " (" + was + ", now " + now + ")");
    }
  }
  return changed;
}

}  // namespace baton
