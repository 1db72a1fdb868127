#include "cli/assembly.h"

#include <dlfcn.h>
#include <malloc.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <algorithm>

#include <unistd.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/version.h>
#include <torch/optim/optimizer.h>

#include "baton/communicator.h"
#include "baton/components.h"
#include "components/build.h"
#include "optim/param_groups.h"
#include "engine/engine.h"
#include "trainer/init_checks.h"
#include "trainer/evaluator.h"  // default_loss_name

namespace fs = std::filesystem;

namespace baton {
namespace {

// OpenBLAS keeps a thread pool of its own, sized from OMP_NUM_THREADS or the core count, which at::set_num_threads
// does not reach: a rank told to use one thread would still run its matrix products on every core, against the
// other ranks, and the same run would round differently under a launcher that sets OMP_NUM_THREADS (torchrun) and
// one that does not. Looked up at run time, so a LibTorch on another BLAS needs nothing.
void set_blas_threads(int threads) {
  using Setter = void (*)(int);
  if (auto set = reinterpret_cast<Setter>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

// glibc gives a freed block above M_MMAP_THRESHOLD back to the kernel at once and trims the heap's free top beyond
// M_TRIM_THRESHOLD, both adaptive and small by default. A training step frees and allocates the same activations
// (megabytes each) every batch, so each allocation faulted its pages in again: about 10,000 page faults per convnet
// step, measured with /usr/bin/time, and most of a run's system time. Keeping up to 1 GiB of freed memory for reuse
// removes nearly all of them (the same Python loop: 1.58 M faults and 3.7 s of system time without, 0.11 M and
// 0.6 s with). A process-wide setting, like the thread counts beside it, so it is made here, for `baton` runs.
void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

std::string count_text(std::int64_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

}  // namespace

void check_machine(const RunConfig& config) {
  const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  if (config.settings.threads > cores)
    throw ConfigError(config.where("trainer.threads"), "trainer.threads",
                      "expected an integer in [0, " + std::to_string(cores) + "] (0 is one per core; this machine "
                      "has " + count_text(cores, "core") + "), got " + std::to_string(config.settings.threads));
  const std::string& device = config.settings.device;
  if (device.rfind("cuda", 0) == 0) {
    const std::int64_t gpus = at::hasCUDA() ? static_cast<std::int64_t>(at::getNumGPUs()) : 0;
    // "cuda" is cuda:LOCAL_RANK in a distributed run (0 alone).
    const std::string digits = device == "cuda" ? std::to_string(read_distributed_env().local_rank) : device.substr(5);
    const std::int64_t index = digits.size() > 9 ? std::numeric_limits<std::int64_t>::max() : std::stoll(digits);
    if (gpus == 0)
      throw ConfigError(config.where("trainer.device"), "trainer.device",
                        "\"" + device + "\" needs CUDA, but this baton's LibTorch " + TORCH_VERSION +
                            " finds none (a CPU-only build, as Debian's is, or no GPU driver): set device = \"cpu\"");
    if (index >= gpus)
      throw ConfigError(config.where("trainer.device"), "trainer.device",
                        "\"" + device + "\" needs CUDA device " + std::to_string(index) + ", but LibTorch sees " +
                            count_text(gpus, "device"));
  }
}

namespace {

std::vector<NamedMetric> build_metrics(const std::vector<ComponentSection>& sections, const std::string& key,
                                       const DataSpec& spec) {
  std::vector<NamedMetric> built;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const ComponentSection& metric = sections[i];
    const std::string entry = key + "[" + std::to_string(i) + "]";
    for (const auto& earlier : built)
      if (earlier.name == metric.name)
        throw ConfigError(metric.config.where("name"), entry,
                          "metric '" + metric.name + "' is listed twice (each is logged under its name)");
    built.push_back(NamedMetric{metric.name, build_component(components().metrics, metric, entry, spec)});
  }
  return built;
}

// An [[eval]] set: a split of its own dataset or of [data]'s, with its metrics ([data]'s when it names none; each
// set gets instances of its own, since a metric keeps running sums).
EvalSet build_eval_set(const RunConfig& config, std::size_t index, const DatasetSplits& run_data,
                       DatasetContext context) {
  const EvalEntry& entry = config.evals[index];
  const std::string key = "eval." + std::to_string(index);
  EvalSet set;
  set.name = entry.name;
  set.interval = entry.interval;
  const bool train_split = entry.split == "train";
  if (entry.own_data) {
    context.need_train = train_split;
    const DatasetSplits splits = build_component(components().datasets, entry.data, key + ".data", context);
    set.data = train_split ? splits.train : splits.eval;
  } else {
    set.data = train_split ? run_data.train : run_data.eval;
  }
  const std::string dataset = entry.own_data ? entry.data.name : config.data.name;
  if (!set.data || set.data->size() == 0)
    throw ConfigError(entry.own_data ? entry.data.config.where("name") : entry.where, key + ".split",
                      "dataset '" + dataset + "' has no " + entry.split + " split to evaluate" +
                          (train_split ? "" : " (split = \"train\" evaluates on its training samples)"));
  set.metrics = build_metrics(entry.metrics.empty() ? config.data.metrics : entry.metrics,
                              entry.metrics.empty() ? "data.metrics" : key + ".metrics", set.data->spec());
  return set;
}

}  // namespace

BuiltComponents build_components(const RunConfig& config, bool need_train) {
  const Components& registry = components();
  BuiltComponents built;
  DatasetContext context;
  context.seed = config.settings.seed;
  context.need_train = need_train;
  built.data = build_component(registry.datasets, config.data, "data", context);
  if (need_train && !built.data.train)
    throw ConfigError(config.where("data.name"), "data.name",
                      "dataset '" + config.data.name + "' gave no training split");
  if (!built.data.eval) built.data.eval = std::make_shared<TensorDataset>();
  const Dataset& reference = need_train ? *built.data.train : *built.data.eval;
  const DataSpec spec = reference.spec();
  if (need_train && config.settings.batch_size > built.data.train->size())
    throw ConfigError(config.where("data.batch_size"), "data.batch_size",
                      "expected at most the " + count_text(built.data.train->size(), "training sample") + " of " +
                          config.data.name + ", got " + std::to_string(config.settings.batch_size));
  built.model = build_component(registry.models, config.model, "model", spec);
  const std::vector<std::string> optimizer_keys = config.optimizer.config.keys();
  if (built.model.optimizers().empty()) {
    built.optimizer = build_component(registry.optimizers, config.optimizer, "optimizer",
                                      built.model.ptr()->parameters());
  } else if (!optimizer_keys.empty()) {
    // The model's own optimizers train it (a GAN's two): an [optimizer] table would be silently ignored.
    throw ConfigError(config.where("optimizer." + optimizer_keys.front()), "optimizer." + optimizer_keys.front(),
                      "model '" + config.model.name + "' brings its own optimizers, so [optimizer] would be " +
                          "ignored: remove the [optimizer] table (the model's keys set them)");
  }
  if (!config.param_groups.empty() && built.model.optimizers().empty()) {
    // The Trainer applies them; a glob that matches nothing is reported here, at its line.
    try {
      plan_param_groups(*built.model.ptr(), config.param_groups);
    } catch (const ParamGroupRuleError& e) {
      throw ConfigError(config.where("optimizer." + e.key()), "optimizer." + e.key(), e.detail());
    }
  }
  built.schedule = build_component(registry.schedulers, config.scheduler, "scheduler");
  const std::vector<std::string> loss_keys = config.loss.config.keys();
  if (built.model.loss() && !built.model.loss_replaceable()) {
    // The model computes its own loss (the trainer takes it): a [loss] table would be silently ignored.
    if (!loss_keys.empty())
      throw ConfigError(config.where("loss." + loss_keys.front()), "loss." + loss_keys.front(),
                        "model '" + config.model.name + "' computes its own loss, so [loss] would be ignored: " +
                            "remove the [loss] table");
  } else if (built.model.training_step() && loss_keys.empty() && !spec.has_targets()) {
    // A model that trains by its own step and data without targets: no loss to build (metrics evaluate it).
  } else if (!(built.model.loss() && loss_keys.empty())) {
    ComponentSection loss = config.loss;
    if (loss.name.empty()) {
      if (!spec.has_targets())
        throw ConfigError(config.where("data.name"), "data.name",
                          "dataset '" + config.data.name + "' has no targets (its fields: " + spec.field_names() +
                              "), so there is no default loss: name one in [loss] or use a model with its own");
      loss.name = default_loss_name(spec);
    }
    built.loss = build_component(registry.losses, loss, "loss", spec);
  }
  // Metrics measure the evaluation data (its spec; the training data's when there is none).
  const DataSpec eval_spec = built.data.eval->size() > 0 ? built.data.eval->spec() : spec;
  built.metrics = build_metrics(config.data.metrics, "data.metrics", eval_spec);
  for (std::size_t i = 0; i < config.evals.size(); ++i)
    built.eval_sets.push_back(build_eval_set(config, i, built.data, context));
  for (std::size_t i = 0; i < config.loggers.size(); ++i)
    built.loggers.push_back(
        build_component(registry.loggers, config.loggers[i], "loggers." + std::to_string(i)));
  return built;
}

PluginEntryError::PluginEntryError(const PluginEntry& entry, const std::string& reason)
    : PluginError(ConfigError(entry.key_where, entry.key, reason).what()),
      where_(entry.key_where),
      key_(entry.key),
      reason_(reason) {}

PluginEntryError::~PluginEntryError() = default;

std::vector<LoadedPlugin> load_plugins(const RunConfig& config, bool allow_insecure) {
  LoaderOptions loader_options;
  loader_options.search_paths = config.plugin_search_paths;
  loader_options.allow_insecure = allow_insecure || config.allow_insecure_plugins;
  PluginLoader loader(loader_options);
  std::vector<LoadedPlugin> plugins;
  std::map<std::string, int> seen;
  for (const auto& entry : config.plugins) {
    LoadedPlugin plugin;
    try {
      std::string path = entry.path.empty() ? loader.resolve(entry.name) : entry.path;
      plugin = loader.load(path, entry.config);
      if (!entry.name.empty() && plugin.info.name != entry.name)
        throw PluginError(path + " is plugin '" + plugin.info.name + "', but the config asks for '" + entry.name +
                          "'");
    } catch (const ConfigError&) {
      throw;  // a plugin's own key: already located
    } catch (const PluginError& e) {
      throw PluginEntryError(entry, e.what());
    }
    int count = ++seen[plugin.info.name];
    plugin.id = count == 1 ? plugin.info.name : plugin.info.name + "#" + std::to_string(count);
    plugins.push_back(std::move(plugin));
  }
  // A [[loggers]] name that no library loaded so far registered is looked for as a plugin file of that name (the
  // built-in csv.so and tensorboard.so), so a logger is picked by its name alone. A name with no such file is left
  // to build_components, whose error lists the registered loggers.
  for (std::size_t i = 0; i < config.loggers.size(); ++i) {
    const ComponentSection& logger = config.loggers[i];
    if (components().loggers.find(logger.name) != nullptr) continue;
    std::string path;
    try {
      path = loader.resolve(logger.name);
    } catch (const PluginError&) {
      continue;
    }
    try {
      loader.register_components(path);
    } catch (const PluginError& e) {
      throw ConfigError(logger.config.where("name"), "loggers." + std::to_string(i) + ".name", e.what());
    }
  }
  return plugins;
}

static void check_declared_weights(const std::vector<LoadedPlugin>& plugins, const std::string& device, int world_size,
                            const std::string& requested, const char* command) {
  if (requested.empty()) return;
  Declarations declared(device, world_size, requested);
  for (const auto& plugin : plugins)
    if (plugin.plugin) collect_declarations(*plugin.plugin, plugin.id, declared);
  check_weight_request(declared.weight_sets(), requested, command);
}

std::unique_ptr<Assembly> assemble_run(const RunConfig& config, const AssemblyOptions& options) {
  check_machine(config);
  auto run = std::make_unique<Assembly>();
  run->config = config;
  // torchrun's variables (set by `baton launch`) make this process one rank of a data-parallel run.
  DistributedEnv env = read_distributed_env();
  CommunicatorOptions comm_options;
  comm_options.backend = config.distributed.backend;
  const bool on_cuda = config.settings.device.rfind("cuda", 0) == 0;
  if (env.world_size > 1 && comm_options.backend == "nccl" && !on_cuda)
    throw ConfigError(SourceLocation{config.source, 0, 0}, "distributed.backend",
                      "\"nccl\" reduces CUDA tensors, but trainer.device is \"" + config.settings.device +
                          "\": set device = \"cuda\" (each rank then uses cuda:LOCAL_RANK) or backend = \"gloo\"");
  comm_options.timeout = std::chrono::seconds(config.distributed.timeout_seconds);
  std::shared_ptr<Communicator> communicator = Communicator::connect(env, comm_options);
  // LibTorch's own default can be a single thread on small VMs; "0" means one thread per core, shared by the ranks
  // on this machine.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int per_rank = std::max(1, static_cast<int>(cores) / std::max(1, env.local_world_size));
  const int threads = config.settings.threads > 0 ? static_cast<int>(config.settings.threads) : per_rank;
  at::set_num_threads(threads);
  set_blas_threads(threads);
  keep_freed_memory();
  // Model initialisation draws from the global generator: seeding it makes runs repeatable.
  at::manual_seed(config.settings.seed);

  // Plugins first: a plugin library may register the components the sections below name. What they declare is
  // known now, so a --weights request no plugin serves fails before any data or model is built.
  run->plugins = load_plugins(config, options.allow_insecure_plugins);
  check_declared_weights(run->plugins, config.settings.device, env.world_size, options.eval_weights,
                         options.standalone);
  BuiltComponents built = build_components(config);

  TrainerOptions t;
  static_cast<TrainerSettings&>(t) = config.settings;  // the config's settings are the Trainer's, checked alike
  // One GPU per rank on each machine, as torchrun's LOCAL_RANK means.
  if (communicator && t.device == "cuda") t.device = "cuda:" + std::to_string(env.local_rank);
  // The threads are set above, with BLAS's, for this rank's share of the cores: the Trainer leaves them so.
  t.threads = 0;
  if (options.write_run_dir) {
    run->run_dir = (fs::path(config.run.dir) / config.run.name).string();
    t.run_dir = run->run_dir;
  }
  t.resume = options.resume;
  t.config_text = config.resolved_text;
  t.logged_config_text = resolved_config_text(config);
  t.trace = options.trace;
  t.quiet = options.quiet;
  t.lr_schedule = std::move(built.schedule);
  t.loss = std::move(built.loss);
  t.metrics = std::move(built.metrics);
  t.eval_sets = std::move(built.eval_sets);
  t.eval_weights = options.eval_weights;
  t.communicator = std::move(communicator);
  t.units = config.distributed.units;
  t.init = config.model_init;
  t.param_groups = config.param_groups;
  t.keep_best = config.keep_best;
  t.loggers = std::move(built.loggers);
  if (config.settings.sharding != Sharding::none && built.optimizer) {
    // A sharded run's optimizer steps this rank's shard, which the Trainer makes: it builds the optimizer itself,
    // from the same section (the one built above checked [optimizer]'s keys and is not used).
    built.optimizer = nullptr;
    t.optimizer_factory = [section = config.optimizer](const std::vector<at::Tensor>& parameters) {
      return build_component(components().optimizers, section, "optimizer", parameters);
    };
  }

  run->trainer = std::make_unique<Trainer>(std::move(built.model), std::move(built.optimizer),
                                           std::move(built.data.train), std::move(built.data.eval), std::move(t));
  for (const auto& plugin : run->plugins)
    if (plugin.plugin) run->trainer->add_plugin(plugin.id, plugin.plugin);  // a components library has no object
  return run;
}

}  // namespace baton
