#include "baton/plugin_config.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

#include "sdk/toml_node.h"
#include "sdk/words.h"

namespace baton {

using toml_detail::Mismatch;

struct PluginConfig::Impl {
  // One per [[plugins]] table; nested views point into `root` and share the record of what was read.
  struct Shared {
    toml::table root;
    std::string name;
    std::string file;
    std::set<std::string> read;  // dotted paths
    std::shared_ptr<const Shared> origin;  // a renamed view's tables live in its origin's root
    std::string key_prefix;  // "plugins.<name>." for a plugin, "<section>." for a section of the run config
    std::string owner;       // "plugin 'ema'", "[trainer]", "optimizer 'sgd'": unknown-key errors name it
  };

  std::shared_ptr<Shared> shared;
  const toml::table* table = nullptr;
  std::string prefix;  // "" for the plugin's table, "schedule." for a nested one
  SourceLocation where;
  std::string owner;  // overrides shared->owner in unknown-key errors (owned_by)

  std::string full_key(std::string_view key) const { return shared->key_prefix + prefix + std::string(key); }

  const toml::node* find(std::string_view key) const {
    shared->read.insert(prefix + std::string(key));
    return table->get(key);
  }

  SourceLocation location(const toml::node& node) const { return toml_detail::location_of(node, shared->file); }

  // Keys in file order; keys set by a --set override (another source) come last.
  std::vector<std::pair<const toml::key*, const toml::node*>> ordered() const {
    std::vector<std::pair<const toml::key*, const toml::node*>> out;
    for (const auto& [key, node] : *table) out.emplace_back(&key, &node);
    const auto rank = [&](const toml::key* key) {
      const auto& source = key->source();
      const bool from_file = !source.path || *source.path == shared->file;
      return std::make_tuple(!from_file, source.begin.line, source.begin.column);
    };
    std::stable_sort(out.begin(), out.end(),
                     [&](const auto& a, const auto& b) { return rank(a.first) < rank(b.first); });
    return out;
  }

  // Unread keys under this table; a table that was read is searched for unread keys of its own.
  void collect_unread(std::vector<std::pair<std::string, SourceLocation>>& out) const {
    for (const auto& [key, node] : ordered()) {
      const std::string path = prefix + std::string(key->str());
      if (shared->read.count(path) == 0) {
        out.emplace_back(path, toml_detail::location_of(key->source(), shared->file));
      } else if (const toml::table* nested = node->as_table()) {
        Impl child{shared, nested, path + ".", location(*node), ""};
        child.collect_unread(out);
      }
    }
  }
};

namespace {

std::shared_ptr<PluginConfig::Impl> make_impl(toml::table table, std::string name, std::string file,
                                              SourceLocation where) {
  auto shared = std::make_shared<PluginConfig::Impl::Shared>();
  shared->root = std::move(table);
  shared->key_prefix = "plugins." + name + ".";
  shared->owner = "plugin '" + name + "'";
  shared->name = std::move(name);
  shared->file = std::move(file);
  auto impl = std::make_shared<PluginConfig::Impl>();
  impl->table = &shared->root;
  impl->shared = std::move(shared);
  impl->where = std::move(where);
  return impl;
}

template <class T>
constexpr const char* expected_type() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::int64_t>) return "an integer";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_same_v<T, Time>) return "a time string such as \"2ep\"";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "an array of strings";
  if constexpr (std::is_same_v<T, std::vector<double>>) return "an array of numbers";
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "an array of integers";
  if constexpr (std::is_same_v<T, PluginConfig>) return "a table";
  return "";
}

template <class T>
T convert(const toml::node& node) {
  using namespace toml_detail;
  if constexpr (std::is_same_v<T, bool>) return to_bool(node);
  if constexpr (std::is_same_v<T, int>) return to_int32(node);
  if constexpr (std::is_same_v<T, std::int64_t>) return to_int(node);
  if constexpr (std::is_same_v<T, double>) return to_double(node);
  if constexpr (std::is_same_v<T, std::string>) return to_string(node);
  if constexpr (std::is_same_v<T, Time>) return to_time(node);
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return to_strings(node);
  if constexpr (std::is_same_v<T, std::vector<double>>) return to_doubles(node);
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return to_ints(node);
}

}  // namespace

PluginConfig::PluginConfig() : impl_(make_impl(toml::table{}, "plugin", "<code>", SourceLocation{"<code>", 0, 0})) {}
PluginConfig::PluginConfig(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
PluginConfig::~PluginConfig() = default;
PluginConfig::PluginConfig(const PluginConfig&) = default;
PluginConfig& PluginConfig::operator=(const PluginConfig&) = default;

PluginConfig PluginConfig::from_toml(std::string_view toml_text, std::string plugin_name, std::string file) {
  toml::table table = toml_detail::parse_table(toml_text, file);
  SourceLocation where = toml_detail::location_of(table.source(), file);
  return PluginConfig(make_impl(std::move(table), std::move(plugin_name), std::move(file), std::move(where)));
}

const std::string& PluginConfig::plugin_name() const { return impl_->shared->name; }

PluginConfig PluginConfig::renamed(std::string plugin_name) const {
  // The new record points into the original's table rather than copying it: toml++ does not copy source
  // positions, and errors need them.
  auto shared = std::make_shared<Impl::Shared>();
  shared->key_prefix = "plugins." + plugin_name + ".";
  shared->owner = "plugin '" + plugin_name + "'";
  shared->name = std::move(plugin_name);
  shared->file = impl_->shared->file;
  shared->read = impl_->shared->read;
  shared->origin = impl_->shared;
  auto impl = std::make_shared<Impl>(Impl{std::move(shared), impl_->table, impl_->prefix, impl_->where, impl_->owner});
  return PluginConfig(std::move(impl));
}

bool PluginConfig::has(std::string_view key) const { return impl_->find(key) != nullptr; }

template <class T>
T PluginConfig::get(std::string_view key) const {
  const toml::node* node = impl_->find(key);
  if (node == nullptr)
    throw ConfigError(impl_->where, impl_->full_key(key),
                      std::string("expected ") + expected_type<T>() + ", got nothing (the key is missing)");
  if constexpr (std::is_same_v<T, PluginConfig>) {
    const toml::table* nested = node->as_table();
    if (nested == nullptr)
      throw ConfigError(impl_->location(*node), impl_->full_key(key),
                        std::string("expected a table, got ") + toml_detail::describe(*node));
    auto child = std::make_shared<Impl>(Impl{impl_->shared, nested, impl_->prefix + std::string(key) + ".",
                                             impl_->location(*node), ""});
    return PluginConfig(std::move(child));
  } else {
    try {
      return convert<T>(*node);
    } catch (const Mismatch& m) {
      throw ConfigError(impl_->location(*m.node), impl_->full_key(key) + m.suffix, m.message);
    }
  }
}

// The supported types, compiled here once and exported from libbaton.
template BATON_API bool PluginConfig::get<bool>(std::string_view) const;
template BATON_API int PluginConfig::get<int>(std::string_view) const;
template BATON_API std::int64_t PluginConfig::get<std::int64_t>(std::string_view) const;
template BATON_API double PluginConfig::get<double>(std::string_view) const;
template BATON_API std::string PluginConfig::get<std::string>(std::string_view) const;
template BATON_API Time PluginConfig::get<Time>(std::string_view) const;
template BATON_API std::vector<std::string> PluginConfig::get<std::vector<std::string>>(std::string_view) const;
template BATON_API std::vector<double> PluginConfig::get<std::vector<double>>(std::string_view) const;
template BATON_API std::vector<std::int64_t> PluginConfig::get<std::vector<std::int64_t>>(std::string_view) const;
template BATON_API PluginConfig PluginConfig::get<PluginConfig>(std::string_view) const;

namespace {

// "expected <what> (<meaning>), got ": the start of a getter's message, with what the key is for when the plugin
// said so.
std::string expectation(const std::string& what, std::string_view meaning) {
  return "expected " + what + (meaning.empty() ? std::string() : " (" + std::string(meaning) + ")") + ", got ";
}

}  // namespace

Time PluginConfig::get_time(std::string_view key, const std::vector<TimeUnit>& units) const {
  return get_time(key, units, TimeZero::allowed, {});
}

Time PluginConfig::get_time(std::string_view key, const std::vector<TimeUnit>& units, TimeZero zero) const {
  return get_time(key, units, zero, {});
}

Time PluginConfig::get_time(std::string_view key, const std::vector<TimeUnit>& units, TimeZero zero,
                            std::string_view meaning) const {
  const Time time = get<Time>(key);
  const toml::node& node = *impl_->table->get(key);
  const auto refuse = [&](const std::string& what) {
    throw ConfigError(impl_->location(node), impl_->full_key(key),
                      expectation(what, meaning) + toml_detail::describe(node));
  };
  // A fraction of the run beyond the whole run is a point no run reaches: for every key (an interval, a warmup,
  // a start) it is a mistake, so it is refused here once rather than by each reader.
  if (time.unit() == TimeUnit::duration && time.value() > 1) refuse("a fraction of the run <= 1dur");
  if (!units.empty() && std::find(units.begin(), units.end(), time.unit()) == units.end())
    refuse("a time in " + config_words::units_text(units));
  if (zero == TimeZero::rejected && time.value() <= 0) refuse("a time > 0");
  return time;
}

bool Range::contains(double value) const {
  return (lo_open ? value > lo : value >= lo) && (hi_open ? value < hi : value <= hi);
}

std::string Range::text() const {
  if (hi >= 1e308) return (lo_open ? "> " : ">= ") + format_number(lo);
  if (lo <= -1e308) return (hi_open ? "< " : "<= ") + format_number(hi);
  return std::string("in ") + (lo_open ? "(" : "[") + format_number(lo) + ", " + format_number(hi) +
         (hi_open ? ")" : "]");
}

double PluginConfig::get_number(std::string_view key, Range range) const { return get_number(key, range, {}); }

double PluginConfig::get_number(std::string_view key, Range range, std::string_view meaning) const {
  const double value = get<double>(key);
  if (!range.contains(value))
    throw ConfigError(where(key), full_key(key),
                      expectation("a number " + range.text(), meaning) +
                          toml_detail::describe(*impl_->table->get(key)));
  return value;
}

std::int64_t PluginConfig::get_int(std::string_view key, Range range) const { return get_int(key, range, {}); }

std::int64_t PluginConfig::get_int(std::string_view key, Range range, std::string_view meaning) const {
  const std::int64_t value = get<std::int64_t>(key);
  if (!range.contains(static_cast<double>(value)))
    throw ConfigError(where(key), full_key(key),
                      expectation("an integer " + range.text(), meaning) +
                          toml_detail::describe(*impl_->table->get(key)));
  return value;
}

std::string PluginConfig::get_choice(std::string_view key, const std::vector<std::string>& choices) const {
  std::string list;
  for (const auto& choice : choices) list += (list.empty() ? "" : ", ") + toml_detail::quote(choice);
  // A missing choice names the choices too: "expected a string" would leave the user to find them in the docs.
  if (!has(key))
    throw ConfigError(where(key), full_key(key), "expected one of " + list + ", got nothing (the key is missing)");
  std::string value = get<std::string>(key);
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return value;
  throw ConfigError(where(key), full_key(key),
                    "expected one of " + list + ", got " + toml_detail::describe(*impl_->table->get(key)));
}

std::string PluginConfig::get_text(std::string_view key) const {
  std::string value = get<std::string>(key);
  if (value.empty())
    throw ConfigError(where(key), full_key(key),
                      "expected a non-empty string, got " + toml_detail::describe(*impl_->table->get(key)));
  return value;
}

std::vector<std::pair<std::string, PluginConfig>> PluginConfig::get_entries(std::string_view key) const {
  std::vector<std::pair<std::string, PluginConfig>> out;
  const toml::node* node = impl_->find(key);
  if (node == nullptr) return out;
  const auto expected = [&](const toml::node& at, const std::string& path) {
    throw ConfigError(impl_->location(at), path,
                      "expected a name or a table with a name (e.g. \"accuracy\" or { name = \"top_k\", k = 3 }), "
                      "got " + toml_detail::describe(at));
  };
  const toml::array* array = node->as_array();
  if (array == nullptr) expected(*node, full_key(key));
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& element = (*array)[i];
    const std::string index = std::string(key) + "[" + std::to_string(i) + "]";
    if (const auto* text = element.as_string()) {
      if (text->get().empty()) expected(element, full_key(index));
      // A name alone: a view of an empty table, located at the string.
      auto impl = make_impl(toml::table{}, impl_->shared->name, impl_->shared->file, impl_->location(element));
      impl->shared->key_prefix = impl_->shared->key_prefix + impl_->prefix + index + ".";
      impl->shared->owner = text->get();
      out.emplace_back(text->get(), PluginConfig(std::move(impl)));
    } else if (const auto* table = element.as_table()) {
      // A view into the table where it is, so that its keys keep their lines and its reads are recorded.
      PluginConfig view(std::make_shared<Impl>(
          Impl{impl_->shared, table, impl_->prefix + index + ".", impl_->location(element), ""}));
      if (!view.has("name")) expected(element, full_key(index));
      std::string name = view.get_text("name");
      out.emplace_back(std::move(name), std::move(view));
    } else {
      expected(element, full_key(index));
    }
  }
  return out;
}

std::vector<std::string> PluginConfig::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, node] : impl_->ordered()) out.emplace_back(key->str());
  return out;
}

std::vector<std::string> PluginConfig::unread_keys() const {
  std::vector<std::pair<std::string, SourceLocation>> unread;
  impl_->collect_unread(unread);
  std::vector<std::string> out;
  for (auto& entry : unread) out.push_back(std::move(entry.first));
  return out;
}

void PluginConfig::reject_unread() const {
  std::vector<std::pair<std::string, SourceLocation>> unread;
  impl_->collect_unread(unread);
  if (unread.empty()) return;
  const auto& [path, where] = unread.front();
  // The keys this table's reader asked for, so a typo shows its likely intent.
  std::string known;
  for (const auto& read : impl_->shared->read) {
    if (read.compare(0, impl_->prefix.size(), impl_->prefix) != 0) continue;
    const std::string name = read.substr(impl_->prefix.size());
    if (name.find('.') == std::string::npos) known += (known.empty() ? "" : ", ") + name;
  }
  throw ConfigError(where, impl_->shared->key_prefix + path,
                    "unknown key '" + path + "' for " + (impl_->owner.empty() ? impl_->shared->owner : impl_->owner) +
                        (known.empty() ? std::string() : "; it reads " + known));
}

std::string PluginConfig::full_key(std::string_view key) const { return impl_->full_key(key); }

PluginConfig PluginConfig::owned_by(std::string owner) const {
  // The same table and the same record of what was read: keys read through either view count for both.
  auto impl = std::make_shared<Impl>(*impl_);
  impl->owner = std::move(owner);
  return PluginConfig(std::move(impl));
}

SourceLocation PluginConfig::where(std::string_view key) const {
  const toml::node* node = impl_->table->get(key);
  return node != nullptr ? impl_->location(*node) : impl_->where;
}

void PluginConfig::fail(std::string_view key, std::string_view message) const {
  throw ConfigError(where(key), impl_->full_key(key), std::string(message));
}

void PluginConfig::refuse(std::string_view key, std::string_view expected) const {
  const toml::node* node = impl_->table->get(key);
  if (node == nullptr) fail(key, "expected " + std::string(expected) + ", but the key is missing");
  fail(key, "expected " + std::string(expected) + ", got " + toml_detail::describe(*node));
}

PluginConfig toml_detail::make_section_config(toml::table table, const std::string& section, std::string file,
                                              SourceLocation where) {
  auto impl = make_impl(std::move(table), section, std::move(file), std::move(where));
  impl->shared->key_prefix = section + ".";
  impl->shared->owner = "[" + section + "]";
  return PluginConfig(std::move(impl));
}

PluginConfig toml_detail::make_plugin_config(toml::table table, std::string plugin_name, std::string file,
                                             SourceLocation where) {
  return PluginConfig(make_impl(std::move(table), std::move(plugin_name), std::move(file), std::move(where)));
}

}  // namespace baton
