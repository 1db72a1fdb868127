#include "config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "config/toml_node.h"
#include "config/words.h"
#include "sdk/nearest.h"

namespace baton {
namespace {

using namespace toml_detail;
namespace fs = std::filesystem;

const std::vector<std::string_view> kSections = {"run",     "data",       "model",       "optimizer", "scheduler",
                                                 "loss",    "trainer",    "checkpoint",  "distributed", "plugins",
                                                 "plugin_search", "eval", "loggers"};

std::string join(const std::vector<std::string_view>& items, std::string_view quote = "") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::string(quote) + std::string(items[i]) + std::string(quote);
  }
  return out;
}

using config_words::is_digits;

struct Context {
  std::string file;  // errors name it
  fs::path base;     // the config file's folder, for plugin paths
  std::map<std::string, SourceLocation>* locations = nullptr;  // every key read is recorded here
};

Context make_context(const std::string& source) {
  // "<string>"-like names are not files: their relative plugin paths stay relative to the working directory.
  const bool is_file = !source.empty() && source.front() != '<';
  return Context{source, is_file ? fs::path(source).parent_path() : fs::path()};
}

// A view of one [section], moved out of the root so every node keeps its source location. An absent section is
// an empty table at the file's start.
PluginConfig section_view(toml::table& root, const std::string& name, const Context& ctx) {
  toml::node* node = root.get(name);
  if (node == nullptr) return make_section_config(toml::table{}, name, ctx.file, SourceLocation{ctx.file, 0, 0});
  toml::table* table = node->as_table();
  if (table == nullptr)
    throw ConfigError(location_of(*node, ctx.file), name, "expected a table, got " + describe(*node));
  const SourceLocation where = location_of(*table, ctx.file);
  return make_section_config(std::move(*table), name, ctx.file, where);
}

// Every key the section has, for the checks made after parsing (RunConfig::where).
void record_locations(const PluginConfig& view, const std::string& section, const Context& ctx) {
  if (ctx.locations == nullptr) return;
  for (const auto& key : view.keys()) (*ctx.locations)[section + "." + key] = view.where(key);
}

// A time in any unit: setting_problems checks each key's own units and zero rule.
Time read_time(const PluginConfig& s, std::string_view key, Time fallback) {
  return s.has(key) ? s.get_time(key, {}) : fallback;  // (a fraction beyond 1dur is refused there, for every key)
}

// The keys of baton's own sections are read for their types here; what their values may be is
// setting_problems', which the Trainer asks too.
std::int64_t read_int(const PluginConfig& s, std::string_view key, std::int64_t fallback) {
  return s.get_or<std::int64_t>(key, fallback);
}

const Range kAtLeastOne = Range::at_least(1);

// ---- sections ----

void read_run(const PluginConfig& s, RunSection& run, TrainerSettings& settings) {
  run.name = s.get_text_or("name", run.name);
  run.dir = s.get_text_or("dir", run.dir);
  const std::int64_t seed = s.get_int_or("seed", static_cast<std::int64_t>(settings.seed), Range::at_least(0));
  settings.seed = static_cast<std::uint64_t>(seed);
}

// The generic keys of a component section; the component reads the rest when it is built.
void read_component(const PluginConfig& s, ComponentSection& out, const std::string& fallback) {
  out.name = s.get_text_or("name", fallback);
  out.config = s;
}

void read_data(const PluginConfig& s, DataSection& data, TrainerSettings& settings) {
  if (s.has("dataset"))
    s.fail("dataset", "the dataset is chosen with [data] name = \"...\" (the key was renamed)");
  read_component(s, data, "fashion-mnist");
  settings.batch_size = read_int(s, "batch_size", settings.batch_size);
  settings.eval_batch_size = read_int(s, "eval_batch_size", settings.eval_batch_size);
  // The loader's keys are the trainer's, not the dataset component's: read here, they are not unknown keys to it.
  settings.workers = read_int(s, "workers", settings.workers);
  settings.prefetch = read_int(s, "prefetch", settings.prefetch);
  for (auto& [name, view] : s.get_entries("metrics")) data.metrics.push_back(ComponentSection{name, view});
}

void read_trainer(const PluginConfig& s, TrainerSettings& settings) {
  settings.max_duration = read_time(s, "max_duration", settings.max_duration);
  settings.eval_interval = read_time(s, "eval_interval", settings.eval_interval);
  settings.device = s.get_or<std::string>("device", settings.device);
  settings.threads = read_int(s, "threads", settings.threads);
  settings.log_interval = read_time(s, "log_interval", settings.log_interval);
  settings.microbatch_size = read_int(s, "microbatch_size", settings.microbatch_size);
  const std::string precision =
      s.get_choice_or("precision", precision_name(settings.precision), {"fp32", "amp_bf16", "amp_fp16"});
  settings.precision = *precision_from_name(precision);
  settings.progress = s.get_or<bool>("progress", settings.progress);
  settings.allow_nonfinite = s.get_or<bool>("allow_nonfinite", settings.allow_nonfinite);
}

void read_checkpoint(const PluginConfig& s, TrainerSettings& settings) {
  settings.save_interval = read_time(s, "save_interval", settings.save_interval);
  settings.keep_last = read_int(s, "keep_last", settings.keep_last);
  settings.checkpoint_dir = s.get_text_or("dir", settings.checkpoint_dir);
}

void read_distributed(const PluginConfig& s, DistributedSection& distributed) {
  distributed.backend = s.get_choice_or("backend", distributed.backend, {"gloo", "nccl"});
  distributed.timeout_seconds = s.get_int_or("timeout_seconds", distributed.timeout_seconds, kAtLeastOne);
}

/// Plugin paths from the file are relative to its folder; those typed in a --set stay relative to the working
/// directory, where the user typed them.
std::string resolve_plugin_path(const std::string& path, const toml::node& node, const Context& ctx) {
  const bool from_file = location_of(node, ctx.file).file == ctx.file;
  if (!from_file || fs::path(path).is_absolute() || ctx.base.empty()) return path;
  return (ctx.base / path).lexically_normal().string();
}

void read_plugin_search(const PluginConfig& s, RunConfig& config, const Context& ctx) {
  if (s.has("paths")) {
    const auto paths = s.get<std::vector<std::string>>("paths");
    // Paths from the file are relative to its folder; one typed in a --set stays relative to the working directory.
    const bool from_file = s.where("paths").file == ctx.file;
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (paths[i].empty()) s.fail("paths", "expected non-empty strings, got \"\" at index " + std::to_string(i));
      config.plugin_search_paths.push_back(
          from_file && !fs::path(paths[i]).is_absolute() && !ctx.base.empty()
              ? (ctx.base / paths[i]).lexically_normal().string()
              : paths[i]);
    }
  }
  config.allow_insecure_plugins = s.get_or<bool>("allow_insecure", config.allow_insecure_plugins);
}

PluginEntry read_plugin(toml::table& table, std::size_t index, const Context& ctx) {
  const std::string entry = "plugins." + std::to_string(index);
  PluginEntry plugin;
  plugin.where = location_of(table, ctx.file);
  const toml::node* name = table.get("name");
  const toml::node* path = table.get("path");
  if ((name == nullptr) == (path == nullptr))
    throw ConfigError(plugin.where, entry,
                      std::string("expected exactly one of 'name' or 'path', got ") + (name ? "both" : "neither"));
  const toml::node& id = name != nullptr ? *name : *path;
  const std::string id_key = entry + (name != nullptr ? ".name" : ".path");
  std::string text;
  try {
    text = to_string(id);
  } catch (const Mismatch& m) {
    throw ConfigError(location_of(id, ctx.file), id_key, m.message);
  }
  if (text.empty())
    throw ConfigError(location_of(id, ctx.file), id_key, "expected a non-empty string, got " + describe(id));
  plugin.key = id_key;
  plugin.key_where = location_of(id, ctx.file);
  if (name != nullptr)
    plugin.name = text;
  else
    plugin.path = resolve_plugin_path(text, id, ctx);
  // Moving (not copying) the table keeps every node's source location for the plugin's own errors.
  toml::table rest = std::move(table);
  rest.erase("name");
  rest.erase("path");
  plugin.config = make_plugin_config(std::move(rest), text, ctx.file, plugin.where);
  return plugin;
}

// An array of tables ([[plugins]], [[eval]]): `read(table, index)` for each, in file order.
template <class Read>
auto read_tables(toml::table& root, const std::string& key, const Context& ctx, Read read) {
  std::vector<decltype(read(std::declval<toml::table&>(), std::size_t{}))> out;
  toml::node* node = root.get(key);
  if (node == nullptr) return out;
  toml::array* array = node->as_array();
  if (array == nullptr)
    throw ConfigError(location_of(*node, ctx.file), key,
                      "expected an array of tables ([[" + key + "]]), got " + describe(*node));
  for (std::size_t i = 0; i < array->size(); ++i) {
    toml::table* table = (*array)[i].as_table();
    if (table == nullptr)
      throw ConfigError(location_of((*array)[i], ctx.file), key + "." + std::to_string(i),
                        "expected a table, got " + describe((*array)[i]));
    out.push_back(read(*table, i));
  }
  return out;
}

std::vector<PluginEntry> read_plugins(toml::table& root, const Context& ctx) {
  return read_tables(root, "plugins", ctx, [&](toml::table& table, std::size_t i) { return read_plugin(table, i, ctx); });
}

// [[loggers]]: each table names a logger destination; its other keys are read by the destination's factory
// when the run is built, as a component section's are.
std::vector<ComponentSection> read_loggers(toml::table& root, const Context& ctx) {
  return read_tables(root, "loggers", ctx, [&](toml::table& table, std::size_t i) {
    const std::string key = "loggers." + std::to_string(i);
    const SourceLocation where = location_of(table, ctx.file);
    const PluginConfig s = make_section_config(std::move(table), key, ctx.file, where);
    ComponentSection section;
    section.name = s.get_text("name");
    if (section.name.empty()) s.fail("name", "expected the name of a logger (\"csv\", \"tensorboard\"), got \"\"");
    section.config = s;
    record_locations(s, key, ctx);
    return section;
  });
}

// [[eval]]: extra evaluation sets. The generic keys are read here; a set's own dataset and its metrics read theirs
// when the run is built, as [data]'s do.
EvalEntry read_eval(toml::table& table, std::size_t index, const std::vector<EvalEntry>& earlier, const Context& ctx) {
  EvalEntry entry;
  entry.where = location_of(table, ctx.file);
  const std::string section = "eval." + std::to_string(index);
  const PluginConfig s = make_section_config(std::move(table), section, ctx.file, entry.where);
  const std::vector<std::string> known = {"name", "data", "split", "metrics", "interval"};
  for (const auto& key : s.keys())
    if (std::find(known.begin(), known.end(), key) == known.end())
      s.fail(key, "unknown key '" + key + "' for [[eval]]; it reads data, interval, metrics, name, split");
  entry.name = s.get_text("name");
  if (const std::string problem = eval_set_name_problem(entry.name); !problem.empty()) s.fail("name", problem);
  for (const auto& other : earlier)
    if (other.name == entry.name) s.fail("name", "another [[eval]] is named " + quote(entry.name) + " already");
  if (s.has("data")) {
    entry.own_data = true;
    entry.data.config = s.get<PluginConfig>("data");
    entry.data.name = entry.data.config.get_text("name");
  }
  entry.split = s.get_choice_or("split", entry.split, {"eval", "train"});
  for (auto& [name, view] : s.get_entries("metrics")) entry.metrics.push_back(ComponentSection{name, view});
  if (s.has("interval"))
    entry.interval = s.get_time("interval", {TimeUnit::epoch, TimeUnit::batch, TimeUnit::duration});
  return entry;
}

std::vector<EvalEntry> read_evals(toml::table& root, const Context& ctx) {
  std::vector<EvalEntry> evals;
  // Each set is read knowing the earlier ones (names must differ).
  read_tables(root, "eval", ctx, [&](toml::table& table, std::size_t i) {
    evals.push_back(read_eval(table, i, evals, ctx));
    return 0;
  });
  return evals;
}

void reject_unknown_sections(const toml::table& root, const Context& ctx) {
  for (const auto& [key, node] : root) {
    if (std::find(kSections.begin(), kSections.end(), key.str()) == kSections.end())
      throw ConfigError(location_of(key.source(), ctx.file), std::string(key.str()),
                        "unknown section; expected one of " + join(kSections));
  }
}

RunConfig build(toml::table& root, const Context& file_ctx) {
  reject_unknown_sections(root, file_ctx);
  RunConfig config;
  config.source = file_ctx.file;
  Context ctx = file_ctx;
  ctx.locations = &config.locations;
  // Generic sections are read whole here; a component section's other keys wait for its component.
  std::map<std::string, PluginConfig> views;
  const auto section = [&](const std::string& name, auto read, bool whole) {
    PluginConfig view = section_view(root, name, ctx);
    read(view);
    record_locations(view, name, ctx);
    if (whole) view.reject_unread();
    views.emplace(name, view);
  };
  section("run", [&](const PluginConfig& s) { read_run(s, config.run, config.settings); }, true);
  section("data", [&](const PluginConfig& s) { read_data(s, config.data, config.settings); }, false);
  section("model", [&](const PluginConfig& s) {
    // [model] torchscript = "file.pt" names the model by its file alone.
    read_component(s, config.model, s.has("torchscript") ? "torchscript" : "convnet");
  }, false);
  section("optimizer", [&](const PluginConfig& s) { read_component(s, config.optimizer, "sgd"); }, false);
  section("scheduler", [&](const PluginConfig& s) { read_component(s, config.scheduler, "constant"); }, false);
  section("loss", [&](const PluginConfig& s) { read_component(s, config.loss, ""); }, false);
  section("trainer", [&](const PluginConfig& s) { read_trainer(s, config.settings); }, true);
  section("checkpoint", [&](const PluginConfig& s) { read_checkpoint(s, config.settings); }, true);
  section("distributed", [&](const PluginConfig& s) { read_distributed(s, config.distributed); }, true);
  section("plugin_search", [&](const PluginConfig& s) { read_plugin_search(s, config, ctx); }, true);
  config.evals = read_evals(root, ctx);
  config.plugins = read_plugins(root, ctx);
  config.loggers = read_loggers(root, ctx);
  // The values of the Trainer's settings, checked as the Trainer checks them, reported at their keys.
  for (const SettingProblem& problem : setting_problems(config.settings)) {
    const std::size_t dot = problem.key.find('.');
    const PluginConfig& view = views.at(problem.key.substr(0, dot));
    const std::string key = problem.key.substr(dot + 1);
    if (view.has(key)) view.refuse(key, problem.expected);
    throw ConfigError(config.where(problem.key), problem.key,
                      "expected " + problem.expected + ", got " + problem.got);
  }
  if (config.settings.checkpoint_dir.empty())
    config.settings.checkpoint_dir = (fs::path(config.run.dir) / config.run.name / "checkpoints").string();
  return config;
}

// ---- --set overrides ----

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

}  // namespace

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
    return "expected a name without '/' or spaces (it is part of metric names), got " + quote(name);
  return "";
}

RunConfig parse_config(std::string_view toml_text, const std::string& source, const std::vector<Override>& overrides) {
  const Context ctx = make_context(source);
  toml::table root = parse_table(toml_text, source);
  for (const Override& o : overrides) apply_override(root, o);
  // What a checkpoint records is what the run used: the file as the overrides left it (docs/checkpoints.md).
  // Written before build(), which hands the sections' tables over to the components' configs.
  std::ostringstream resolved;
  resolved << "# " << source << (overrides.empty() ? "" : " with");
  for (const Override& o : overrides)
    resolved << " " << (o.origin.empty() ? "--set " + o.key + "=" + o.value : o.origin);
  resolved << "\n" << root << "\n";
  RunConfig config = build(root, ctx);
  config.resolved_text = resolved.str();
  return config;
}

std::string resolved_config_text(const RunConfig& c) {
  toml::table root;
  try {
    // The first line is the comment naming the file and the overrides.
    root = toml::parse(c.resolved_text);
  } catch (const toml::parse_error&) {
    return c.resolved_text;
  }
  const auto section = [&](const char* name) -> toml::table& {
    if (!root.contains(name) || !root[name].is_table()) root.insert_or_assign(name, toml::table{});
    return *root[name].as_table();
  };
  const auto time = [](const Time& t) { return t.str(); };
  toml::table& run = section("run");
  run.insert_or_assign("name", c.run.name);
  run.insert_or_assign("dir", c.run.dir);
  run.insert_or_assign("seed", static_cast<std::int64_t>(c.settings.seed));
  toml::table& data = section("data");
  data.insert_or_assign("name", c.data.name);
  data.insert_or_assign("batch_size", c.settings.batch_size);
  data.insert_or_assign("eval_batch_size", c.settings.eval_batch_size);
  data.insert_or_assign("workers", c.settings.workers);
  data.insert_or_assign("prefetch", c.settings.prefetch_batches());
  section("model").insert_or_assign("name", c.model.name);
  section("optimizer").insert_or_assign("name", c.optimizer.name);
  section("scheduler").insert_or_assign("name", c.scheduler.name);
  if (!c.loss.name.empty()) section("loss").insert_or_assign("name", c.loss.name);
  toml::table& trainer = section("trainer");
  trainer.insert_or_assign("max_duration", time(c.settings.max_duration));
  trainer.insert_or_assign("eval_interval", time(c.settings.eval_interval));
  trainer.insert_or_assign("device", c.settings.device);
  trainer.insert_or_assign("threads", c.settings.threads);
  trainer.insert_or_assign("log_interval", time(c.settings.log_interval));
  trainer.insert_or_assign("microbatch_size", c.settings.microbatch_size);
  trainer.insert_or_assign("precision", precision_name(c.settings.precision));
  trainer.insert_or_assign("progress", c.settings.progress);
  trainer.insert_or_assign("allow_nonfinite", c.settings.allow_nonfinite);
  toml::table& checkpoint = section("checkpoint");
  checkpoint.insert_or_assign("save_interval", time(c.settings.save_interval));
  checkpoint.insert_or_assign("keep_last", c.settings.keep_last);
  checkpoint.insert_or_assign("dir", c.settings.checkpoint_dir);
  toml::table& distributed = section("distributed");
  distributed.insert_or_assign("backend", c.distributed.backend);
  distributed.insert_or_assign("timeout_seconds", c.distributed.timeout_seconds);
  toml::table& search = section("plugin_search");
  toml::array paths;
  for (const auto& p : c.plugin_search_paths) paths.push_back(p);
  search.insert_or_assign("paths", std::move(paths));
  search.insert_or_assign("allow_insecure", c.allow_insecure_plugins);
  std::ostringstream out;
  const std::string first_line = c.resolved_text.substr(0, c.resolved_text.find('\n'));
  out << first_line << "\n# every key of baton's own sections at its value (defaults filled in); a component's own "
      << "keys as given (their defaults: baton plugins)\n"
      << (c.loss.name.empty() ? "# [loss] name: the data's task decides (cross_entropy for classes, mse for values)\n"
                              : "")
      << root << "\n";
  return out.str();
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
    if (node == nullptr) return std::string("not set");
    std::ostringstream out;
    node->visit([&](const auto& value) { out << value; });
    return out.str();
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

RunConfig load_config(const std::string& path, const std::vector<Override>& overrides) {
  const SourceLocation at{path, 0, 0};
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ConfigError(at, "", "cannot read the config file: it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(at, "", std::string("cannot open the config file: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(at, "", std::string("cannot read the config file: ") + std::strerror(errno));
  return parse_config(text.str(), path, overrides);
}

}  // namespace baton
