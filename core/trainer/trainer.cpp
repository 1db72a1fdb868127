#include "baton/trainer.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/Reduction.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/file_util.h"
#include "checkpoint/optimizer_state.h"
#include "baton/safetensors.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "baton/communicator.h"
#include "engine/engine.h"
#include "logging/eval_plot.h"
#include "logging/metrics_history.h"
#include "logging/progress.h"
#include "logging/run_logger.h"
#include "trainer/step_metrics.h"

namespace fs = std::filesystem;

namespace baton {
namespace {

std::atomic<int> g_signal_count{0};

void on_stop_signal(int) {
  // Only async-signal-safe work here: count, and on the second signal leave at once.
  if (g_signal_count.fetch_add(1) >= 1) _exit(130);
}

std::string format_timestamp(const Timestamp& t) {
  return "ep " + std::to_string(t.epoch) + " ba " + std::to_string(t.batch);
}

std::string format_number(double value, int precision = 4) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(precision);
  out << value;
  return out.str();
}

bool is_zero(const Time& t) { return t.value() == 0; }

NamedTensors named_parameters(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

NamedTensors named_state(const torch::nn::Module& module) {
  NamedTensors out = named_parameters(module);
  for (const auto& item : module.named_buffers(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

// Collects the files plugins add to a checkpoint being written, and what they want run once it is committed.
class PendingCheckpoint final : public CheckpointInProgress {
 public:
  explicit PendingCheckpoint(std::string path) : path_(std::move(path)) {}
  const std::string& path() const override { return path_; }
  void add_tensors_file(const std::string& filename, const StateDict& content) override {
    if (filename.empty() || filename.find('/') != std::string::npos || filename == "state.safetensors" ||
        filename == "meta.json")
      throw Error("a plugin may not add checkpoint file '" + filename + "'");
    files.emplace_back(filename, content);
  }
  void after_commit(std::function<void(const std::string&)> fn) override { commit_hooks.push_back(std::move(fn)); }

  std::vector<std::pair<std::string, StateDict>> files;
  std::vector<std::function<void(const std::string&)>> commit_hooks;

 private:
  std::string path_;
};

TrainerOptions with_process_group(TrainerOptions options) {
  if (options.communicator) {
    options.rank = options.communicator->rank();
    options.world_size = options.communicator->world_size();
  }
  return options;
}

std::vector<at::Tensor> tensors_of(const NamedTensors& named) {
  std::vector<at::Tensor> out;
  for (const auto& item : named) out.push_back(item.second);
  return out;
}

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

std::string blas_description() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        auto base = fs::path(name).filename().string();
        if (base.rfind("libblas", 0) == 0 || base.rfind("libopenblas", 0) == 0 || base.rfind("libmkl_rt", 0) == 0) {
          std::error_code ec;
          auto real = fs::canonical(name, ec);
          *static_cast<std::string*>(data) = ec ? name : real.string();
          return 1;
        }
        return 0;
      },
      &found);
  if (found.empty()) return "unknown (no BLAS library loaded)";
  if (found.find("openblas") != std::string::npos) return "OpenBLAS (" + found + ")";
  if (found.find("mkl") != std::string::npos) return "MKL (" + found + ")";
  if (found.find("blis") != std::string::npos) return "BLIS (" + found + ")";
  if (found.find("atlas") != std::string::npos) return "ATLAS (" + found + ")";
  return "reference BLAS, slow: install libopenblas0-pthread (" + found + ")";
}

struct Trainer::Impl {
  Impl(torch::nn::AnyModule model_in, std::shared_ptr<torch::optim::Optimizer> optimizer_in, TensorDataset train_in,
       TensorDataset eval_in, TrainerOptions options_in)
      : options(std::move(options_in)),
        model(std::move(model_in)),
        module(model.ptr()),
        optimizer(std::move(optimizer_in)),
        train(std::move(train_in)),
        eval(std::move(eval_in)),
        sampler(SamplerOptions{train.size(), options.batch_size, /*shuffle=*/true, /*drop_last=*/false,
                               options.seed, options.rank, options.world_size}) {
    if (!optimizer) throw Error("the trainer needs an optimizer");
    state.device = options.device;
    state.eval_weights = options.eval_weights;
    state.rank = options.rank;
    state.world_size = options.world_size;
    state.seed = options.seed;
    state.communicator = options.communicator;
    state.run_dir = options.run_dir;
    state.model = module.get();
    state.optimizer = optimizer.get();
    state.progress.max_duration = options.max_duration;
    state.progress.batches_per_epoch = sampler.batches_per_epoch();
    // Progress counts the samples of all ranks: every rank's share of an epoch is the same size.
    state.progress.samples_per_epoch = sampler.samples_per_epoch() * options.world_size;

    RunLoggerOptions log_options;
    if (!options.run_dir.empty()) log_options.metrics_path = metrics_path();
    log_options.quiet = options.quiet;
    log_options.rank = options.rank;
    logger = std::make_unique<RunLogger>(state, log_options);
    engine = std::make_unique<Engine>(state, *logger);
    if (options.trace)
      engine->set_trace([this](const std::string& line) {
        if (options.rank == 0) std::fprintf(stderr, "trace: %s\n", line.c_str());
      });
    if (!options.run_dir.empty()) {
      std::string dir = options.checkpoint_dir.empty() ? (fs::path(options.run_dir) / "checkpoints").string()
                                                       : options.checkpoint_dir;
      store = std::make_unique<CheckpointStore>(dir, options.keep_last);
    }
    module->to(at::Device(options.device));
    for (auto& group : optimizer->param_groups()) base_lrs.push_back(group.options().get_lr());
  }

  std::string metrics_path() const { return (fs::path(options.run_dir) / "metrics.jsonl").string(); }

  // --- events --------------------------------------------------------------------------------------------------

  void fire(Event event) { engine->fire(event); }

  void ensure_init() {
    if (initialised) return;
    initialised = true;
    fire(Event::init);
  }

  // --- checkpoints ---------------------------------------------------------------------------------------------

  CheckpointData capture(const std::vector<std::pair<std::string, StateDict>>& extra_files) {
    CheckpointData data;
    data.timestamp = state.progress.now;
    data.config_text = options.config_text;

    StateDict model_state;
    for (auto& [name, tensor] : named_state(*module)) model_state.set_tensor(name, tensor.detach());
    data.sections.emplace_back("model", std::move(model_state));
    data.sections.emplace_back("optimizer", export_optimizer_state(*optimizer, named_parameters(*module)));

    StateDict trainer_state;
    trainer_state.set_int("seed", static_cast<std::int64_t>(options.seed));
    trainer_state.set_int("world_size", options.world_size);
    trainer_state.set_int("batch_size", options.batch_size);
    trainer_state.set_string("max_duration", options.max_duration.str());
    {
      auto generator = at::globalContext().defaultGenerator(at::kCPU);
      std::lock_guard<std::mutex> lock(generator.mutex());
      trainer_state.set_tensor("rng/cpu", generator.get_state());
    }
    for (const auto& [name, value] : state.metrics) trainer_state.set_double("metric/" + name, value);
    data.sections.emplace_back("trainer", std::move(trainer_state));

    for (const auto& [id, plugin] : plugins) {
      StateDict plugin_state;
      call_plugin([&] { plugin->state_dict(plugin_state); },
                  [&] { return "plugin '" + id + "' failed to save its state (state_dict)"; });
      data.sections.emplace_back("plugin/" + id, std::move(plugin_state));
    }
    data.files = extra_files;
    return data;
  }

  std::string checkpoint_name(TimeUnit unit) const {
    const auto& now = state.progress.now;
    if (unit == TimeUnit::epoch && now.batch_in_epoch == 0) return "ep" + std::to_string(now.epoch);
    return "ba" + std::to_string(now.batch);
  }

  // Fires a checkpoint event; when `save` is set, plugins may add files to the checkpoint, which is then written.
  void checkpoint_event(Event event, bool save, TimeUnit unit) {
    if (!save || !store) {
      fire(event);
      return;
    }
    PendingCheckpoint pending((fs::path(store->dir()) / checkpoint_name(unit)).string());
    state.checkpoint = &pending;
    try {
      fire(event);
    } catch (...) {
      state.checkpoint = nullptr;
      throw;
    }
    state.checkpoint = nullptr;
    write_checkpoint(checkpoint_name(unit), pending.files, pending.commit_hooks);
  }

  void write_checkpoint(const std::string& name, const std::vector<std::pair<std::string, StateDict>>& files,
                        const std::vector<std::function<void(const std::string&)>>& hooks) {
    // Every rank captures, since a plugin's state may need a collective (a sharded EMA gathers), and keeps the
    // same record of the save, so all ranks make the same decisions after it; rank 0 alone writes.
    auto started = std::chrono::steady_clock::now();
    CheckpointData data = capture(files);
    last_save_batch = state.progress.now.batch;
    state.last_checkpoint = (fs::path(store->dir()) / name).string();
    if (options.rank != 0) return;
    std::string path = store->save(name, data);
    state.last_checkpoint = path;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!options.quiet) logger->info("checkpoint " + path + " (" + format_number(seconds, 2) + " s)");
    for (const auto& hook : hooks) {
      try {
        call_plugin([&] { hook(path); }, [&] { return "after saving " + path; });
      } catch (const std::exception& e) {
        logger->warn(e.what());
      }
    }
  }

  void restore_model(const CheckpointData& data, const std::string& path) {
    const StateDict* saved = data.section("model");
    if (!saved) throw CheckpointError("checkpoint " + path + " has no model section");
    c10::NoGradGuard no_grad;
    auto expected = named_state(*module);
    for (auto& [name, tensor] : expected) {
      if (!saved->has_tensor(name))
        throw CheckpointError("checkpoint " + path + ": model tensor '" + name + "' is missing");
      at::Tensor value = saved->tensor(name);
      if (value.sizes() != tensor.sizes() || value.scalar_type() != tensor.scalar_type()) {
        std::ostringstream msg;
        msg << "checkpoint " << path << ": model tensor '" << name << "' is " << value.scalar_type()
            << value.sizes() << " in the checkpoint but " << tensor.scalar_type() << tensor.sizes()
            << " in the model";
        throw CheckpointError(msg.str());
      }
      tensor.copy_(value);
    }
    if (saved->tensor_keys().size() != expected.size()) {
      for (const auto& key : saved->tensor_keys()) {
        bool known = false;
        for (const auto& item : expected) known = known || item.first == key;
        if (!known)
          throw CheckpointError("checkpoint " + path + ": tensor '" + key + "' does not belong to this model");
      }
    }
  }

  void load(const std::string& path, bool with_training_state) {
    fire(Event::before_load);
    CheckpointData data = load_checkpoint(path);
    restore_model(data, path);
    if (with_training_state) {
      std::int64_t saved_world = options.world_size, saved_batch = options.batch_size;
      std::string saved_duration;
      if (const StateDict* saved = data.section("optimizer")) {
        try {
          import_optimizer_state(*optimizer, named_parameters(*module), *saved);
        } catch (const CheckpointError& e) {
          throw CheckpointError("checkpoint " + path + ": " + e.what());
        }
      }
      if (const StateDict* saved = data.section("trainer")) {
        if (saved->has("seed") && saved->get_int("seed") != static_cast<std::int64_t>(options.seed))
          logger->warn("checkpoint " + path + " was written with seed " + std::to_string(saved->get_int("seed")) +
                       ", this run uses " + std::to_string(options.seed) + ": the data order will differ");
        if (saved->has_tensor("rng/cpu")) {
          auto generator = at::globalContext().defaultGenerator(at::kCPU);
          std::lock_guard<std::mutex> lock(generator.mutex());
          generator.set_state(saved->tensor("rng/cpu"));
        }
        for (const auto& key : saved->keys())
          if (key.rfind("metric/", 0) == 0) state.metrics[key.substr(7)] = saved->get_double(key);
        if (saved->has("world_size")) saved_world = saved->get_int("world_size");
        if (saved->has("batch_size")) saved_batch = saved->get_int("batch_size");
        if (saved->has("max_duration")) saved_duration = saved->get_string("max_duration");
      }
      state.progress.now = data.timestamp;
      last_save_batch = data.timestamp.batch;
      if (saved_world != options.world_size || saved_batch != options.batch_size)
        continue_at_new_scale(path, saved_world, saved_batch);
      if (!saved_duration.empty() && saved_duration != options.max_duration.str())
        continue_to_new_duration(path, saved_duration);
    }
    for (const auto& [id, plugin] : plugins) {
      const StateDict* saved = data.section("plugin/" + id);
      call_plugin([&] { plugin->load_state_dict(saved ? *saved : StateDict()); },
                  [&] { return "plugin '" + id + "' failed to load its state (load_state_dict) from " + path; });
    }
    for (const auto& [name, section] : data.sections) {
      if (name.rfind("plugin/", 0) != 0) continue;
      std::string id = name.substr(7);
      bool present = false;
      for (const auto& p : plugins) present = present || p.first == id;
      if (!present) logger->warn("checkpoint " + path + " holds state of plugin '" + id + "', which this run does not use");
    }
    state.last_checkpoint = path;
    fire(Event::after_load);
  }

  // A checkpoint written at another world size or per-rank batch size. Every world size draws the same seeded
  // order for an epoch, and k global batches of B x W samples cover its first k x B x W samples whatever W is, so
  // the position within the epoch carries over through the samples seen; only when they are not a whole number
  // of the new global batches are a few of them trained again.
  void continue_at_new_scale(const std::string& path, std::int64_t saved_world, std::int64_t saved_batch) {
    Timestamp& now = state.progress.now;
    const std::int64_t global = options.batch_size * options.world_size;
    logger->info("checkpoint " + path + " was written by " + std::to_string(saved_world) + " rank(s) at batch size " +
                 std::to_string(saved_batch) + "; continuing with " + std::to_string(options.world_size) +
                 " at batch size " + std::to_string(options.batch_size) + " (global batch " +
                 std::to_string(saved_world * saved_batch) + " -> " + std::to_string(global) + ")");
    if (now.batch_in_epoch == 0) return;
    const std::int64_t seen = now.sample_in_epoch, kept = seen / global * global;
    if (kept != seen)
      logger->warn("resuming mid-epoch with another global batch: " + std::to_string(seen - kept) + " of the " +
                   std::to_string(seen) + " samples epoch " + std::to_string(now.epoch) +
                   " had seen are trained again (resume from an epoch checkpoint to avoid this)");
    now.batch_in_epoch = kept / global;
    now.sample -= seen - kept;
    now.sample_in_epoch = kept;
  }

  // A checkpoint written by a run of another max_duration. The lr schedule is a function of the run's length, so
  // the resumed run continues on the curve of its own length, which is what extending a run asks for; when that
  // moves the learning rate, the warning says from what to what.
  void continue_to_new_duration(const std::string& path, const std::string& saved_text) {
    const std::string change = "checkpoint " + path + " was written by a run of max_duration " + saved_text +
                               "; this run has max_duration " + options.max_duration.str();
    std::optional<Time> saved;
    try {
      saved = Time::parse(saved_text);
    } catch (const TimeError&) {
      // Not a time this baton reads: the change is still worth saying, without the lr.
    }
    if (saved && options.lr_schedule && !base_lrs.empty()) {
      Progress before = state.progress;
      before.max_duration = *saved;
      const double lr_before = base_lrs.front() * options.lr_schedule(before);
      const double lr_now = base_lrs.front() * options.lr_schedule(state.progress);
      if (lr_before != lr_now) {
        std::ostringstream lrs;
        lrs << "; the learning-rate schedule follows the new length: the lr at " << format_timestamp(state.progress.now)
            << " is " << lr_now << " instead of " << lr_before;
        logger->warn(change + lrs.str());
        return;
      }
    }
    logger->info(saved ? change + " (the learning rate at this point is unchanged)" : change);
  }

  void resume() {
    if (options.resume.empty()) return;
    std::string path = options.resume;
    if (path == "auto") {
      if (!store) throw Error("--resume auto needs a run folder");
      // The folders skipped on the way are reported also when a newer-format checkpoint stops the search.
      std::vector<std::string> warnings;
      std::optional<CheckpointInfo> newest;
      std::exception_ptr refused;
      try {
        newest = store->newest_valid(warnings);
      } catch (const CheckpointError&) {
        refused = std::current_exception();
      }
      for (const auto& w : warnings) logger->warn(w);
      if (refused) std::rethrow_exception(refused);
      if (!newest) {
        logger->info("no checkpoint to resume from in " + store->dir() + ": starting fresh");
        return;
      }
      path = newest->path;
    }
    load(path, /*with_training_state=*/true);
    logger->info("resumed from " + path + " at " + format_timestamp(state.progress.now));
    // The end-of-run table and chart cover the whole run: the evaluations before this point are in metrics.jsonl.
    if (options.rank == 0 && !options.run_dir.empty())
      for (auto& logged : read_logged_evaluations(metrics_path(), state.progress.now.batch))
        evals.push_back(EvalRecord{logged.at, std::move(logged.metrics)});
  }

  // --- data parallel (no-ops in a single process) -------------------------------------------------------------

  Communicator* comm() const { return options.communicator.get(); }

  // Every rank starts from rank 0's weights, whatever each initialised or loaded.
  void broadcast_model() {
    if (!comm()) return;
    c10::NoGradGuard no_grad;
    comm()->broadcast(tensors_of(named_state(*module)));
  }

  // Buffers (e.g. batch-norm statistics) are not trained by gradients: rank 0's are used everywhere, as DDP does.
  void broadcast_buffers() {
    if (!comm() || module->buffers().empty()) return;
    c10::NoGradGuard no_grad;
    comm()->broadcast(module->buffers());
  }

  void average_gradients() {
    if (!comm()) return;
    std::vector<at::Tensor> grads;
    for (const auto& p : module->parameters()) grads.push_back(p.grad());
    comm()->average(grads);
  }

  // --- evaluation ----------------------------------------------------------------------------------------------

  at::Tensor compute_loss(const at::Tensor& output, const at::Tensor& target) {
    if (options.loss) return options.loss(output, target);
    return default_loss(output, target);
  }

  // The step's data leaves State once its window closes (batch_end, eval_batch_end), so no event outside the
  // window sees a stale batch, and the tensors are freed before evaluation and checkpoints.
  void clear_step_data() {
    state.batch = Batch();
    state.outputs = at::Tensor();
    state.loss = at::Tensor();
  }

  // One pass over the evaluation set with the weights the model holds now (plugins may have swapped them at
  // eval_start), fired as eval_start … eval_end with state.eval_label = label.
  EvalResult evaluation_pass(const std::string& label) {
    at::Device device(options.device);
    state.eval_label = label;
    // What plugins log during the pass (eval_start … eval_end) is printed on the pass's line.
    logger->begin_capture();
    fire(Event::eval_start);
    bool was_training = module->is_training();
    module->eval();
    auto started = std::chrono::steady_clock::now();
    double loss_sum = 0;
    std::int64_t correct = 0, seen = 0;
    {
      c10::NoGradGuard no_grad;
      // Each rank evaluates its contiguous share; the sums are reduced below.
      const std::int64_t shard_begin = eval.size() * options.rank / options.world_size;
      const std::int64_t n = eval.size() * (options.rank + 1) / options.world_size;
      for (std::int64_t begin = shard_begin; begin < n; begin += options.eval_batch_size) {
        std::int64_t end = std::min(n, begin + options.eval_batch_size);
        state.batch.inputs = eval.inputs.slice(0, begin, end).to(device);
        state.batch.targets = eval.targets.slice(0, begin, end).to(device);
        fire(Event::eval_batch_start);
        fire(Event::eval_before_forward);
        state.outputs = model.forward(state.batch.inputs);
        fire(Event::eval_after_forward);
        loss_sum += compute_loss(state.outputs, state.batch.targets).item<double>() * static_cast<double>(end - begin);
        correct += count_correct(state.outputs, state.batch.targets);
        seen += end - begin;
        fire(Event::eval_batch_end);
        clear_step_data();
      }
    }
    if (was_training) module->train();
    if (comm()) {
      auto sums = comm()->sum({loss_sum, static_cast<double>(correct), static_cast<double>(seen)});
      loss_sum = sums[0];
      correct = static_cast<std::int64_t>(std::llround(sums[1]));
      seen = static_cast<std::int64_t>(std::llround(sums[2]));
    }
    EvalResult result;
    result.label = label;
    result.samples = seen;
    result.loss = seen ? loss_sum / static_cast<double>(seen) : 0;
    result.accuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0;
    logger->log_metric(label + "/loss", result.loss);
    logger->log_metric(label + "/accuracy", result.accuracy);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    fire(Event::eval_end);
    std::string plugin_metrics;
    for (const auto& [name, value] : logger->end_capture())
      if (name != label + "/loss" && name != label + "/accuracy")
        plugin_metrics += "  " + name + " " + format_number(value);
    if (!options.quiet)
      logger->info("[" + format_timestamp(state.progress.now) + "] " + label + ": loss " + format_number(result.loss) +
                   "  accuracy " + format_number(result.accuracy) + plugin_metrics + "  (" + std::to_string(seen) +
                   " samples, " + format_number(seconds, 1) + " s)");
    return result;
  }

  // Every pass in state.eval_labels between eval_before_all and eval_after_all.
  std::vector<EvalResult> run_evaluations() {
    fire(Event::eval_before_all);
    std::vector<EvalResult> results;
    std::vector<std::string> labels = state.eval_labels;  // a plugin changing the list mid-evaluation affects the next
    for (const auto& label : labels) results.push_back(evaluation_pass(label));
    state.eval_label.clear();
    fire(Event::eval_after_all);
    logger->flush();
    return results;
  }

  void evaluate_in_fit() {
    auto before = state.metrics;
    run_evaluations();
    // The record keeps every metric logged during the evaluation, so plugins' eval metrics show in the summary.
    EvalRecord record;
    record.at = state.progress.now;
    for (const auto& [name, value] : state.metrics) {
      auto it = before.find(name);
      bool is_eval_metric = name.rfind("eval", 0) == 0;
      if (is_eval_metric || it == before.end() || it->second != value) record.metrics[name] = value;
    }
    // A run resumed at its very end evaluates again where its history's last evaluation was: one row per point.
    if (!evals.empty() && evals.back().at.batch == record.at.batch) evals.pop_back();
    evals.push_back(std::move(record));
    last_eval_batch = state.progress.now.batch;
  }

  // --- schedule ------------------------------------------------------------------------------------------------

  // As in Composer: intervals in ba and dur are checked after batch_end, intervals in ep after epoch_end (so an
  // algorithm acting at epoch_end, such as an EMA updated per epoch, is seen by that evaluation); either way the
  // evaluation comes before the checkpoint event.
  bool eval_due_after_batch(double fraction_before) const {
    const Time& every = options.eval_interval;
    if (is_zero(every) || eval.size() == 0) return false;
    const auto& now = state.progress.now;
    switch (every.unit()) {
      case TimeUnit::batch: return now.batch % every.count() == 0;
      case TimeUnit::duration: {
        double after = state.progress.fraction();
        // Due whenever the run crosses a multiple of the interval (the small slack absorbs rounding).
        return std::floor(after / every.value() + 1e-9) > std::floor(fraction_before / every.value() + 1e-9);
      }
      default: return false;
    }
  }

  bool evaluations_enabled() const { return !is_zero(options.eval_interval) && eval.size() > 0; }
  bool saves_enabled() const { return store && !is_zero(options.save_interval); }

  // Whether the end of epoch number `epoch` (1-based: the count once it has ended) evaluates / saves.
  bool eval_due_at_epoch(std::int64_t epoch) const {
    const Time& every = options.eval_interval;
    return evaluations_enabled() && every.unit() == TimeUnit::epoch && epoch % every.count() == 0;
  }
  bool save_due_at_epoch(std::int64_t epoch) const {
    const Time& every = options.save_interval;
    return saves_enabled() && every.unit() == TimeUnit::epoch && epoch % every.count() == 0;
  }

  bool save_due_after_batch() const {
    const Time& every = options.save_interval;
    return store && !is_zero(every) && every.unit() == TimeUnit::batch &&
           state.progress.now.batch % every.count() == 0;
  }


  void apply_lr_schedule() {
    if (!options.lr_schedule) return;
    double factor = options.lr_schedule(state.progress);
    auto& groups = optimizer->param_groups();
    for (std::size_t i = 0; i < groups.size() && i < base_lrs.size(); ++i)
      groups[i].options().set_lr(base_lrs[i] * factor);
  }

  // --- training ------------------------------------------------------------------------------------------------

  bool stop_now() {
    if (g_signal_count.load() > 0 && !state.stop_requested()) state.request_stop(kInterruptedReason);
    if (external_stop.load() && !state.stop_requested()) state.request_stop(external_stop_reason);
    // Every rank calls this at the same points, so agreeing here makes all ranks stop after the same batch. A
    // signal reaches the ranks one after another: the ranks agree on whether any had one, so a rank that is
    // asked a moment before its own signal lands still reports the interrupt (and exits 130).
    if (comm()) {
      const bool interrupted = state.stop_requested() && state.stop_reason() == kInterruptedReason;
      const auto counts = comm()->sum({state.stop_requested() ? 1.0 : 0.0, interrupted ? 1.0 : 0.0});
      if (counts[1] > 0 && !state.stop_requested())
        state.request_stop(kInterruptedReason);
      else if (counts[0] > 0 && !state.stop_requested())
        state.request_stop("another rank stopped");
    }
    return state.stop_requested();
  }

  void log_train_loss(const at::Tensor& loss_sum, std::int64_t count) {
    if (count == 0) return;
    double sum = loss_sum.item<double>();
    double total = static_cast<double>(count);
    if (comm()) {
      auto sums = comm()->sum({sum, total});
      sum = sums[0];
      total = sums[1];
    }
    double mean = sum / total;
    logger->log_metric("train/loss", mean);
    logger->log_metric("lr", optimizer->param_groups().front().options().get_lr());
    logger->flush();
    last_loss = mean;
  }

  // What the progress bar shows beside the count: the loss once this process has logged one, nothing before.
  std::vector<std::pair<std::string, double>> bar_metrics() const {
    if (!last_loss) return {};
    return {{"loss", *last_loss}};
  }

  // Forward, loss and backward of one step on State's data, firing before_forward … after_backward. Each value is
  // read back from State after the events that may replace it (Composer's state.batch, state.outputs, state.loss),
  // so a plugin's inputs, targets, outputs or loss term take effect.
  at::Tensor step_once() {
    fire(Event::before_forward);
    state.outputs = model.forward(state.batch.inputs);
    fire(Event::after_forward);
    fire(Event::before_loss);
    state.loss = compute_loss(state.outputs, state.batch.targets);
    fire(Event::after_loss);
    fire(Event::before_backward);
    return state.loss;
  }

  // The batch's forward and backward passes; returns the loss backpropagated, detached. With microbatch_size set
  // (Composer's device_train_microbatch_size) the batch is split: before_forward … after_backward fire per
  // microbatch with that microbatch on State, and each microbatch's loss is weighted by its share of the batch, so
  // the accumulated gradients are those of the whole batch's mean loss. After the last one State holds the whole
  // batch again, the outputs of all microbatches and the weighted sum of their losses.
  at::Tensor forward_backward() {
    const std::int64_t n = state.batch.inputs.size(0);
    const std::int64_t step = options.microbatch_size;
    if (step <= 0 || step >= n) {
      const at::Tensor loss = step_once();
      loss.backward();
      fire(Event::after_backward);
      return loss.detach();
    }
    const Batch whole = state.batch;
    std::vector<at::Tensor> outputs;
    at::Tensor total;
    for (std::int64_t begin = 0; begin < n; begin += step) {
      const std::int64_t end = std::min(n, begin + step);
      state.batch = Batch{whole.inputs.slice(0, begin, end), whole.targets.slice(0, begin, end)};
      const at::Tensor weighted = step_once() * (static_cast<double>(end - begin) / static_cast<double>(n));
      weighted.backward();
      fire(Event::after_backward);
      outputs.push_back(state.outputs.detach());
      total = total.defined() ? total + weighted.detach() : weighted.detach();
    }
    state.batch = whole;
    state.outputs = at::cat(outputs);
    state.loss = total;
    return total;
  }

  void train_epoch(at::Device device) {
    auto& now = state.progress.now;
    const std::int64_t batches = sampler.batches_per_epoch();
    const std::int64_t log_every = std::max<std::int64_t>(1, options.log_interval.count());
    if (now.batch_in_epoch == 0) {
      fire(Event::iteration_start);
      fire(Event::epoch_start);
    }
    std::optional<ProgressBar> bar;
    if (!options.quiet && options.rank == 0) {
      ProgressOptions p;
      p.label = "epoch " + std::to_string(now.epoch + 1);
      if (options.max_duration.unit() == TimeUnit::epoch)
        p.label += "/" + std::to_string(options.max_duration.count());
      p.total = batches;
      p.terminal = options.progress && is_terminal(stderr);
      p.plain_every = log_every;
      p.initial = now.batch_in_epoch;  // a resumed epoch: rate and ETA count only the steps run now
      bar.emplace(p);
    }
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    std::int64_t loss_count = 0;

    while (now.batch_in_epoch < batches && !state.progress.reached(options.max_duration) && !stop_now()) {
      double fraction_before = state.progress.fraction();
      fire(Event::before_dataloader);
      std::int64_t drawn = 0;  // time counts the samples drawn, whatever a plugin makes of the batch on State
      {
        Batch batch = gather_batch(train, sampler.batch_indices(now.epoch, now.batch_in_epoch));
        drawn = batch.size();
        state.batch = Batch{batch.inputs.to(device), batch.targets.to(device)};
      }
      fire(Event::after_dataloader);
      fire(Event::batch_start);
      apply_lr_schedule();
      fire(Event::before_train_batch);
      optimizer->zero_grad();
      broadcast_buffers();
      const at::Tensor loss = forward_backward();
      average_gradients();
      // As in Composer, after_train_batch comes before the step: its plugins see the whole batch's gradients,
      // averaged across ranks (gradient clipping acts here).
      fire(Event::after_train_batch);
      optimizer->step();

      now.batch += 1;
      now.batch_in_epoch += 1;
      now.sample += drawn * options.world_size;
      now.sample_in_epoch += drawn * options.world_size;
      loss_sum.add_(loss.detach());
      loss_count += 1;
      bool epoch_ends = now.batch_in_epoch == batches;
      if (now.batch % log_every == 0 || epoch_ends) {
        log_train_loss(loss_sum, loss_count);
        loss_sum.zero_();
        loss_count = 0;
      }
      if (bar) bar->update(now.batch_in_epoch, bar_metrics());

      fire(Event::batch_end);
      clear_step_data();
      bool stopping = stop_now();
      // The run's last batch always ends with an evaluation and a checkpoint, taken through the usual events (so
      // plugins see them: exports, checkpoint selection) unless the epoch end right after takes them anyway.
      bool final_batch = stopping || state.progress.reached(options.max_duration);
      bool epoch_evaluates = epoch_ends && eval_due_at_epoch(now.epoch + 1);
      bool epoch_saves = epoch_ends && save_due_at_epoch(now.epoch + 1);
      if (eval_due_after_batch(fraction_before) || (final_batch && evaluations_enabled() && !epoch_evaluates)) {
        if (bar) bar->finish(bar_metrics());
        evaluate_in_fit();
      }
      bool save = save_due_after_batch() || (final_batch && saves_enabled() && !epoch_saves);
      checkpoint_event(Event::batch_checkpoint, save, TimeUnit::batch);
      if (stopping) break;
    }
    if (bar) bar->finish(bar_metrics());
    if (now.batch_in_epoch == batches) {
      now.epoch += 1;
      now.iteration += 1;
      now.batch_in_epoch = 0;
      now.sample_in_epoch = 0;
      fire(Event::epoch_end);
      if (eval_due_at_epoch(now.epoch)) evaluate_in_fit();
      checkpoint_event(Event::epoch_checkpoint, save_due_at_epoch(now.epoch), TimeUnit::epoch);
      fire(Event::iteration_end);
      fire(Event::iteration_checkpoint);
    }
  }

  FitResult fit() {
    if (train.size() == 0) throw Error("the training set is empty");
    auto started = std::chrono::steady_clock::now();
    at::Device device(options.device);
    FitResult result;
    std::exception_ptr failure;
    try {
      ensure_init();
      resume();
      broadcast_model();
      fire(Event::fit_start);
      module->train();
      while (!state.progress.reached(options.max_duration) && !stop_now()) train_epoch(device);
      stop_now();
      // The last batch normally took the final evaluation and checkpoint (see train_epoch). A run that ends with
      // no batch at all (resumed at its end) or stopped outside batch_end still gets them here, without events.
      if (evaluations_enabled() && last_eval_batch != state.progress.now.batch) evaluate_in_fit();
      if (saves_enabled() && last_save_batch != state.progress.now.batch)
        write_checkpoint(checkpoint_name(options.save_interval.unit()), {}, {});
    } catch (...) {
      failure = std::current_exception();
      clear_step_data();  // a batch that failed half-way leaves nothing on State for fit_end
    }
    finish(failure);
    result.end = state.progress.now;
    result.evals = evals;
    result.stop_reason = state.stop_requested() ? state.stop_reason() : "";
    result.last_checkpoint = state.last_checkpoint;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
  }

  // fit_end and close run on every exit path; their own errors are reported without hiding the first one.
  void finish(std::exception_ptr failure) {
    try {
      if (!engine->closed()) fire(Event::fit_end);
    } catch (const std::exception& e) {
      if (!failure) failure = std::current_exception();
      else logger->warn(e.what());
    }
    if (options.rank == 0 && !options.run_dir.empty()) {
      try {
        if (!failure) export_model();
        write_accuracy_plot();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    }
    for (const auto& message : engine->close()) logger->warn(message);
    logger->flush();
    if (failure) std::rethrow_exception(failure);
  }

  // <run_dir>/eval_accuracy.svg: every "<pass>/accuracy" metric over the evaluations, e.g. EMA against raw weights.
  void write_accuracy_plot() {
    std::vector<PlotSeries> series;
    for (const auto& record : evals)
      for (const auto& [name, value] : record.metrics) {
        if (name.size() < 9 || name.compare(name.size() - 9, 9, "/accuracy") != 0) continue;
        auto it = std::find_if(series.begin(), series.end(), [&](const PlotSeries& s) { return s.label == name; });
        if (it == series.end()) it = series.insert(series.end(), PlotSeries{name, {}});
        it->points.emplace_back(static_cast<double>(record.at.batch), value);
      }
    if (series.empty()) return;
    PlotOptions plot;
    plot.title = "evaluation accuracy";
    plot.y_label = "accuracy";
    fs::create_directories(options.run_dir);
    write_line_chart_svg((fs::path(options.run_dir) / "eval_accuracy.svg").string(), series, plot);
  }

  void export_model() {
    fs::create_directories(options.run_dir);
    auto path = fs::path(options.run_dir) / "model.safetensors";
    auto temporary = path;
    temporary += ".tmp";
    std::map<std::string, std::string> metadata{{"format", "pt"},
                                                {"baton.timestamp", format_timestamp(state.progress.now)}};
    write_safetensors(temporary.string(), named_state(*module), metadata);
    fs::rename(temporary, path);
    fsync_path(options.run_dir);
  }

  std::vector<EvalResult> evaluate_standalone(const std::string& checkpoint) {
    std::exception_ptr failure;
    std::vector<EvalResult> results;
    try {
      ensure_init();
      // A plugin that keeps several sets of weights takes the request at init (State::eval_weights); one left
      // untaken would evaluate the raw weights under the name asked for.
      if (!options.eval_weights.empty() && state.eval_weights == options.eval_weights)
        throw Error("evaluation with the \"" + options.eval_weights + "\" weights asked for (baton eval --weights), "
                    "but no plugin of this run keeps more than one set of weights (the ema plugin does): evaluate "
                    "without --weights, or with a config that loads such a plugin");
      if (!checkpoint.empty()) load(checkpoint, /*with_training_state=*/false);
      fire(Event::eval_standalone_start);
      results = run_evaluations();
      fire(Event::eval_standalone_end);
    } catch (...) {
      failure = std::current_exception();
      clear_step_data();
    }
    for (const auto& message : engine->close()) logger->warn(message);
    logger->flush();
    if (failure) std::rethrow_exception(failure);
    return results;
  }

  TrainerOptions options;
  torch::nn::AnyModule model;
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  TensorDataset train;
  TensorDataset eval;
  BatchSampler sampler;
  State state;
  std::unique_ptr<RunLogger> logger;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<CheckpointStore> store;
  std::vector<std::pair<std::string, std::shared_ptr<Plugin>>> plugins;
  std::vector<double> base_lrs;
  std::vector<EvalRecord> evals;
  bool initialised = false;
  std::int64_t last_eval_batch = -1;
  std::int64_t last_save_batch = -1;
  std::optional<double> last_loss;  // the train/loss this process last logged; none before its first log_interval
  std::atomic<bool> external_stop{false};
  std::string external_stop_reason;
};

Trainer::Trainer(torch::nn::AnyModule model, std::shared_ptr<torch::optim::Optimizer> optimizer, TensorDataset train,
                 TensorDataset eval, TrainerOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(optimizer), std::move(train), std::move(eval),
                                   with_process_group(std::move(options)))) {}

Trainer::~Trainer() = default;

void Trainer::add_plugin(std::string id, std::shared_ptr<Plugin> plugin) {
  if (impl_->initialised) throw Error("plugin '" + id + "' added after the run started");
  for (const auto& existing : impl_->plugins)
    if (existing.first == id) throw PluginError("two plugins share the id '" + id + "'");
  EngineEntry entry{id, dynamic_cast<Algorithm*>(plugin.get()), dynamic_cast<Callback*>(plugin.get())};
  impl_->engine->add(entry);
  impl_->plugins.emplace_back(std::move(id), std::move(plugin));
}

FitResult Trainer::fit() { return impl_->fit(); }

std::vector<EvalResult> Trainer::evaluate_standalone(const std::string& checkpoint) {
  return impl_->evaluate_standalone(checkpoint);
}

void Trainer::request_stop(std::string reason) {
  impl_->external_stop_reason = std::move(reason);
  impl_->external_stop.store(true);
}

State& Trainer::state() { return impl_->state; }
Logger& Trainer::logger() { return *impl_->logger; }
torch::nn::Module& Trainer::model() { return *impl_->module; }
const TrainerOptions& Trainer::options() const { return impl_->options; }
const std::vector<std::string>& Trainer::warnings() const { return impl_->logger->warnings(); }

}  // namespace baton
