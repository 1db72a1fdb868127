// Reading a run config's sections into a RunConfig: baton's own keys here (TrainerSettings' through the settings
// table), a component section's name (the component reads the rest when the run is built), and the arrays of
// tables ([[plugins]], [[eval]], [[loggers]]).
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "baton/declarations.h"
#include "config/config_parts.h"
#include "config/settings_table.h"
#include "sdk/toml_node.h"

namespace baton::config_parts {
namespace {

using namespace toml_detail;
namespace fs = std::filesystem;

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

// The TrainerSettings keys of `section` (settings_table.h), read for their types; what their values may be is
// setting_problems', which the Trainer asks too.
void read_settings(const PluginConfig& s, const std::string& section, TrainerSettings& settings) {
  for (const settings_table::Setting& setting : settings_table::settings()) {
    if (setting.section != section) continue;
    const std::string& key = setting.key;
    std::visit(
        [&](auto member) {
          auto& value = settings.*member;
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<T, std::uint64_t>)  // the seed: TOML integers are signed
            value = static_cast<std::uint64_t>(s.get_int_or(key, static_cast<std::int64_t>(value), Range::at_least(0)));
          else if constexpr (std::is_same_v<T, Time>)  // in any unit (a fraction beyond 1dur is refused for every key)
            value = s.has(key) ? s.get_time(key, {}) : value;
          else if constexpr (std::is_same_v<T, Precision>)
            value = *precision_from_name(
                s.get_choice_or(key, precision_name(value), settings_table::precision_names()));
          else if constexpr (std::is_same_v<T, Sharding>)
            value = *sharding_from_name(
                s.get_choice_or(key, sharding_name(value), settings_table::sharding_names()));
          else if constexpr (std::is_same_v<T, std::string>)
            value = setting.non_empty ? s.get_text_or(key, value) : s.get_or<std::string>(key, value);
          else
            value = s.get_or<T>(key, value);
        },
        setting.member);
  }
}

// ---- sections ----

void read_run(const PluginConfig& s, RunSection& run, TrainerSettings& settings) {
  run.name = s.get_text_or("name", run.name);
  run.dir = s.get_text_or("dir", run.dir);
  read_settings(s, "run", settings);
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
  // The loader's keys are the trainer's, not the dataset component's: read here, they are not unknown keys to it.
  read_settings(s, "data", settings);
  for (auto& [name, view] : s.get_entries("metrics")) data.metrics.push_back(ComponentSection{name, view});
}

void read_distributed(const PluginConfig& s, DistributedSection& distributed, TrainerSettings& settings) {
  distributed.backend = s.get_choice_or("backend", distributed.backend, {"gloo", "nccl"});
  distributed.timeout_seconds = s.get_int_or("timeout_seconds", distributed.timeout_seconds, Range::at_least(1));
  read_settings(s, "distributed", settings);  // sharding: the Trainer's too
  if (s.has("units")) {
    distributed.units = s.get<std::vector<std::string>>("units");
    if (settings.sharding != Sharding::zero3)
      s.fail("units", std::string("units are gathered one at a time under sharding = \"zero3\" only; this run's is \"") +
                          sharding_name(settings.sharding) + "\" (leave units out, or set sharding = \"zero3\")");
    for (std::size_t i = 0; i < distributed.units.size(); ++i)
      if (distributed.units[i].empty()) s.fail("units", "expected module names, got \"\" at index " + std::to_string(i));
  }
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

// [model] init and its keys: the weights a fresh run starts from (the trainer checks the file against the model).
void read_model_init(const PluginConfig& s, WeightsInit& init) {
  if (s.has("init")) {
    init.path = s.get_text("init");
    if (init.path.empty()) s.fail("init", "expected a safetensors file, a checkpoint folder or a run folder, got \"\"");
  }
  for (const char* key : {"init_weights", "strict", "ignore"})
    if (s.has(key) && init.path.empty())
      s.fail(key, std::string(key) + " goes with init (the weights a fresh run starts from), which is not set");
  init.weights = s.get_choice_or("init_weights", init.weights, {"auto", "ema", "raw"});
  init.strict = s.get_or("strict", init.strict);
  if (s.has("ignore")) init.ignore = s.get<std::vector<std::string>>("ignore");
}

// The param-group keys of [optimizer]: the Trainer's (any optimizer's groups), read here so they are no unknown
// keys to the optimizer component.
void read_param_groups(const PluginConfig& s, ParamGroupRules& rules) {
  if (s.has("weight_decay_exclude")) {
    rules.weight_decay_exclude = s.get<std::vector<std::string>>("weight_decay_exclude");
    for (const std::string& entry : rules.weight_decay_exclude)
      if (entry.empty()) s.fail("weight_decay_exclude", "expected kinds (bias, norm, embedding) or globs, got \"\"");
  }
  if (s.has("lr_scale")) {
    const PluginConfig table = s.get<PluginConfig>("lr_scale");
    for (const std::string& glob : table.keys())
      rules.lr_scale.emplace_back(glob, table.get_number(glob, Range::above(0), "a multiplier of the lr"));
    if (rules.lr_scale.empty()) s.fail("lr_scale", "expected globs and multipliers ({ \"classifier.*\" = 10.0 }), got {}");
  }
}

// [checkpoint] keep_best = { metric, keep, mode }: a table beside the settings table's flat keys.
void read_keep_best(const PluginConfig& s, KeepBest& best) {
  if (!s.has("keep_best")) return;
  const PluginConfig table = s.get<PluginConfig>("keep_best");
  const WatchedMetric watched = read_watched_metric(table, "metric");
  best.metric = watched.metric;
  best.maximize = watched.maximize;
  best.where = watched.where;
  best.keep = table.get_int_or("keep", best.keep, Range::at_least(1), "at least 1 checkpoint to keep");
  table.reject_unread();
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

}  // namespace

RunConfig read_sections(toml::table& root, const std::string& source) {
  const Context file_ctx = make_context(source);
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
    read_model_init(s, config.model_init);
  }, false);
  section("optimizer", [&](const PluginConfig& s) {
    read_component(s, config.optimizer, "sgd");
    read_param_groups(s, config.param_groups);
  }, false);
  section("scheduler", [&](const PluginConfig& s) { read_component(s, config.scheduler, "constant"); }, false);
  section("loss", [&](const PluginConfig& s) { read_component(s, config.loss, ""); }, false);
  section("trainer", [&](const PluginConfig& s) { read_settings(s, "trainer", config.settings); }, true);
  section("checkpoint", [&](const PluginConfig& s) {
    read_settings(s, "checkpoint", config.settings);
    read_keep_best(s, config.keep_best);
  }, true);
  section("distributed", [&](const PluginConfig& s) { read_distributed(s, config.distributed, config.settings); }, true);
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

}  // namespace baton::config_parts
