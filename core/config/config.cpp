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

namespace baton {
namespace {

using namespace toml_detail;
namespace fs = std::filesystem;

const std::vector<std::string_view> kSections = {"run",     "data",       "model",       "optimizer", "scheduler",
                                                 "loss",    "trainer",    "checkpoint",  "distributed", "plugins",
                                                 "plugin_search", "eval"};

std::string join(const std::vector<std::string_view>& items, std::string_view quote = "") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::string(quote) + std::string(items[i]) + std::string(quote);
  }
  return out;
}

bool is_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

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

Time read_time(const PluginConfig& s, std::string_view key, Time fallback, const std::vector<TimeUnit>& units,
               TimeZero zero) {
  if (!s.has(key)) return fallback;
  const Time time = s.get_time(key, units, zero);
  if (time.unit() == TimeUnit::duration && time.value() > 1)
    s.fail(key, "expected a fraction of the run <= 1dur, got string " + quote(s.get<std::string>(key)));
  return time;
}

std::string read_device(const PluginConfig& s, std::string_view key, const std::string& fallback) {
  if (!s.has(key)) return fallback;
  const std::string device = s.get<std::string>(key);
  const bool valid =
      device == "cpu" || device == "cuda" || (device.rfind("cuda:", 0) == 0 && is_digits(device.substr(5)));
  if (!valid) s.fail(key, "expected \"cpu\", \"cuda\" or \"cuda:N\", got string " + quote(device));
  return device;
}

const Range kAtLeastOne = Range::at_least(1);
const Range kNonNegative = Range::at_least(0);
// More loader threads than cores can pay for a dataset that waits on storage; this many is a typo.
constexpr double kMaxWorkers = 256;

// ---- sections ----

void read_run(const PluginConfig& s, RunSection& run) {
  run.name = s.get_text_or("name", run.name);
  run.dir = s.get_text_or("dir", run.dir);
  run.seed = s.get_int_or("seed", run.seed, kNonNegative);
}

// The generic keys of a component section; the component reads the rest when it is built.
void read_component(const PluginConfig& s, ComponentSection& out, const std::string& fallback) {
  out.name = s.get_text_or("name", fallback);
  out.config = s;
}

void read_data(const PluginConfig& s, DataSection& data) {
  if (s.has("dataset"))
    s.fail("dataset", "the dataset is chosen with [data] name = \"...\" (the key was renamed)");
  read_component(s, data, "fashion-mnist");
  data.batch_size = s.get_int_or("batch_size", data.batch_size, kAtLeastOne);
  data.eval_batch_size = s.get_int_or("eval_batch_size", data.eval_batch_size, kAtLeastOne);
  // The loader's keys are the trainer's, not the dataset component's: read here, they are not unknown keys to it.
  data.workers = s.get_int_or("workers", data.workers, Range::closed(0, kMaxWorkers));
  data.prefetch = s.get_int_or("prefetch", 2 * data.workers, kAtLeastOne);
  if (data.workers > 0 && data.prefetch < data.workers)
    s.fail("prefetch", "expected at least workers (" + std::to_string(data.workers) +
                           ": each worker fetches one of the batches ahead), got " + std::to_string(data.prefetch));
  for (auto& [name, view] : s.get_entries("metrics")) data.metrics.push_back(ComponentSection{name, view});
}

void read_trainer(const PluginConfig& s, TrainerSection& trainer) {
  trainer.max_duration = read_time(s, "max_duration", trainer.max_duration,
                                   {TimeUnit::epoch, TimeUnit::batch, TimeUnit::sample}, TimeZero::rejected);
  trainer.eval_interval = read_time(s, "eval_interval", trainer.eval_interval,
                                    {TimeUnit::epoch, TimeUnit::batch, TimeUnit::duration}, TimeZero::allowed);
  trainer.device = read_device(s, "device", trainer.device);
  trainer.threads = s.get_int_or("threads", trainer.threads, kNonNegative);
  trainer.log_interval = read_time(s, "log_interval", trainer.log_interval, {TimeUnit::batch}, TimeZero::rejected);
  trainer.microbatch_size = s.get_int_or("microbatch_size", trainer.microbatch_size, kNonNegative);
  trainer.precision = s.get_choice_or("precision", trainer.precision, {"fp32", "amp_bf16", "amp_fp16"});
  if (s.has("precision") && trainer.precision == "amp_fp16" && trainer.device.rfind("cuda", 0) != 0)
    s.fail("precision", "amp_fp16 needs a CUDA device (trainer.device is \"" + trainer.device +
                            "\"); on the CPU use amp_bf16, which needs no loss scaling");
  trainer.progress = s.get_or<bool>("progress", trainer.progress);
}

void read_checkpoint(const PluginConfig& s, CheckpointSection& checkpoint) {
  checkpoint.save_interval = read_time(s, "save_interval", checkpoint.save_interval,
                                       {TimeUnit::epoch, TimeUnit::batch}, TimeZero::allowed);
  checkpoint.keep_last = s.get_int_or("keep_last", checkpoint.keep_last, kNonNegative);
  checkpoint.dir = s.get_text_or("dir", checkpoint.dir);
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
  if (entry.name == "eval")
    s.fail("name", "\"eval\" names the evaluation split of [data]; give this set another name");
  if (entry.name.find_first_of("/ ") != std::string::npos)
    s.fail("name", "expected a name without '/' or spaces (it is part of metric names), got " + quote(entry.name));
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
    entry.interval = read_time(s, "interval", Time(), {TimeUnit::epoch, TimeUnit::batch, TimeUnit::duration},
                               TimeZero::allowed);
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
  const auto section = [&](const std::string& name, auto read, bool whole) {
    PluginConfig view = section_view(root, name, ctx);
    read(view);
    record_locations(view, name, ctx);
    if (whole) view.reject_unread();
  };
  section("run", [&](const PluginConfig& s) { read_run(s, config.run); }, true);
  section("data", [&](const PluginConfig& s) { read_data(s, config.data); }, false);
  section("model", [&](const PluginConfig& s) {
    // [model] torchscript = "file.pt" names the model by its file alone.
    read_component(s, config.model, s.has("torchscript") ? "torchscript" : "convnet");
  }, false);
  section("optimizer", [&](const PluginConfig& s) { read_component(s, config.optimizer, "sgd"); }, false);
  section("scheduler", [&](const PluginConfig& s) { read_component(s, config.scheduler, "constant"); }, false);
  section("loss", [&](const PluginConfig& s) { read_component(s, config.loss, ""); }, false);
  section("trainer", [&](const PluginConfig& s) { read_trainer(s, config.trainer); }, true);
  section("checkpoint", [&](const PluginConfig& s) { read_checkpoint(s, config.checkpoint); }, true);
  section("distributed", [&](const PluginConfig& s) { read_distributed(s, config.distributed); }, true);
  section("plugin_search", [&](const PluginConfig& s) { read_plugin_search(s, config, ctx); }, true);
  config.evals = read_evals(root, ctx);
  config.plugins = read_plugins(root, ctx);
  if (config.checkpoint.dir.empty())
    config.checkpoint.dir = (fs::path(config.run.dir) / config.run.name / "checkpoints").string();
  return config;
}

// ---- --set overrides ----

/// A one-key table {x = value} whose nodes carry `origin` as their source, so errors point at the --set.
toml::table parse_override_value(const Override& o, const std::string& origin) {
  try {
    toml::table parsed = toml::parse("x = " + o.value, origin);
    if (parsed.size() == 1 && parsed.contains("x")) return parsed;
  } catch (const toml::parse_error&) {
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

toml::table* find_plugin(toml::table& root, const std::string& selector, const Override& o, const SourceLocation& at) {
  toml::node* node = root.get("plugins");
  if (node == nullptr) throw ConfigError(at, o.key, "the config has no [[plugins]] entries to override");
  toml::array* array = node->as_array();
  if (array == nullptr) return nullptr;  // the file's own error is reported when the plugins are read
  if (is_digits(selector)) {
    const std::size_t index = selector.size() > 9 ? array->size() : std::stoul(selector);
    if (index >= array->size())
      throw ConfigError(at, o.key,
                        "no plugin at index " + selector + "; the config has " + std::to_string(array->size()) +
                            " [[plugins]] entries (indexes start at 0)");
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
                        "several [[plugins]] entries are named '" + selector + "'; use plugins.<index>.<key>");
    found = table;
  }
  if (found == nullptr) {
    std::vector<std::string_view> shown(names.begin(), names.end());
    throw ConfigError(at, o.key,
                      "unknown plugin '" + selector + "'; the [[plugins]] entries are " +
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

void apply_override(toml::table& root, const Override& o) {
  const SourceLocation at{"--set " + o.key + "=" + o.value, 0, 0};
  const std::vector<std::string> parts = split_key(o, at);
  const std::string& section = parts.front();
  if (std::find(kSections.begin(), kSections.end(), section) == kSections.end())
    throw ConfigError(at, o.key, "unknown section '" + section + "'; expected one of " + join(kSections));
  if (parts.size() < 2) throw ConfigError(at, o.key, "expected section.key (e.g. trainer.max_duration)");
  toml::table value = parse_override_value(o, at.file);
  if (section == "plugins") {
    if (parts.size() < 3) throw ConfigError(at, o.key, "expected plugins.<index or name>.<key>");
    if (toml::table* plugin = find_plugin(root, parts[1], o, at)) assign(*plugin, parts, 2, value, o, at);
    return;
  }
  if (parts.size() != 2) throw ConfigError(at, o.key, "expected " + section + ".<key>");
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
  return Override{std::string(key), std::string(text.substr(eq + 1))};
}

RunConfig parse_config(std::string_view toml_text, const std::string& source, const std::vector<Override>& overrides) {
  const Context ctx = make_context(source);
  toml::table root = parse_table(toml_text, source);
  for (const Override& o : overrides) apply_override(root, o);
  return build(root, ctx);
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
