// The trainer reads as its event timeline: fit → epochs → batches → microbatches, evaluation and checkpoints at the
// points the schedule says. Its collaborators hold the rest: Checkpointer (capture, save, load, resume),
// Evaluator (the passes and their history), Schedule (when to evaluate and save), Passes (what a plugin may run
// besides events: the step's gradients again, a pass over the training data), and the built-in callbacks of
// run_outputs.h (the final model export and chart).
#include "baton/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "baton/communicator.h"
#include "baton/builtin_datasets.h"
#include "data/prefetch_loader.h"
#include "data/sampler.h"
#include "engine/engine.h"
#include "logging/progress.h"
#include "logging/run_logger.h"
#include "sdk/nearest.h"
#include "sdk/step_generator.h"
#include "trainer/checkpointer.h"
#include "trainer/data_parallel.h"
#include "trainer/evaluator.h"
#include "trainer/format.h"
#include "trainer/init_checks.h"
#include "trainer/loss_scaler.h"
#include "trainer/precision.h"
#include "trainer/run_outputs.h"
#include "trainer/schedule.h"
#include "trainer/step_errors.h"

namespace fs = std::filesystem;

namespace baton {
namespace {

std::atomic<int> g_signal_count{0};

void on_stop_signal(int) {
  // Only async-signal-safe work here: count, and on the second signal leave at once.
  if (g_signal_count.fetch_add(1) >= 1) _exit(130);
}

TrainerOptions with_process_group(TrainerOptions options) {
  if (options.communicator) {
    options.rank = options.communicator->rank();
    options.world_size = options.communicator->world_size();
  }
  return options;
}

// Every param group's lr, optimizer after optimizer: what the schedule multiplies.
std::vector<double> initial_lrs(const std::vector<NamedOptimizer>& optimizers) {
  std::vector<double> lrs;
  for (const auto& o : optimizers)
    for (auto& group : o.optimizer->param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

std::string optimizer_names(const std::vector<NamedOptimizer>& optimizers) {
  std::string names;
  for (const auto& o : optimizers) names += (names.empty() ? "" : ", ") + o.name;
  return names;
}

// The run's optimizers: the model's own, or the one given (named "optimizer"); never both.
std::vector<NamedOptimizer> run_optimizers(const Model& model, std::shared_ptr<torch::optim::Optimizer> optimizer) {
  if (!model.optimizers().empty()) {
    if (optimizer)
      throw Error("the model brings its own optimizers (" + optimizer_names(model.optimizers()) +
                  "), so the trainer's optimizer would be ignored: pass none");
    return model.optimizers();
  }
  if (!optimizer) throw Error("the trainer needs an optimizer");
  return {NamedOptimizer{"optimizer", std::move(optimizer)}};
}

// Classes: cross entropy; values: mean squared error (the registered losses, so a plugin cannot shadow them).
LossFunction default_loss_for(const DataSpec& spec) {
  if (!spec.has_targets())
    throw Error("the training data has no targets (its fields: " + spec.field_names() +
                "), so there is no default loss: give the model its own (Model::with_loss) or set one");
  const std::string name = default_loss_name(spec);
  const auto* entry = components().losses.find(name);
  if (entry == nullptr) throw Error("the built-in loss '" + name + "' is not registered");
  return entry->factory(PluginConfig(), spec);
}

// The run's loss: the one given, else the model's own (Composer's ComposerModel.loss), else the data's default. A
// model with its own loss refuses another unless it says it may be replaced.
LossFunction run_loss(const TrainerOptions& options, const Model& model, const DataSpec& spec) {
  if (model.loss()) {
    if (options.loss && !model.loss_replaceable())
      throw Error("the model computes its own loss, so the run's loss (TrainerOptions::loss, the config's [loss]) "
                  "would be ignored: leave it out");
    return options.loss ? options.loss : model.loss();
  }
  if (options.loss) return options.loss;
  // A model that trains by its own step computes its own losses: without targets it has no evaluation loss either.
  if (model.training_step() && !spec.has_targets()) return {};
  return default_loss_for(spec);
}

Precision checked_precision(const TrainerOptions& options) {
  const Precision precision = parse_precision(options.precision);
  const std::string problem = precision_problem(precision, options.device);
  if (!problem.empty()) throw Error("trainer: " + problem);
  return precision;
}

// The loader's settings are checked with the trainer's, before any thread starts.
void check_loader(const TrainerOptions& options) {
  if (options.workers < 0) throw Error("trainer: workers must be >= 0, got " + std::to_string(options.workers));
  if (options.workers > 0 && options.prefetch < options.workers)
    throw Error("trainer: prefetch (" + std::to_string(options.prefetch) + ") must be at least workers (" +
                std::to_string(options.workers) + "): each worker fetches one of the batches ahead");
}

// Gives `slot` a value for the life of the scope and clears it after, on every exit path.
template <class T>
class Scoped {
 public:
  Scoped(T& slot, T value) : slot_(slot) { slot_ = value; }
  ~Scoped() { slot_ = T{}; }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;

 private:
  T& slot_;
};

}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

struct Trainer::Impl {
  Impl(Model model_in, std::shared_ptr<torch::optim::Optimizer> optimizer_in,
       std::shared_ptr<const Dataset> train_in, std::shared_ptr<const Dataset> eval_in, TrainerOptions options_in)
      : options(std::move(options_in)),
        model(std::move(model_in)),
        module(model ? model.ptr() : throw Error("the trainer needs a model (got an empty one)")),
        optimizers(run_optimizers(model, std::move(optimizer_in))),
        optimizer(optimizers.front().optimizer),
        train(train_in ? std::move(train_in) : throw Error("the trainer needs training data (a null dataset)")),
        eval(eval_in ? std::move(eval_in) : std::make_shared<TensorDataset>()),
        sampler(SamplerOptions{train->size(), options.batch_size, options.shuffle, /*drop_last=*/false,
                               options.seed, options.rank, options.world_size}),
        logger(state, logger_options()),
        engine(state, logger),
        base_lrs(initial_lrs(optimizers)),
        precision(checked_precision(options)),
        device_type(at::Device(options.device).type()),
        scaler(precision == Precision::amp_fp16 ? std::make_unique<LossScaler>() : nullptr),
        checkpoints(state, engine, logger, options, *module, optimizers, plugins, base_lrs, scaler.get()),
        loss(run_loss(options, model, train->spec())),
        evaluator(state, engine, logger, options, model, *eval, loss, options.metrics, "", history),
        schedule(options.eval_interval, options.save_interval, eval->size() > 0, checkpoints.has_store()),
        model_export(run_failed),
        plots(history, evaluator.metrics()) {
    check_loader(options);
    if (options.threads < 0) throw Error("trainer: threads must be >= 0, got " + std::to_string(options.threads));
    if (options.threads > 0) at::set_num_threads(options.threads);
    if (model.training_step() && precision != Precision::fp32)
      throw Error("trainer: a model with its own training step trains in fp32 for now (precision \"" +
                  options.precision + "\")");
    for (const auto& o : optimizers) state.optimizers.emplace_back(o.name, o.optimizer.get());
    state.device = options.device;
    state.eval_weights = options.eval_weights;
    state.rank = options.rank;
    state.world_size = options.world_size;
    state.seed = options.seed;
    state.communicator = options.communicator;
    state.run_dir = options.run_dir;
    state.model = module.get();
    state.optimizer = optimizer.get();
    state.passes = &passes;
    state.progress.max_duration = options.max_duration;
    state.progress.batches_per_epoch = sampler.batches_per_epoch();
    // Progress counts the samples of all ranks: every rank's share of an epoch is the same size.
    state.progress.samples_per_epoch = sampler.samples_per_epoch() * options.world_size;
    if (options.trace)
      engine.set_trace([this](const std::string& line) {
        if (options.rank == 0) std::fprintf(stderr, "trace: %s\n", line.c_str());
      });
    module->to(at::Device(options.device));
    for (const auto& set : options.eval_sets) {
      if (set.name.empty() || set.name == "eval" || set.name.find('/') != std::string::npos)
        throw Error("an evaluation set needs a name other than \"eval\", without '/' (got \"" + set.name + "\")");
      if (!set.data) throw Error("evaluation set '" + set.name + "' has no data (a null dataset)");
      for (const auto& other : extra_sets)
        if (other.evaluator->set() == set.name) throw Error("two evaluation sets are named '" + set.name + "'");
      extra_sets.push_back(EvalSetRun{
          std::make_unique<Evaluator>(state, engine, logger, options, model, *set.data, loss, set.metrics, set.name,
                                      history),
          Schedule(set.interval.value_or(options.eval_interval), Time(0, TimeUnit::epoch), set.data->size() > 0,
                   false)});
    }
  }

  // Every evaluation set with its schedule, the main one first: the order their evaluations run and are listed in.
  template <class Visit>
  void for_each_eval_set(Visit visit) {
    visit(evaluator, schedule);
    for (auto& set : extra_sets) visit(*set.evaluator, set.schedule);
  }

  RunLoggerOptions logger_options() const {
    RunLoggerOptions out;
    if (!options.run_dir.empty()) out.metrics_path = metrics_path();
    out.quiet = options.quiet;
    out.rank = options.rank;
    // A run that writes nothing opens no destination (they write under the run folder).
    if (!options.run_dir.empty()) out.destinations = options.loggers;
    return out;
  }
  std::string metrics_path() const { return (fs::path(options.run_dir) / "metrics.jsonl").string(); }
  Communicator* comm() const { return options.communicator.get(); }
  void fire(Event event) { engine.fire(event); }

  // init fires once, before the first fit, evaluation or prediction; the built-in callbacks come after the
  // configured plugins, so at fit_end they export what every plugin left.
  void ensure_init() {
    if (initialised) return;
    initialised = true;
    // Known classes, so they subscribe to fit_end only (and a trace shows them there alone).
    detail::CallbackOverrides::record(model_export);
    detail::CallbackOverrides::record(plots);
    engine.add(EngineEntry{"model_export", nullptr, &model_export});
    engine.add(EngineEntry{"eval_plots", nullptr, &plots});
    offer_probe();
    fire(Event::init);
    complete_metric_names();
    check_watched_metrics();
  }

  // What a plugin needs at init to check that the model takes the batches it will make.
  void offer_probe() {
    if (train->size() > 0) state.example_batch = train->get(at::zeros({1}, at::kLong));
    state.probe_forward = [this](const Batch& batch) {
      c10::NoGradGuard no_grad;
      const bool was_training = module->is_training();
      module->eval();
      struct Restore {
        torch::nn::Module& m;
        bool on;
        ~Restore() { m.train(on); }
      } restore{*module, was_training};
      return model.forward(to_device(batch, at::Device(options.device)));
    };
  }

  // After init every pass is known (plugins add theirs at init), and so is every name the run will log.
  // Their directions too (a loss: lower is better), for plugins that rank by a metric without being told how.
  void complete_metric_names() {
    std::vector<std::string> names = {"train/loss", "lr"};
    std::map<std::string, bool> higher_is_better = {{"train/loss", false}};
    for_each_eval_set([&](Evaluator& set, Schedule&) {
      for (auto& [name, higher] : set.metric_directions(state.eval_labels)) {
        higher_is_better[name] = higher;
        names.push_back(std::move(name));
      }
    });
    // The run's own first, then what plugins declared, each once.
    for (auto& name : state.metric_names)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
    state.metric_names = std::move(names);
    settle_metric_directions(state, std::move(higher_is_better));
  }

  void check_watched_metrics() const {
    for (const auto& watched : state.watched_metrics) {
      const auto& names = state.metric_names;
      if (std::find(names.begin(), names.end(), watched.metric) != names.end()) continue;
      std::string all;
      for (const auto& name : names) all += (all.empty() ? "" : ", ") + name;
      throw ConfigError(watched.where, watched.key,
                        "this run logs no metric '" + watched.metric + "'" +
                            detail::did_you_mean(watched.metric, names) + "; it logs " + all +
                            " (a plugin's own metrics count when it declares them in State::metric_names at init)");
    }
  }

  // --- stopping ------------------------------------------------------------------------------------------------

  void stop(StopCause why, std::string reason) {
    state.request_stop(std::move(reason));
    cause = why;
  }

  bool stop_now() {
    if (state.stop_requested() && cause == StopCause::none) cause = StopCause::plugin;
    if (g_signal_count.load() > 0 && !state.stop_requested()) stop(StopCause::interrupted, kInterruptedReason);
    if (external_stop.load() && !state.stop_requested()) stop(StopCause::requested, external_stop_reason);
    // Every rank calls this at the same points, so agreeing here makes all ranks stop after the same batch. A
    // signal reaches the ranks one after another: the ranks agree on whether any had one, so a rank that is
    // asked a moment before its own signal lands still reports the interrupt (and exits 130).
    if (comm()) {
      const bool interrupted = cause == StopCause::interrupted;
      const auto counts = comm()->sum({state.stop_requested() ? 1.0 : 0.0, interrupted ? 1.0 : 0.0});
      if (counts[1] > 0 && !state.stop_requested())
        stop(StopCause::interrupted, kInterruptedReason);
      else if (counts[0] > 0 && !state.stop_requested())
        stop(StopCause::other_rank, "another rank stopped");
    }
    return state.stop_requested();
  }

  // --- one batch -----------------------------------------------------------------------------------------------

  void apply_lr_schedule() {
    if (!options.lr_schedule) return;
    const double factor = options.lr_schedule(state.progress);
    std::size_t i = 0;
    for (const auto& o : optimizers)
      for (auto& group : o.optimizer->param_groups())
        if (i < base_lrs.size()) group.options().set_lr(base_lrs[i++] * factor);
  }

  // Forward, loss and backward of one step on State's data, firing before_forward … before_backward. Each value is
  // read back from State after the events that may replace it (Composer's state.batch, state.outputs, state.loss),
  // so a plugin's inputs, targets, outputs or loss term take effect.
  // Under mixed precision, autocast covers the forward pass and the loss (as in Composer), not the plugins' events.
  // Where a failing step was, for its message: "training batch 3 of epoch 1 (ep 0 ba 2)".
  std::string step_where() const {
    const auto& now = state.progress.now;
    return "training batch " + std::to_string(now.batch_in_epoch + 1) + " of epoch " + std::to_string(now.epoch + 1) +
           " (" + format_timestamp(now) + ")";
  }

  at::Tensor step_once() {
    const auto where = [this] { return step_where(); };
    const auto spec = [this] { return train->spec(); };
    fire(Event::before_forward);
    {
      AutocastScope autocast(precision, device_type);
      state.outputs = detail::during_step(where, "the model's forward", state.batch, spec,
                                          [&] { return model.forward(state.batch); });
    }
    fire(Event::after_forward);
    fire(Event::before_loss);
    {
      AutocastScope autocast(precision, device_type);
      state.loss = detail::during_step(where, "the loss", state.batch, spec,
                                       [&] { return loss(state.outputs, state.batch); });
    }
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
    const std::int64_t n = state.batch.size();
    const std::int64_t step = options.microbatch_size;
    if (step <= 0 || step >= n) {
      const at::Tensor loss = step_once();
      backward(loss);
      fire(Event::after_backward);
      return loss.detach();
    }
    const Batch whole = state.batch;
    std::vector<Outputs> outputs;
    at::Tensor total;
    for (std::int64_t begin = 0; begin < n; begin += step) {
      const std::int64_t end = std::min(n, begin + step);
      state.batch = whole.slice(begin, end);
      const at::Tensor weighted = step_once() * (static_cast<double>(end - begin) / static_cast<double>(n));
      backward(weighted);
      fire(Event::after_backward);
      // Detached at once: a microbatch's graph is freed after its backward, which is what microbatching is for.
      Outputs detached;
      for (const auto& [name, t] : state.outputs) detached.set(name, t.detach());
      outputs.push_back(std::move(detached));
      total = total.defined() ? total + weighted.detach() : weighted.detach();
    }
    state.batch = whole;
    state.outputs = join_outputs(outputs);
    state.loss = total;
    return total;
  }

  // What a model's own training step works with: the run's optimizers, backward, microbatches, ranks.
  struct OwnStep final : StepContext {
    explicit OwnStep(Impl& trainer) : t(trainer) {}
    torch::optim::Optimizer& optimizer(const std::string& name) override {
      for (const auto& o : t.optimizers)
        if (o.name == name) return *o.optimizer;
      throw Error("the model has no optimizer '" + name + "' (its optimizers: " + optimizer_names(t.optimizers) + ")");
    }
    void backward(const at::Tensor& loss) override { t.backward(loss); }
    at::Tensor backward_in_microbatches(const Batch& batch,
                                        const std::function<at::Tensor(const Batch&)>& loss_of) override {
      const std::int64_t n = batch.size();
      const std::int64_t size = t.options.microbatch_size;
      if (size <= 0 || size >= n) {
        const at::Tensor loss = loss_of(batch);
        t.backward(loss);
        return loss.detach();
      }
      at::Tensor total;
      for (std::int64_t begin = 0; begin < n; begin += size) {
        const std::int64_t end = std::min(n, begin + size);
        const at::Tensor weighted =
            loss_of(batch.slice(begin, end)) * (static_cast<double>(end - begin) / static_cast<double>(n));
        t.backward(weighted);
        total = total.defined() ? total + weighted.detach() : weighted.detach();
      }
      return total;
    }
    void step(const std::string& name) override {
      torch::optim::Optimizer& chosen = optimizer(name);
      std::vector<at::Tensor> parameters;
      for (const auto& group : chosen.param_groups())
        parameters.insert(parameters.end(), group.params().begin(), group.params().end());
      average_gradients(t.comm(), parameters);
      chosen.step();
      chosen.zero_grad();
    }
    void zero_grad(const std::string& name) override { optimizer(name).zero_grad(); }
    void set_outputs(Outputs outputs) override { t.state.outputs = std::move(outputs); }
    Impl& t;
  };

  // A model's own training step (Lightning's manual optimisation): the model backpropagates and steps its
  // optimizers itself; the events around the forward, loss and backward fire before and after it, with its loss.
  at::Tensor own_training_step() {
    fire(Event::before_forward);
    OwnStep step(*this);
    const at::Tensor loss =
        detail::during_step([this] { return step_where(); }, "the model's training step", state.batch,
                            [this] { return train->spec(); }, [&] { return model.training_step()(state.batch, step); });
    if (!loss.defined() || loss.numel() != 1)
      throw Error("the model's training step must return its loss as one value, got " +
                  (loss.defined() ? std::to_string(loss.numel()) + " values" : std::string("none")));
    state.loss = loss.detach().reshape({});
    fire(Event::after_forward);
    fire(Event::before_loss);
    fire(Event::after_loss);
    fire(Event::before_backward);
    fire(Event::after_backward);
    return state.loss;
  }

  // The gradients every plugin sees from after_train_batch on and the step uses: averaged across ranks, then
  // unscaled (amp_fp16). Returns whether they hold an inf or a NaN, when the scaler skips the step; averaging spreads
  // one rank's to all, so every rank skips the same steps.
  bool reduce_gradients() {
    average_gradients(comm(), *module);
    return scaler && scaler->unscale(module->parameters());
  }

  // What a plugin may run besides events (baton::TrainingPasses on State::passes), each in its own window.
  struct Passes final : TrainingPasses {
    explicit Passes(Impl& trainer) : t(trainer) {}

    bool recompute_gradients() override {
      if (step_batch == nullptr)
        throw Error(t.model.training_step()
                        ? "recompute_gradients: the model trains by its own training_step, which the trainer cannot "
                          "run again"
                        : "recompute_gradients is only available at after_train_batch");
      // The events of the pass may not recompute in turn; State keeps the first pass's data for the rest of the step.
      const Batch* from = std::exchange(step_batch, nullptr);
      Batch batch = std::move(t.state.batch);
      Outputs outputs = std::move(t.state.outputs);
      at::Tensor loss = std::move(t.state.loss);
      for (const auto& o : t.optimizers) o.optimizer->zero_grad();
      t.state.batch = *from;
      {
        // The same draws as the first pass (a diffusion model's timesteps and noise): the same loss function.
        StepGeneratorScope again(t.state, StepStream::train, static_cast<std::uint64_t>(t.state.progress.now.batch));
        t.forward_backward();
      }
      t.step_overflow = t.reduce_gradients();
      t.state.batch = std::move(batch);
      t.state.outputs = std::move(outputs);
      t.state.loss = std::move(loss);
      step_batch = from;
      return !t.step_overflow;
    }

    void forward_training_data() override {
      if (!t.fitting || t.in_step)
        throw Error("forward_training_data is only available during fit, outside a training step (from batch_end "
                    "on)");
      const at::Device device(t.options.device);
      const bool was_training = t.module->is_training();
      t.module->train();
      const std::int64_t batches = t.sampler.batches_per_epoch();
      {
        c10::NoGradGuard no_grad;
        PrefetchLoader loader(*t.train, sampler_plan(t.sampler, t.state.progress.now.epoch, 0, batches),
                              loader_options(t.options));
        for (std::int64_t i = 0; i < batches; ++i) {
          const Batch batch = to_device(loader.next(), device);
          StepGeneratorScope random(t.state, StepStream::training_data, static_cast<std::uint64_t>(i));
          AutocastScope autocast(t.precision, t.device_type);
          detail::during_step([&] { return "a pass over the training data, batch " + std::to_string(i + 1); },
                              "the model's forward", batch, [this] { return t.train->spec(); },
                              [&] { return t.model.forward(batch); });
        }
        if (t.comm()) {
          std::vector<at::Tensor> buffers;
          for (const auto& b : t.module->buffers())
            if (b.is_floating_point()) buffers.push_back(b);
          if (!buffers.empty()) t.comm()->average(buffers);
        }
      }
      t.module->train(was_training);
    }

    Impl& t;
    // The step's batch while recompute_gradients() is open: during after_train_batch of a step the trainer computes.
    const Batch* step_batch = nullptr;
  };

  // amp_fp16 backpropagates the scaled loss; the gradients are unscaled before anything reads them.
  void backward(const at::Tensor& loss) {
    const auto where = [this] { return step_where(); };
    detail::during_step(where, "backward", state.batch, [this] { return train->spec(); }, [&] {
      if (scaler)
        scaler->scale(loss).backward();
      else
        loss.backward();
    });
  }

  // --- the data ----------------------------------------------------------------------------------------------

  // The batch at the loop's position, from the loader. The loader runs ahead from where it was started, so it is
  // (re)started at the loop's position when there is none yet (the first batch, or the first after a resume), when
  // it has delivered all it was asked for, or when the position moved without it.
  Batch next_train_batch() {
    const auto& now = state.progress.now;
    const std::int64_t per_epoch = sampler.batches_per_epoch();
    const std::int64_t position = now.epoch * per_epoch + now.batch_in_epoch;
    if (!train_loader || train_loader->done() || loader_start + train_loader->position() != position) {
      train_loader.reset();  // its threads are joined before the new loader's start
      train_loader = std::make_unique<PrefetchLoader>(
          *train, sampler_plan(sampler, now.epoch, now.batch_in_epoch, batches_left()), loader_options(options));
      loader_start = position;
    }
    return train_loader->next();
  }

  // The batches from here to max_duration, so the loader fetches none past the run's end. Samples convert to
  // batches rounding up (never fewer than the loop runs); a length in dur, which only an embedding program can
  // give, has no batch count before the run knows its own: the loader then runs until the trainer stops it.
  std::int64_t batches_left() const {
    const TimeUnit unit = options.max_duration.unit();
    if (unit != TimeUnit::epoch && unit != TimeUnit::batch && unit != TimeUnit::sample)
      return std::numeric_limits<std::int64_t>::max();
    return std::max<std::int64_t>(1, state.progress.to_batches(options.max_duration) - state.progress.now.batch);
  }

  // Draws the batch and trains on it: after_dataloader … after_train_batch, then the optimizer step (after
  // after_train_batch, as in Composer, so gradient clipping sees the averaged gradients). Returns the loss.
  at::Tensor train_batch(at::Device device) {
    auto& now = state.progress.now;
    const Scoped<bool> stepping(in_step, true);
    // Everything the step draws (plugins from after_dataloader, the model's forward) comes from the step's seed.
    StepGeneratorScope step_random(state, StepStream::train, static_cast<std::uint64_t>(now.batch));
    fire(Event::before_dataloader);
    std::int64_t drawn = 0;  // time counts the samples drawn, whatever a plugin makes of the batch on State
    {
      Batch batch = next_train_batch();
      drawn = batch.size();
      state.batch = to_device(batch, device);
    }
    fire(Event::after_dataloader);
    fire(Event::batch_start);
    apply_lr_schedule();
    fire(Event::before_train_batch);
    for (const auto& o : optimizers) o.optimizer->zero_grad();
    broadcast_buffers(comm(), *module);
    at::Tensor loss;
    if (model.training_step()) {
      loss = own_training_step();
      fire(Event::after_train_batch);
    } else {
      const Batch step_batch = state.batch;  // what a recomputation of the gradients starts from
      loss = forward_backward();
      step_overflow = reduce_gradients();
      {
        const Scoped<const Batch*> recomputable(passes.step_batch, &step_batch);
        fire(Event::after_train_batch);
      }
      if (!step_overflow)
        for (const auto& o : optimizers) o.optimizer->step();
      if (scaler) scaler->update(step_overflow);
    }
    now.batch += 1;
    now.batch_in_epoch += 1;
    now.sample += drawn * options.world_size;
    now.sample_in_epoch += drawn * options.world_size;
    return loss;
  }

  // --- the epoch -----------------------------------------------------------------------------------------------

  void log_train_loss(at::Tensor& loss_sum, std::int64_t& count) {
    if (count == 0) return;
    double sum = loss_sum.item<double>();
    double total = static_cast<double>(count);
    if (comm()) {
      const auto sums = comm()->sum({sum, total});
      sum = sums[0];
      total = sums[1];
    }
    if (!std::isfinite(sum)) report_nonfinite_loss(count);
    window_losses.clear();
    logger.log_metric("train/loss", sum / total);
    logger.log_metric("lr", optimizer->param_groups().front().options().get_lr());
    logger.flush();
    last_loss = sum / total;
    loss_sum.zero_();
    count = 0;
  }

  // The first batch of the window just logged whose loss is not finite, as a warning, once per run: after a
  // divergence every later loss is NaN too. (Another rank's NaN shows in the reduced sum only: then the window.)
  void report_nonfinite_loss(std::int64_t count) {
    if (reported_nonfinite_loss) return;
    reported_nonfinite_loss = true;
    const auto& now = state.progress.now;
    std::int64_t first = now.batch - count;  // 0-based batch count before the window's first batch
    double value = std::numeric_limits<double>::quiet_NaN();
    for (const auto& loss : window_losses) {
      value = loss.item<double>();
      if (!std::isfinite(value)) break;
      ++first;
    }
    logger.warn("the training loss is not finite (" + format_number(value) + ") at training batch " +
                std::to_string(first + 1) + " of the run (in the " + std::to_string(count) +
                " batches logged at " + format_timestamp(now) + "): the weights have likely diverged; lower " +
                "optimizer.lr, or add the nan_monitor plugin to stop at the first one");
  }

  // The first floating parameter or buffer of the model with a NaN or inf, by name; "" when all are finite.
  std::string nonfinite_tensor() const {
    c10::NoGradGuard no_grad;
    for (const auto& item : module->named_parameters())
      if (!item.value().isfinite().all().item<bool>()) return item.key();
    for (const auto& item : module->named_buffers())
      if (item.value().is_floating_point() && !item.value().isfinite().all().item<bool>()) return item.key();
    return "";
  }

  // After a checkpoint event: a checkpoint just saved with finite weights is the one to name if the run diverges.
  void note_checkpoint() {
    if (state.last_checkpoint.empty() || state.last_checkpoint == noted_checkpoint) return;
    noted_checkpoint = state.last_checkpoint;
    if (nonfinite_tensor().empty()) last_finite_checkpoint = noted_checkpoint;
  }

  // What the progress bar shows beside the count: the loss once this process has logged one, nothing before.
  std::vector<std::pair<std::string, double>> bar_metrics() const {
    if (!last_loss) return {};
    return {{"loss", *last_loss}};
  }

  // The epoch's progress bar (rank 0, unless quiet). Built in place by the caller: a bar that is destroyed
  // finishes its line.
  std::optional<ProgressOptions> progress_options(std::int64_t batches, std::int64_t log_every) const {
    if (options.quiet || options.rank != 0) return std::nullopt;
    const auto& now = state.progress.now;
    ProgressOptions p;
    p.label = "epoch " + std::to_string(now.epoch + 1);
    if (options.max_duration.unit() == TimeUnit::epoch) p.label += "/" + std::to_string(options.max_duration.count());
    p.total = batches;
    p.terminal = options.progress && is_terminal(stderr);
    p.plain_every = log_every;
    p.initial = now.batch_in_epoch;  // a resumed epoch: rate and ETA count only the steps run now
    return p;
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
    if (auto p = progress_options(batches, log_every)) bar.emplace(*p);
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
    std::int64_t loss_count = 0;

    while (now.batch_in_epoch < batches && !state.progress.reached(options.max_duration) && !stop_now()) {
      const double fraction_before = state.progress.fraction();
      const at::Tensor batch_loss = train_batch(device);
      loss_sum.add_(batch_loss);
      if (!reported_nonfinite_loss) window_losses.push_back(batch_loss);  // a handle, no copy and no sync
      loss_count += 1;
      const bool epoch_ends = now.batch_in_epoch == batches;
      if (now.batch % log_every == 0 || epoch_ends) log_train_loss(loss_sum, loss_count);
      if (bar) bar->update(now.batch_in_epoch, bar_metrics());
      fire(Event::batch_end);
      state.clear_step_data();
      bool stopping = stop_now();
      // The run's last batch ends with an evaluation and a checkpoint through the usual events (plugins see them:
      // exports, checkpoint selection) unless the epoch's end right after takes them.
      const bool final_batch = stopping || state.progress.reached(options.max_duration);
      AfterBatch next = schedule.after_batch(state.progress, fraction_before, epoch_ends, final_batch);
      std::vector<Evaluator*> sets_due;  // allocates only when one is due
      for_each_eval_set([&](Evaluator& set, const Schedule& when) {
        if (when.after_batch(state.progress, fraction_before, epoch_ends, final_batch).evaluate)
          sets_due.push_back(&set);
      });
      if (!sets_due.empty()) {
        if (bar) bar->finish(bar_metrics());
        for (Evaluator* set : sets_due) set->run_in_fit();
        // A stop asked for during the evaluation (an early stopper) makes this the last batch, with its save.
        if (!stopping && (stopping = stop_now()))
          next.save = schedule.after_batch(state.progress, fraction_before, epoch_ends, true).save;
      }
      checkpoints.event(Event::batch_checkpoint, next.save, TimeUnit::batch);
      note_checkpoint();
      if (stopping) break;
    }
    if (bar) bar->finish(bar_metrics());
    if (now.batch_in_epoch == batches) {
      now.epoch += 1;
      now.iteration += 1;
      now.batch_in_epoch = 0;
      now.sample_in_epoch = 0;
      fire(Event::epoch_end);
      for_each_eval_set([&](Evaluator& set, const Schedule& when) {
        if (when.eval_due_at_epoch(now.epoch)) set.run_in_fit();
      });
      // The run's end (a stop asked for at this evaluation) saves here, with events, unless its batch saved.
      const bool final_save = stop_now() && schedule.saves_enabled() && checkpoints.last_save_batch() != now.batch;
      checkpoints.event(Event::epoch_checkpoint, schedule.save_due_at_epoch(now.epoch) || final_save, TimeUnit::epoch);
      note_checkpoint();
      fire(Event::iteration_end);
      fire(Event::iteration_checkpoint);
    }
  }

  // --- the run -------------------------------------------------------------------------------------------------

  FitResult fit() {
    if (train->size() == 0) throw Error("the training set is empty");
    const auto started = std::chrono::steady_clock::now();
    std::exception_ptr failure;
    try {
      ensure_init();
      const bool resumed = !checkpoints.resume().empty();
      if (resumed && options.rank == 0 && !options.run_dir.empty())
        // The end-of-run table and chart cover the whole run: the evaluations before this point are in
        // metrics.jsonl.
        evaluator.load_history(metrics_path(), state.progress.now.batch);
      // Destinations open here, not at construction, so `baton check` (and evaluate or predict) creates no files.
      logger.open_destinations(LoggerContext{options.run_dir, resumed, state.progress.now});
      broadcast_model(comm(), *module);
      fitting = true;
      fire(Event::fit_start);
      module->train();
      while (!state.progress.reached(options.max_duration) && !stop_now()) train_epoch(at::Device(options.device));
      stop_now();
      // The last batch normally took the final evaluation and checkpoint (train_epoch). A run that ends with no
      // batch at all (resumed at its end) or stopped outside batch_end still gets them here, without events.
      for_each_eval_set([&](Evaluator& set, const Schedule& when) {
        if (when.evaluations_enabled() && set.last_batch() != state.progress.now.batch) set.run_in_fit();
      });
      if (schedule.saves_enabled() && checkpoints.last_save_batch() != state.progress.now.batch) {
        checkpoints.save_final(options.save_interval.unit());
        note_checkpoint();
      }
      // A diverged run is a failed run: its weights are not exported, and the user learns where to go back to.
      if (!options.allow_nonfinite)
        if (const std::string tensor = nonfinite_tensor(); !tensor.empty())
          throw Error("the weights are not finite at the end of the run (" + tensor + " holds NaN or inf), so " +
                      "model.safetensors is not written; " +
                      (last_finite_checkpoint.empty()
                           ? std::string("no checkpoint was saved with finite weights")
                           : "the last checkpoint with finite weights is " + last_finite_checkpoint) +
                      ". Lower optimizer.lr (or add gradient_clipping), and add the nan_monitor plugin to stop at " +
                      "the first NaN; trainer.allow_nonfinite = true accepts such a run");
    } catch (...) {
      failure = std::current_exception();
      state.clear_step_data();  // a batch that failed half-way leaves nothing on State for fit_end
    }
    fitting = false;
    // The loader's threads end with the training: a stop or an error leaves at most `prefetch` batches unused.
    train_loader.reset();
    finish(failure);
    FitResult result;
    result.end = state.progress.now;
    result.evals = history;
    result.stop_cause = cause;
    result.stop_reason = state.stop_requested() ? state.stop_reason() : "";
    result.last_checkpoint = state.last_checkpoint;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
  }

  // fit_end and close run on every exit path; their own errors are reported without hiding the first one.
  void finish(std::exception_ptr failure) {
    run_failed = failure != nullptr;
    try {
      if (!engine.closed()) fire(Event::fit_end);
    } catch (const std::exception& e) {
      if (!failure) failure = std::current_exception();
      else logger.warn(e.what());
    }
    close(failure);
  }

  void close(std::exception_ptr failure) {
    for (const auto& message : engine.close()) logger.warn(message);
    logger.flush();
    try {
      logger.close_destinations();
    } catch (const std::exception& e) {
      if (!failure) failure = std::current_exception();
      else logger.warn(e.what());
    }
    if (failure) std::rethrow_exception(failure);
  }

  // Loads `checkpoint` (when given) after init, for a standalone evaluation or prediction. A set of weights asked
  // for must be one a plugin of the run declared at init (State::weight_sets): another would be the raw weights
  // under the name asked for.
  void prepare_standalone(const std::string& checkpoint, const char* command) {
    ensure_init();
    check_weight_request(state, options.eval_weights, command);
    if (!checkpoint.empty()) checkpoints.load(checkpoint, /*with_training_state=*/false);
  }

  std::vector<EvalResult> evaluate_standalone(const std::string& checkpoint) {
    std::exception_ptr failure;
    std::vector<EvalResult> results;
    try {
      prepare_standalone(checkpoint, "evaluation");
      fire(Event::eval_standalone_start);
      for_each_eval_set([&](Evaluator& set, const Schedule&) {
        for (auto& r : set.run()) results.push_back(std::move(r));
      });
      fire(Event::eval_standalone_end);
    } catch (...) {
      failure = std::current_exception();
      state.clear_step_data();
    }
    close(failure);
    return results;
  }

  PredictResult predict(const Dataset& data, const std::string& checkpoint) {
    std::exception_ptr failure;
    PredictResult result;
    try {
      prepare_standalone(checkpoint, "prediction");
      result = evaluator.predict(data);
    } catch (...) {
      failure = std::current_exception();
      state.clear_step_data();
    }
    close(failure);
    return result;
  }

  // Declared in construction order: each collaborator takes references to the members above it.
  TrainerOptions options;
  Model model;
  std::shared_ptr<torch::nn::Module> module;
  std::vector<NamedOptimizer> optimizers;
  std::shared_ptr<torch::optim::Optimizer> optimizer;  // the first of them
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> eval;
  BatchSampler sampler;
  std::unique_ptr<PrefetchLoader> train_loader;  // after `train`, which it reads: destroyed before it
  std::int64_t loader_start = 0;                 // the epoch * batches_per_epoch + batch_in_epoch it started at
  State state;
  PluginList plugins;
  RunLogger logger;
  Engine engine;
  std::vector<double> base_lrs;
  Precision precision;
  at::DeviceType device_type;
  std::unique_ptr<LossScaler> scaler;  // amp_fp16 only
  Checkpointer checkpoints;
  LossFunction loss;
  std::vector<EvalRecord> history;  // every evaluation set's, one record per point of the run
  Evaluator evaluator;              // the main set (`eval`)
  Schedule schedule;
  bool run_failed = false;
  ModelExport model_export;
  EvalPlots plots;
  struct EvalSetRun {
    std::unique_ptr<Evaluator> evaluator;
    Schedule schedule;
  };
  std::vector<EvalSetRun> extra_sets;  // TrainerOptions::eval_sets, each at its own interval
  bool initialised = false;
  StopCause cause = StopCause::none;
  std::optional<double> last_loss;  // the train/loss this process last logged; none before its first log_interval
  std::vector<at::Tensor> window_losses;  // each batch's loss since the last log, until a non-finite one is reported
  bool reported_nonfinite_loss = false;
  std::string noted_checkpoint;           // the last checkpoint note_checkpoint looked at
  std::string last_finite_checkpoint;     // the last one saved with finite weights
  std::atomic<bool> external_stop{false};
  std::string external_stop_reason;
  Passes passes{*this};
  bool step_overflow = false;  // the step's gradients hold an inf or a NaN (amp_fp16): the step is skipped
  bool fitting = false;        // from fit_start to the end of training
  bool in_step = false;        // inside train_batch
};

Trainer::Trainer(Model model, std::shared_ptr<torch::optim::Optimizer> optimizer,
                 std::shared_ptr<const Dataset> train, std::shared_ptr<const Dataset> eval, TrainerOptions options)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(optimizer), std::move(train), std::move(eval),
                                   with_process_group(std::move(options)))) {}

Trainer::Trainer(Model model, std::shared_ptr<torch::optim::Optimizer> optimizer, TensorDataset train,
                 TensorDataset eval, TrainerOptions options)
    : Trainer(std::move(model), std::move(optimizer), std::make_shared<TensorDataset>(std::move(train)),
              std::make_shared<TensorDataset>(std::move(eval)), std::move(options)) {}

Trainer::~Trainer() = default;

void Trainer::add_plugin(std::string id, std::shared_ptr<Plugin> plugin) {
  if (impl_->initialised) throw Error("plugin '" + id + "' added after the run started");
  for (const auto& existing : impl_->plugins)
    if (existing.first == id) throw PluginError("two plugins share the id '" + id + "'");
  impl_->engine.add(EngineEntry{id, dynamic_cast<Algorithm*>(plugin.get()), dynamic_cast<Callback*>(plugin.get())});
  impl_->state.plugins.push_back(id);
  impl_->plugins.emplace_back(std::move(id), std::move(plugin));
}

void Trainer::check() { impl_->ensure_init(); }
FitResult Trainer::fit() { return impl_->fit(); }

std::vector<EvalResult> Trainer::evaluate_standalone(const std::string& checkpoint) {
  return impl_->evaluate_standalone(checkpoint);
}

PredictResult Trainer::predict(const std::string& checkpoint) { return impl_->predict(*impl_->eval, checkpoint); }

PredictResult Trainer::predict(const Dataset& data, const std::string& checkpoint) {
  return impl_->predict(data, checkpoint);
}

void Trainer::request_stop(std::string reason) {
  impl_->external_stop_reason = std::move(reason);
  impl_->external_stop.store(true);
}

const Dataset& Trainer::train_set() const { return *impl_->train; }
const Dataset& Trainer::eval_set() const { return *impl_->eval; }
State& Trainer::state() { return impl_->state; }
Logger& Trainer::logger() { return impl_->logger; }
torch::nn::Module& Trainer::model() { return *impl_->module; }
const TrainerOptions& Trainer::options() const { return impl_->options; }
const std::vector<std::string>& Trainer::warnings() const { return impl_->logger.warnings(); }

}  // namespace baton
