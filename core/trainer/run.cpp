#include "trainer/run.h"

#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <algorithm>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "data/dataset.h"
#include "baton/communicator.h"
#include "models/models.h"

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

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerSection& o,
                                                        const std::vector<at::Tensor>& parameters) {
  if (o.name == "sgd")
    return std::make_shared<torch::optim::SGD>(
        parameters, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  if (o.name == "adam")
    return std::make_shared<torch::optim::Adam>(parameters, torch::optim::AdamOptions(o.lr)
                                                                .betas({o.beta1, o.beta2})
                                                                .eps(o.eps)
                                                                .weight_decay(o.weight_decay));
  if (o.name == "adamw")
    return std::make_shared<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(o.lr)
                                                                 .betas({o.beta1, o.beta2})
                                                                 .eps(o.eps)
                                                                 .weight_decay(o.weight_decay));
  throw Error("unknown optimizer '" + o.name + "'");  // the config check makes this unreachable from TOML
}

std::pair<TensorDataset, TensorDataset> load_data(const DataSection& d, std::uint64_t seed) {
  if (d.dataset == "synthetic")
    return {make_synthetic_dataset(d.synthetic_train_size, seed, "synthetic/train"),
            make_synthetic_dataset(d.synthetic_eval_size, seed + 1, "synthetic/eval")};
  return {load_idx_dataset(d.path, /*train=*/true, d.train_subset, d.dataset),
          load_idx_dataset(d.path, /*train=*/false, d.eval_subset, d.dataset)};
}

std::string read_config_text(const RunConfig& config) {
  std::ifstream in(config.source);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::function<double(const Progress&)> make_lr_schedule(const SchedulerSection& scheduler) {
  if (scheduler.name == "constant" && scheduler.warmup.value() == 0) return nullptr;
  bool cosine = scheduler.name == "cosine";
  Time warmup = scheduler.warmup;
  double floor = scheduler.min_lr_ratio;
  return [cosine, warmup, floor](const Progress& p) {
    std::int64_t now = p.now.batch;
    std::int64_t warm = warmup.value() == 0 ? 0 : p.to_batches(warmup);
    // Linear warmup to the full rate over `warm` batches: batch b (0-based) trains at (b + 1) / warm.
    if (now < warm) return static_cast<double>(now + 1) / static_cast<double>(warm);
    if (!cosine) return 1.0;
    std::int64_t total = p.to_batches(p.max_duration);
    if (total <= warm) return 1.0;
    double t = static_cast<double>(now - warm) / static_cast<double>(total - warm);
    return floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, t)));
  };
}

std::vector<LoadedPlugin> load_plugins(const RunConfig& config, bool allow_insecure) {
  LoaderOptions loader_options;
  loader_options.search_paths = config.plugin_search_paths;
  loader_options.allow_insecure = allow_insecure || config.allow_insecure_plugins;
  PluginLoader loader(loader_options);
  std::vector<LoadedPlugin> plugins;
  std::map<std::string, int> seen;
  for (const auto& entry : config.plugins) {
    std::string path = entry.path.empty() ? loader.resolve(entry.name) : entry.path;
    LoadedPlugin plugin = loader.load(path, entry.config);
    if (!entry.name.empty() && plugin.info.name != entry.name)
      throw PluginError(path + " is plugin '" + plugin.info.name + "', but the config asks for '" + entry.name + "'");
    int count = ++seen[plugin.info.name];
    plugin.id = count == 1 ? plugin.info.name : plugin.info.name + "#" + std::to_string(count);
    plugins.push_back(std::move(plugin));
  }
  return plugins;
}

std::unique_ptr<Run> build_run(const RunConfig& config, const RunOptions& options) {
  auto run = std::make_unique<Run>();
  run->config = config;
  // torchrun's variables (set by `baton launch`) make this process one rank of a data-parallel run.
  DistributedEnv env = read_distributed_env();
  CommunicatorOptions comm_options;
  comm_options.backend = config.distributed.backend;
  const bool on_cuda = config.trainer.device.rfind("cuda", 0) == 0;
  if (env.world_size > 1 && comm_options.backend == "nccl" && !on_cuda)
    throw ConfigError(SourceLocation{config.source, 0, 0}, "distributed.backend",
                      "\"nccl\" reduces CUDA tensors, but trainer.device is \"" + config.trainer.device +
                          "\": set device = \"cuda\" (each rank then uses cuda:LOCAL_RANK) or backend = \"gloo\"");
  comm_options.timeout = std::chrono::seconds(config.distributed.timeout_seconds);
  std::shared_ptr<Communicator> communicator = Communicator::connect(env, comm_options);
  // LibTorch's own default can be a single thread on small VMs; "0" means one thread per core, shared by the ranks
  // on this machine.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int per_rank = std::max(1, static_cast<int>(cores) / std::max(1, env.local_world_size));
  const int threads = config.trainer.threads > 0 ? static_cast<int>(config.trainer.threads) : per_rank;
  at::set_num_threads(threads);
  set_blas_threads(threads);
  // Model initialisation draws from the global generator: seeding it makes runs repeatable.
  at::manual_seed(static_cast<std::uint64_t>(config.run.seed));

  run->plugins = load_plugins(config, options.allow_insecure_plugins);

  auto [train, eval] = load_data(config.data, static_cast<std::uint64_t>(config.run.seed));

  ModelSpec spec;
  spec.name = config.model.name;
  spec.widths = config.model.widths;
  torch::nn::AnyModule model = make_model(spec);
  auto optimizer = make_optimizer(config.optimizer, model.ptr()->parameters());

  TrainerOptions t;
  t.max_duration = config.trainer.max_duration;
  t.eval_interval = config.trainer.eval_interval;
  t.batch_size = config.data.batch_size;
  t.eval_batch_size = config.data.eval_batch_size;
  t.seed = static_cast<std::uint64_t>(config.run.seed);
  t.device = config.trainer.device;
  // One GPU per rank on each machine, as torchrun's LOCAL_RANK means.
  if (communicator && config.trainer.device == "cuda") t.device = "cuda:" + std::to_string(env.local_rank);
  if (options.write_run_dir) {
    run->run_dir = (fs::path(config.run.dir) / config.run.name).string();
    t.run_dir = run->run_dir;
    t.checkpoint_dir = config.checkpoint.dir;
  }
  t.save_interval = config.checkpoint.save_interval;
  t.keep_last = config.checkpoint.keep_last;
  t.resume = options.resume;
  t.config_text = read_config_text(config);
  t.trace = options.trace;
  t.quiet = options.quiet;
  t.progress = config.trainer.progress;
  t.log_interval = config.trainer.log_interval;
  t.lr_schedule = make_lr_schedule(config.scheduler);
  t.eval_weights = options.eval_weights;
  t.communicator = std::move(communicator);

  run->trainer = std::make_unique<Trainer>(std::move(model), std::move(optimizer), std::move(train), std::move(eval),
                                           std::move(t));
  for (const auto& plugin : run->plugins) run->trainer->add_plugin(plugin.id, plugin.plugin);
  return run;
}

}  // namespace baton
