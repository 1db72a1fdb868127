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

#include "config/toml_node.h"

namespace baton {
namespace {

using namespace toml_detail;
namespace fs = std::filesystem;

const std::vector<std::string_view> kSections = {"run",     "data",       "model",   "optimizer",    "scheduler",
                                                 "trainer", "checkpoint", "distributed", "plugins",
                                                 "plugin_search"};

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

// One [section]: reads the keys it knows, then reports any other key at that key's location.
class Section {
 public:
  Section(const toml::table& root, std::string name, const Context& ctx) : name_(std::move(name)), ctx_(ctx) {
    const toml::node* node = root.get(name_);
    if (node == nullptr) return;
    table_ = node->as_table();
    if (table_ == nullptr)
      throw ConfigError(location_of(*node, ctx_.file), name_, "expected a table, got " + describe(*node));
  }

  const toml::node* get(std::string_view key) {
    known_.push_back(key);
    const toml::node* node = table_ != nullptr ? table_->get(key) : nullptr;
    if (node != nullptr && ctx_.locations != nullptr) (*ctx_.locations)[path(key)] = location_of(*node, ctx_.file);
    return node;
  }

  /// Converts key into out when present; returns its node (nullptr when absent).
  template <class T, class Convert>
  const toml::node* read(std::string_view key, T& out, Convert convert) {
    const toml::node* node = get(key);
    if (node == nullptr) return nullptr;
    try {
      out = convert(*node);
    } catch (const Mismatch& m) {
      throw ConfigError(location_of(*m.node, ctx_.file), path(key) + m.suffix, m.message);
    }
    return node;
  }

  [[noreturn]] void fail(const toml::node& node, std::string_view key, const std::string& expected) const {
    throw ConfigError(location_of(node, ctx_.file), path(key), "expected " + expected + ", got " + describe(node));
  }

  void reject_unknown() const {
    if (table_ == nullptr) return;
    for (const auto& [key, node] : *table_) {
      if (std::find(known_.begin(), known_.end(), key.str()) != known_.end()) continue;
      throw ConfigError(location_of(key.source(), ctx_.file), path(key.str()),
                        "unknown key; [" + name_ + "] has " + join(known_));
    }
  }

  std::string path(std::string_view key) const { return name_ + "." + std::string(key); }
  const Context& context() const { return ctx_; }

 private:
  const toml::table* table_ = nullptr;
  std::string name_;
  const Context& ctx_;
  std::vector<std::string_view> known_;
};

// ---- typed readers with the checks the header's comments ask for ----

void read_bool(Section& s, std::string_view key, bool& out) { s.read(key, out, to_bool); }

void read_int(Section& s, std::string_view key, std::int64_t& out, std::int64_t min) {
  const toml::node* node = s.read(key, out, to_int);
  if (node != nullptr && out < min) s.fail(*node, key, "an integer >= " + std::to_string(min));
}

struct Range {
  double lo;
  double hi;
  bool lo_open;
  bool hi_open;

  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi); }
  std::string text() const {
    const auto show = [](double v) {
      std::ostringstream out;
      out << v;
      return out.str();
    };
    if (hi == std::numeric_limits<double>::infinity()) return (lo_open ? "> " : ">= ") + show(lo);
    return std::string("in ") + (lo_open ? "(" : "[") + show(lo) + ", " + show(hi) + (hi_open ? ")" : "]");
  }
};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Range kPositive{0, kInf, true, false};
constexpr Range kNonNegative{0, kInf, false, false};
constexpr Range kUnitOpen{0, 1, false, true};  // [0, 1)
constexpr Range kUnitClosed{0, 1, false, false};

void read_double(Section& s, std::string_view key, double& out, Range range) {
  const toml::node* node = s.read(key, out, to_double);
  if (node != nullptr && !range.contains(out)) s.fail(*node, key, "a number " + range.text());
}

void read_string(Section& s, std::string_view key, std::string& out) {
  const toml::node* node = s.read(key, out, to_string);
  if (node != nullptr && out.empty()) s.fail(*node, key, "a non-empty string");
}

const toml::node* read_choice(Section& s, std::string_view key, std::string& out,
                              const std::vector<std::string_view>& choices) {
  const toml::node* node = s.read(key, out, to_string);
  if (node != nullptr && std::find(choices.begin(), choices.end(), out) == choices.end())
    s.fail(*node, key, "one of " + join(choices, "\""));
  return node;
}

std::string unit_list(std::initializer_list<TimeUnit> units) {
  std::vector<std::string_view> names;
  for (TimeUnit unit : units) names.push_back(unit_suffix(unit));
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : (i + 1 == names.size() ? " or " : ", ")) + std::string(names[i]);
  return out;
}

enum class Zero { allowed, rejected };

void read_time(Section& s, std::string_view key, Time& out, std::initializer_list<TimeUnit> units, Zero zero) {
  const toml::node* node = s.read(key, out, to_time);
  if (node == nullptr) return;
  if (std::find(units.begin(), units.end(), out.unit()) == units.end())
    s.fail(*node, key, "a time in " + unit_list(units));
  if (zero == Zero::rejected && out.value() <= 0) s.fail(*node, key, "a time > 0");
  if (out.unit() == TimeUnit::duration && out.value() > 1) s.fail(*node, key, "a fraction of the run <= 1dur");
}

void read_device(Section& s, std::string_view key, std::string& out) {
  const toml::node* node = s.read(key, out, to_string);
  const bool valid = out == "cpu" || out == "cuda" || (out.rfind("cuda:", 0) == 0 && is_digits(out.substr(5)));
  if (node != nullptr && !valid) s.fail(*node, key, "\"cpu\", \"cuda\" or \"cuda:N\"");
}

// ---- sections ----

void read_run(Section s, RunSection& run) {
  read_string(s, "name", run.name);
  read_string(s, "dir", run.dir);
  read_int(s, "seed", run.seed, 0);
  s.reject_unknown();
}

void read_data(Section s, DataSection& data) {
  read_choice(s, "dataset", data.dataset, {"fashion-mnist", "mnist", "synthetic"});
  if (data.dataset == "mnist") data.path = "/usr/share/datasets/mnist";
  if (data.dataset == "synthetic") data.path.clear();
  read_string(s, "path", data.path);
  read_int(s, "batch_size", data.batch_size, 1);
  read_int(s, "eval_batch_size", data.eval_batch_size, 1);
  read_int(s, "train_subset", data.train_subset, 0);
  read_int(s, "eval_subset", data.eval_subset, 0);
  read_int(s, "synthetic_train_size", data.synthetic_train_size, 1);
  read_int(s, "synthetic_eval_size", data.synthetic_eval_size, 1);
  s.reject_unknown();
}

void read_model(Section s, ModelSection& model) {
  read_choice(s, "name", model.name, {"mlp", "convnet"});
  const toml::node* widths = s.read("widths", model.widths, to_ints);
  if (widths == nullptr) {
    model.widths = model.name == "mlp" ? std::vector<std::int64_t>{256, 128} : std::vector<std::int64_t>{32, 64};
  } else {
    const toml::array& array = *widths->as_array();
    for (std::size_t i = 0; i < model.widths.size(); ++i)
      if (model.widths[i] < 1) s.fail(array[i], "widths[" + std::to_string(i) + "]", "an integer >= 1");
    // An mlp without hidden layers is a linear model; a convnet needs at least one block.
    if (model.name == "convnet" && model.widths.empty()) s.fail(*widths, "widths", "at least one width for convnet");
  }
  s.reject_unknown();
}

void read_optimizer(Section s, OptimizerSection& optimizer) {
  read_choice(s, "name", optimizer.name, {"sgd", "adam", "adamw"});
  read_double(s, "lr", optimizer.lr, kPositive);
  read_double(s, "weight_decay", optimizer.weight_decay, kNonNegative);
  read_double(s, "momentum", optimizer.momentum, kUnitOpen);
  read_double(s, "beta1", optimizer.beta1, kUnitOpen);
  read_double(s, "beta2", optimizer.beta2, kUnitOpen);
  read_double(s, "eps", optimizer.eps, kPositive);
  s.reject_unknown();
}

void read_scheduler(Section s, SchedulerSection& scheduler) {
  read_choice(s, "name", scheduler.name, {"constant", "cosine"});
  read_time(s, "warmup", scheduler.warmup, {TimeUnit::batch, TimeUnit::epoch, TimeUnit::duration}, Zero::allowed);
  read_double(s, "min_lr_ratio", scheduler.min_lr_ratio, kUnitClosed);
  s.reject_unknown();
}

void read_trainer(Section s, TrainerSection& trainer) {
  read_time(s, "max_duration", trainer.max_duration, {TimeUnit::epoch, TimeUnit::batch, TimeUnit::sample},
            Zero::rejected);
  read_time(s, "eval_interval", trainer.eval_interval, {TimeUnit::epoch, TimeUnit::batch, TimeUnit::duration},
            Zero::allowed);
  read_device(s, "device", trainer.device);
  read_int(s, "threads", trainer.threads, 0);
  read_time(s, "log_interval", trainer.log_interval, {TimeUnit::batch}, Zero::rejected);
  read_int(s, "microbatch_size", trainer.microbatch_size, 0);
  const toml::node* precision = read_choice(s, "precision", trainer.precision, {"fp32", "amp_bf16", "amp_fp16"});
  if (precision != nullptr && trainer.precision == "amp_fp16" && trainer.device.rfind("cuda", 0) != 0)
    throw ConfigError(location_of(*precision, s.context().file), s.path("precision"),
                      "amp_fp16 needs a CUDA device (trainer.device is \"" + trainer.device +
                          "\"); on the CPU use amp_bf16, which needs no loss scaling");
  read_bool(s, "progress", trainer.progress);
  s.reject_unknown();
}

void read_checkpoint(Section s, CheckpointSection& checkpoint) {
  read_time(s, "save_interval", checkpoint.save_interval, {TimeUnit::epoch, TimeUnit::batch}, Zero::allowed);
  read_int(s, "keep_last", checkpoint.keep_last, 0);
  read_string(s, "dir", checkpoint.dir);
  s.reject_unknown();
}

void read_distributed(Section s, DistributedSection& distributed) {
  read_choice(s, "backend", distributed.backend, {"gloo", "nccl"});
  read_int(s, "timeout_seconds", distributed.timeout_seconds, 1);
  s.reject_unknown();
}

/// Plugin paths from the file are relative to its folder; those typed in a --set stay relative to the working
/// directory, where the user typed them.
std::string resolve_plugin_path(const std::string& path, const toml::node& node, const Context& ctx) {
  const bool from_file = location_of(node, ctx.file).file == ctx.file;
  if (!from_file || fs::path(path).is_absolute() || ctx.base.empty()) return path;
  return (ctx.base / path).lexically_normal().string();
}

void read_plugin_search(Section s, RunConfig& config) {
  std::vector<std::string> paths;
  if (const toml::node* node = s.read("paths", paths, to_strings)) {
    const toml::array& array = *node->as_array();
    for (std::size_t i = 0; i < paths.size(); ++i) {
      if (paths[i].empty()) s.fail(array[i], "paths[" + std::to_string(i) + "]", "a non-empty string");
      config.plugin_search_paths.push_back(resolve_plugin_path(paths[i], array[i], s.context()));
    }
  }
  read_bool(s, "allow_insecure", config.allow_insecure_plugins);
  s.reject_unknown();
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

std::vector<PluginEntry> read_plugins(toml::table& root, const Context& ctx) {
  toml::node* node = root.get("plugins");
  if (node == nullptr) return {};
  toml::array* array = node->as_array();
  if (array == nullptr)
    throw ConfigError(location_of(*node, ctx.file), "plugins",
                      "expected an array of tables ([[plugins]]), got " + describe(*node));
  std::vector<PluginEntry> plugins;
  for (std::size_t i = 0; i < array->size(); ++i) {
    toml::node& element = (*array)[i];
    toml::table* table = element.as_table();
    if (table == nullptr)
      throw ConfigError(location_of(element, ctx.file), "plugins." + std::to_string(i),
                        "expected a table, got " + describe(element));
    plugins.push_back(read_plugin(*table, i, ctx));
  }
  return plugins;
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
  read_run(Section(root, "run", ctx), config.run);
  read_data(Section(root, "data", ctx), config.data);
  read_model(Section(root, "model", ctx), config.model);
  read_optimizer(Section(root, "optimizer", ctx), config.optimizer);
  read_scheduler(Section(root, "scheduler", ctx), config.scheduler);
  read_trainer(Section(root, "trainer", ctx), config.trainer);
  read_checkpoint(Section(root, "checkpoint", ctx), config.checkpoint);
  read_distributed(Section(root, "distributed", ctx), config.distributed);
  read_plugin_search(Section(root, "plugin_search", ctx), config);
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
