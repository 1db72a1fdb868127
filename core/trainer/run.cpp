#include "trainer/run.h"

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
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/builtin_datasets.h"
#include "baton/communicator.h"
#include "baton/models.h"

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

std::string count_text(std::int64_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

std::int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
}

// The training samples the config's dataset holds, reading only file headers; a missing folder or file is an
// error at data.path.
std::int64_t training_samples(const RunConfig& config) {
  const DataSection& d = config.data;
  if (d.dataset == "synthetic") {
    // 1x28x28 float32 inputs: a size that cannot fit in memory fails here rather than in an allocation.
    constexpr std::int64_t kSampleBytes = 28 * 28 * 4;
    const std::int64_t memory = physical_memory_bytes();
    for (const auto& [key, size] : {std::pair<std::string, std::int64_t>{"data.synthetic_train_size",
                                                                          d.synthetic_train_size},
                                    {"data.synthetic_eval_size", d.synthetic_eval_size}})
      if (memory > 0 && size > memory / kSampleBytes)
        throw ConfigError(config.where(key), key,
                          "expected at most " + std::to_string(memory / kSampleBytes) + " (the samples that fit in "
                          "this machine's " + std::to_string(memory >> 20) + " MiB of memory), got " +
                          std::to_string(size));
    return d.synthetic_train_size;
  }
  std::error_code ec;
  if (!fs::is_directory(d.path, ec))
    throw ConfigError(config.where("data.path"), "data.path",
                      "no such folder: '" + d.path + "' (the " + d.dataset + " IDX files go there; Debian's "
                      "dataset-" + d.dataset + " package installs them in /usr/share/datasets/" + d.dataset + ")");
  try {
    idx_dataset_size(d.path, /*train=*/false, d.eval_subset);
    return idx_dataset_size(d.path, /*train=*/true, d.train_subset);
  } catch (const Error& e) {
    throw ConfigError(config.where("data.path"), "data.path", e.what());
  }
}

}  // namespace

void check_against_data_and_machine(const RunConfig& config) {
  const std::int64_t samples = training_samples(config);
  if (config.data.batch_size > samples)
    throw ConfigError(config.where("data.batch_size"), "data.batch_size",
                      "expected at most the " + count_text(samples, "training sample") + " of " +
                          config.data.dataset + ", got " + std::to_string(config.data.batch_size));
  const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  if (config.trainer.threads > cores)
    throw ConfigError(config.where("trainer.threads"), "trainer.threads",
                      "expected an integer in [0, " + std::to_string(cores) + "] (0 is one per core; this machine "
                      "has " + count_text(cores, "core") + "), got " + std::to_string(config.trainer.threads));
  const std::string& device = config.trainer.device;
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
  return plugins;
}

std::unique_ptr<Run> build_run(const RunConfig& config, const RunOptions& options) {
  check_against_data_and_machine(config);
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
  keep_freed_memory();
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
  t.microbatch_size = config.trainer.microbatch_size;
  t.precision = config.trainer.precision;
  t.lr_schedule = make_lr_schedule(config.scheduler);
  t.eval_weights = options.eval_weights;
  t.communicator = std::move(communicator);

  run->trainer = std::make_unique<Trainer>(std::move(model), std::move(optimizer), std::move(train), std::move(eval),
                                           std::move(t));
  for (const auto& plugin : run->plugins) run->trainer->add_plugin(plugin.id, plugin.plugin);
  return run;
}

}  // namespace baton
