// The trainer's construction and the checks before a run: the run's optimizers and loss, its precision on its
// device, the loader settings, the evaluation sets; init (plugins set up and declare what they log and watch);
// loading a checkpoint for a standalone evaluation or prediction; and the public Trainer around Impl.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include "baton/communicator.h"
#include "baton/model_tensors.h"
#include "config/config.h"
#include "baton/time.h"
#include "trainer/init_checks.h"
#include "trainer/module_mode.h"
#include "trainer/step_errors.h"
#include "optim/param_groups.h"
#include "sdk/step_generator.h"
#include "trainer/trainer_impl.h"
#include "trainer/weights_init.h"

namespace fs = std::filesystem;

namespace baton {
namespace {

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

// "trainer: sharding \"zero2\"": how the errors about a sharded run start.
std::string sharding_text(const TrainerOptions& options) {
  return std::string("trainer: sharding \"") + sharding_name(options.sharding) + "\"";
}

// zero3's units by name: TrainerOptions::units, else every module holding trainable parameters of its own (what the
// built-in models and Sequential models run through run_unit). An unknown name is an error listing the candidates.
std::vector<sharding::UnitSpec> zero3_units(const TrainerOptions& options, torch::nn::Module& module) {
  std::vector<sharding::UnitSpec> all;  // every module with trainable parameters of its own, in order
  std::map<std::string, const torch::nn::Module*> by_name;
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    by_name[item.key()] = item.value().get();
    bool own = false;
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) own = own || p.value().requires_grad();
    if (own) all.push_back({item.key(), item.value().get()});
  }
  if (options.units.empty()) return all;
  std::vector<sharding::UnitSpec> chosen;
  for (const std::string& name : options.units) {
    auto found = by_name.find(name);
    if (found == by_name.end()) {
      std::string known;
      for (std::size_t i = 0; i < all.size() && i < 12; ++i) known += (i ? ", " : "") + all[i].name;
      if (all.size() > 12) known += ", ...";
      throw Error(sharding_text(options) + ": unit '" + name + "' is no sub-module of the model (modules with " +
                  "parameters: " + (known.empty() ? std::string("none") : known) + ")");
    }
    chosen.push_back({name, found->second});
  }
  return chosen;
}

// Sharding zero1 / zero2 / zero3: the step over this rank's shards of the model's parameters (on the run's device,
// where the shards are made), else null. What it cannot run with is refused here, before anything is built over it.
std::unique_ptr<sharding::ShardedStep> sharded_step(const TrainerOptions& options, const Model& model,
                                                    torch::nn::Module& module, const at::Device& device,
                                                    const Precision& precision) {
  if (options.sharding == Sharding::none) return nullptr;
  const std::string mode = sharding_text(options);
  if (model.training_step())
    throw Error(mode + ": the model trains by its own training step, which steps its optimizers over the model's "
                "parameters; a sharded run steps each rank's shard (use sharding = \"none\")");
  if (!model.optimizers().empty())
    throw Error(mode + ": the model brings its own optimizers (" + optimizer_names(model.optimizers()) +
                "), built over the model's parameters; a sharded run builds one optimizer over each rank's shard " +
                "(TrainerOptions::optimizer_factory; use sharding = \"none\" for the model's own)");
  if (!options.units.empty() && options.sharding != Sharding::zero3)
    throw Error(mode + ": TrainerOptions::units are gathered one at a time under zero3 only; leave them out");
  module.to(device);
  const sharding::ZeroStage stage = options.sharding == Sharding::zero1   ? sharding::ZeroStage::zero1
                                    : options.sharding == Sharding::zero2 ? sharding::ZeroStage::zero2
                                                                          : sharding::ZeroStage::zero3;
  std::vector<sharding::UnitSpec> units;
  if (stage == sharding::ZeroStage::zero3) units = zero3_units(options, module);
  auto step = std::make_unique<sharding::ShardedStep>(named_model_tensors(module, /*buffers=*/false),
                                                      options.communicator.get(), stage, std::int64_t{25} << 20,
                                                      std::move(units));
  // A unit's recompute in the backward runs under the autocast its training forward ran under. `precision` is
  // the Impl's member, set after this step is built (it is read when units run, by then).
  const c10::DeviceType type = device.type();
  const Precision* run_precision = &precision;
  step->set_recompute_context([run_precision, type] {
    const Precision now = *run_precision;
    return [now, type]() -> std::shared_ptr<void> { return std::make_shared<AutocastScope>(now, type); };
  });
  return step;
}

// The run's optimizers: the model's own, the one given (named "optimizer"), or the one TrainerOptions'
// optimizer_factory builds over the model's parameters or, sharded, over this rank's shard; one of them only.
// TrainerOptions::param_groups split its one param group (`summary` says how).
std::vector<NamedOptimizer> run_optimizers(const Model& model, std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           const TrainerOptions& options, const sharding::ShardedStep* sharded,
                                           std::string& summary) {
  const OptimizerBuilder& factory = options.optimizer_factory;
  if (!model.optimizers().empty()) {
    if (optimizer || factory)
      throw Error("the model brings its own optimizers (" + optimizer_names(model.optimizers()) +
                  "), so the trainer's optimizer would be ignored: pass none");
    if (!options.param_groups.empty())
      throw Error("the model brings its own optimizers (" + optimizer_names(model.optimizers()) +
                  "), which it groups itself: weight_decay_exclude and lr_scale apply to the trainer's optimizer");
    return model.optimizers();
  }
  if (optimizer && factory)
    throw Error("the trainer got an optimizer and TrainerOptions::optimizer_factory: pass one of them");
  if (sharded && optimizer)
    throw Error(sharding_text(options) + " steps each rank's shard of the parameters, so its optimizer is built " +
                "over that shard: pass TrainerOptions::optimizer_factory (called with the tensors to step) and a " +
                "null optimizer, not an optimizer built over the model's parameters");
  if (factory) {
    optimizer = factory(sharded ? sharded->shard_parameters() : model.ptr()->parameters());
    if (!optimizer) throw Error("TrainerOptions::optimizer_factory returned no optimizer");
  }
  if (!optimizer) throw Error("the trainer needs an optimizer");
  if (!options.param_groups.empty()) {
    const ParamGroupPlan plan = plan_param_groups(*model.ptr(), options.param_groups);
    apply_param_groups(*optimizer, sharded ? sharded->named_shard_parameters() : named_model_tensors(*model.ptr(), false),
                       plan);
    if (!plan.trivial()) summary = plan.summary();
  }
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

// The settings a config file would have refused (setting_problems: the same checks), before anything starts.
TrainerOptions checked(TrainerOptions options) {
  const std::vector<SettingProblem> problems = setting_problems(options);
  if (!problems.empty()) {
    const SettingProblem& first = problems.front();
    throw Error("trainer: " + first.option + ": expected " + first.expected + ", got " + first.got);
  }
  return options;
}

PrecisionChoice run_precision(const TrainerOptions& options, const Model& model, const at::Device& device,
                              RunLogger& logger) {
  // Only "auto" and amp_bf16 look at the device: an explicit fp32 or amp_fp16 run reads nothing of the machine.
  const bool looks = options.precision == Precision::automatic || options.precision == Precision::amp_bf16;
  std::string warning;
  PrecisionChoice chosen = choose_precision(options.precision, device.type(),
                                            looks ? bf16_support(device.type()) : Bf16Support{},
                                            static_cast<bool>(model.training_step()), warning);
  if (!warning.empty()) logger.warn(warning);
  return chosen;
}

}  // namespace

std::string optimizer_names(const std::vector<NamedOptimizer>& optimizers) {
  std::string names;
  for (const auto& o : optimizers) names += (names.empty() ? "" : ", ") + o.name;
  return names;
}

Trainer::Impl::Impl(Model model_in, std::shared_ptr<torch::optim::Optimizer> optimizer_in,
                    std::shared_ptr<const Dataset> train_in, std::shared_ptr<const Dataset> eval_in,
                    TrainerOptions options_in)
    : options(checked(std::move(options_in))),
      device(options.device),
      model(std::move(model_in)),
      module(model ? model.ptr() : throw Error("the trainer needs a model (got an empty one)")),
      sharded(sharded_step(options, model, *module, device, precision)),
      optimizers(run_optimizers(model, std::move(optimizer_in), options, sharded.get(), param_groups)),
      optimizer(optimizers.front().optimizer),
      train(train_in ? std::move(train_in) : throw Error("the trainer needs training data (a null dataset)")),
      eval(eval_in ? std::move(eval_in) : std::make_shared<TensorDataset>()),
      sampler(SamplerOptions{train->size(), options.batch_size, options.shuffle, /*drop_last=*/false, options.seed,
                             options.rank, options.world_size}),
      train_loader(*train, sampler, loader_options(options, device)),
      declarations(options.device, options.world_size, options.eval_weights),
      logger(state, logger_options()),
      engine(state, logger),
      base_lrs(initial_lrs(optimizers)),
      chosen_precision(run_precision(options, model, device, logger)),
      precision(chosen_precision.precision),
      context{state, engine, logger, options, precision, device},
      scaler(precision == Precision::amp_fp16 ? std::make_unique<LossScaler>() : nullptr),
      selection(context),
      checkpoints(context, *module, optimizers, plugins, base_lrs, scaler.get(), sharded.get(), &selection),
      loss(run_loss(options, model, train->spec())),
      evaluator(context, model, *eval, loss, options.metrics, "", history),
      schedule(options.eval_interval, options.save_interval, eval->size() > 0, checkpoints.has_store()),
      training_log(logger, options),
      model_export(run_failed),
      plots(history, evaluator.metrics()),
      clock(options.save_interval, options.time_limit) {
  if (options.threads > 0) at::set_num_threads(options.threads);
  if (model.training_step() && precision != Precision::fp32)
    throw Error("trainer: a model with its own training step trains in fp32 for now (precision \"" +
                std::string(precision_name(precision)) + "\")");
  NamedOptimizerPointers named;
  for (const auto& o : optimizers) named.emplace_back(o.name, o.optimizer.get());
  RunFacts& facts = state.facts;
  facts.set_optimizers(std::move(named));
  facts.set_device(options.device);
  facts.set_requested_weights(options.eval_weights);
  facts.set_ranks(options.rank, options.world_size, options.communicator);
  facts.set_sharded(sharded != nullptr);
  facts.set_sharding(sharding_name(options.sharding));
  // zero3: the parameters of released units exist as this rank's rows in the shards only.
  facts.set_held_rows([step = sharded.get()] { return step ? step->held_rows() : std::vector<HeldRows>(); });
  facts.set_seed(options.seed);
  facts.set_run_dir(options.run_dir);
  facts.set_model(module.get());
  facts.set_passes(&passes);
  state.progress.max_duration = options.max_duration;
  state.progress.batches_per_epoch = sampler.batches_per_epoch();
  // Progress counts the samples of all ranks: every rank's share of an epoch is the same size.
  state.progress.samples_per_epoch = sampler.samples_per_epoch() * options.world_size;
  if (options.trace)
    engine.set_trace([this](const std::string& line) {
      if (options.rank == 0) std::fprintf(stderr, "trace: %s\n", line.c_str());
    });
  module->to(device);
  add_eval_sets();
  // The console and train/loss come first at every event, before the plugins added after construction.
  detail::CallbackOverrides::record(training_log);
  engine.add(EngineEntry{"training_log", nullptr, &training_log, /*internal=*/true});
}

void Trainer::Impl::add_eval_sets() {
  for (const auto& set : options.eval_sets) {
    if (const std::string problem = eval_set_name_problem(set.name); !problem.empty())
      throw Error("evaluation set \"" + set.name + "\": " + problem);
    if (!set.data) throw Error("evaluation set '" + set.name + "' has no data (a null dataset)");
    for (const auto& other : extra_sets)
      if (other.evaluator->set() == set.name) throw Error("two evaluation sets are named '" + set.name + "'");
    extra_sets.push_back(EvalSetRun{
        std::make_unique<Evaluator>(context, model, *set.data, loss, set.metrics, set.name, history),
        Schedule(set.interval.value_or(options.eval_interval), Time(0, TimeUnit::epoch), set.data->size() > 0,
                 false)});
  }
}

RunLoggerOptions Trainer::Impl::logger_options() const {
  RunLoggerOptions out;
  if (!options.run_dir.empty()) out.metrics_path = metrics_path();
  out.quiet = options.quiet;
  out.rank = options.rank;
  // A run that writes nothing opens no destination (they write under the run folder).
  if (!options.run_dir.empty()) out.destinations = options.loggers;
  return out;
}

std::string Trainer::Impl::metrics_path() const { return (fs::path(options.run_dir) / "metrics.jsonl").string(); }

// init fires once, before the first fit, evaluation or prediction; the run's outputs come after the configured
// plugins, so at fit_end they export what every plugin left.
void Trainer::Impl::ensure_init() {
  if (initialised) return;
  initialised = true;
  // Known classes, so they subscribe to fit_end only (and a trace shows them there alone).
  detail::CallbackOverrides::record(model_export);
  detail::CallbackOverrides::record(plots);
  engine.add(EngineEntry{"model_export", nullptr, &model_export});
  engine.add(EngineEntry{"eval_plots", nullptr, &plots});
  // Fine-tuning's weights, before plugins see the model; a resume's checkpoint holds its own (an "auto" resume that
  // finds none loads them in fit()).
  if (options.resume.empty()) start_from_weights();
  offer_probe();
  // The passes and sets as declared; a request for one set of weights (baton eval --weights) is one pass, the
  // main one with that set: another pass would evaluate the same weights again.
  std::vector<std::string> passes = {"eval"};
  if (options.eval_weights.empty())
    passes.insert(passes.end(), declarations.eval_passes().begin(), declarations.eval_passes().end());
  state.facts.set_eval_passes(std::move(passes));
  state.facts.set_weight_sets(declarations.weight_sets());
  fire(Event::init);
  settle_declarations();
}

void Trainer::Impl::start_from_weights() {
  if (options.init.path.empty()) return;
  logger.info(init_weights(*module, options.init).summary());
}

// What a plugin needs at init to check that the model takes the batches it will make.
void Trainer::Impl::offer_probe() {
  Batch example;
  if (train->size() > 0) example = train->get(at::zeros({1}, at::kLong));
  state.facts.set_probe([this](const Batch& batch) {
    c10::NoGradGuard no_grad;
    ModuleModeScope eval_mode(*module, /*training=*/false);
    // A forward that draws from step_generator() (the diffusion model's noise) draws as batch 0 would when a plugin
    // probes outside a step (at init); inside one it goes on drawing from that step's generator.
    std::optional<StepGeneratorScope> random;
    if (!step_running()) random.emplace(state, StepStream::train, 0);
    return model.forward(to_device(batch, device));
  }, std::move(example));
}

// `baton check`'s last look: the model's forward and the loss once on the run's first training batch, on the run's
// device and in its precision, so data the model cannot take (int8 inputs left unconverted, a field the model does
// not find) fails here and not at batch 1 of the run. No gradients, and in eval mode as the probe above, so the
// model's weights and batch statistics are as they were.
void Trainer::Impl::check_first_batch() {
  if (train->size() == 0) return;
  const Batch batch = to_device(train->get(sampler.batch_indices(0, 0)), device);
  const auto where = [] { return std::string("the first training batch (ep 0 ba 0)"); };
  const auto spec = [this] { return train->spec(); };
  c10::NoGradGuard no_grad;
  ModuleModeScope eval_mode(*module, /*training=*/false);
  // What the run's first step draws from step_generator(): a check trains nothing after it.
  const StepGeneratorScope random(state, StepStream::train, 0);
  const Outputs outputs = detail::autocast_step(precision, device.type(), where, "the model's forward", batch, spec,
                                                [&] { return model.forward(batch); });
  // A model with its own training step computes its loss inside that step, which a check does not run.
  if (!model.training_step())
    detail::autocast_step(precision, device.type(), where, "the loss", batch, spec,
                          [&] { return loss(outputs, batch); });
}

// After init every name the run logs is known: its own (the training loss, the lr, every evaluation pass's
// metrics and losses, with their directions) and what plugins declared. Then each metric a plugin watches is
// checked against them, so a typo or a metric without a direction fails at its key before the run starts.
// trainer.cuda_graphs on a run whose step cannot be recorded is refused before it trains (`baton check` too).
void Trainer::Impl::check_graphs() const {
  if (!options.cuda_graphs) return;
  if (const std::string why = graph_refusal(); !why.empty())
    throw Error("trainer.cuda_graphs = true, but " + why);
}

void Trainer::Impl::settle_declarations() {
  std::vector<std::string> names = {"train/loss", "lr"};
  std::map<std::string, bool> higher_is_better = {{"train/loss", false}};
  for_each_eval_set([&](Evaluator& set, Schedule&) {
    for (auto& [name, higher] : set.metric_directions(state.facts.eval_passes())) {
      higher_is_better[name] = higher;
      names.push_back(std::move(name));
    }
  });
  // The run's own first, then what plugins declared, each once; the run's direction stands for its own metrics.
  for (const auto& name : declarations.metrics())
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  higher_is_better.insert(declarations.directions().begin(), declarations.directions().end());
  state.facts.set_metrics(std::move(names), std::move(higher_is_better), declarations.metric_families());
  check_watched_metrics(state.facts, declarations.watched());
  selection.settle(declarations);
}

// Loads `checkpoint` (when given) after init, for a standalone evaluation or prediction. A set of weights asked
// for must be one a plugin of the run declared (Declarations::weight_set): another would be the raw weights under
// the name asked for.
void Trainer::Impl::prepare_standalone(const std::string& checkpoint, const char* command) {
  check_weight_request(declarations.weight_sets(), options.eval_weights, command);
  ensure_init();
  if (!checkpoint.empty()) checkpoints.load(checkpoint, /*with_training_state=*/false);
}

// The first floating parameter or buffer of the model with a NaN or inf, by name; "" when all are finite.
std::string Trainer::Impl::nonfinite_tensor() const {
  c10::NoGradGuard no_grad;
  for (const auto& item : module->named_parameters())
    if (!item.value().isfinite().all().item<bool>()) return item.key();
  for (const auto& item : module->named_buffers())
    if (item.value().is_floating_point() && !item.value().isfinite().all().item<bool>()) return item.key();
  return "";
}

// After a checkpoint event: a checkpoint just saved with finite weights is the one to name if the run diverges.
// Before any checkpoint was timed: the model's tensors with two optimizer slots each (Adam's) written at 100 MB/s, a
// slow disk's rate with the fsyncs a checkpoint makes, plus a fixed half second for the files and folders.
double Trainer::Impl::first_save_guess() const {
  double bytes = 0;
  for (const auto& p : module->parameters()) bytes += 3.0 * static_cast<double>(p.numel() * p.element_size());
  for (const auto& b : module->buffers()) bytes += static_cast<double>(b.numel() * b.element_size());
  return 0.5 + bytes / 100e6;
}

void Trainer::Impl::note_checkpoint() {
  if (state.last_checkpoint.empty() || state.last_checkpoint == noted_checkpoint) return;
  noted_checkpoint = state.last_checkpoint;
  if (nonfinite_tensor().empty()) last_finite_checkpoint = noted_checkpoint;
}

// --- the public Trainer ------------------------------------------------------------------------------------------

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
  const std::size_t replicated_before = impl_->declarations.replicated_only_reasons().size();
  const std::size_t capturable_before = impl_->declarations.capturable_count();
  collect_declarations(*plugin, id, impl_->declarations);
  // A plugin that reads the model's gradients after the reduce, or writes its weights during training, would act
  // on what a sharded step no longer uses: refused by `baton check` and `baton train` alike (both add plugins).
  if (impl_->sharded && impl_->declarations.replicated_only_reasons().size() > replicated_before)
    throw PluginError("plugin '" + id + "' does not work under distributed.sharding = \"" +
                      sharding_name(impl_->options.sharding) + "\": it " +
                      impl_->declarations.replicated_only_reasons().back() +
                      ", while the optimizer steps each rank's shard of the averaged gradients (use sharding = "
                      "\"none\")");
  if (impl_->declarations.capturable_count() > capturable_before) impl_->engine.set_capturable(id);
  impl_->state.facts.add_plugin(id);
  impl_->plugins.emplace_back(std::move(id), std::move(plugin));
}

void Trainer::check() {
  impl_->ensure_init();
  impl_->check_first_batch();
  impl_->check_graphs();
}
FitResult Trainer::fit() { return impl_->fit(); }

std::vector<EvalResult> Trainer::evaluate_standalone(const std::string& checkpoint) {
  return impl_->evaluate_standalone(checkpoint);
}

PredictResult Trainer::predict(const std::string& checkpoint) { return impl_->predict(*impl_->eval, checkpoint); }

PredictResult Trainer::predict(const Dataset& data, const std::string& checkpoint) {
  return impl_->predict(data, checkpoint);
}

void Trainer::request_stop(std::string reason) { impl_->stopping.request(std::move(reason)); }

const Dataset& Trainer::train_set() const { return *impl_->train; }
const Dataset& Trainer::eval_set() const { return *impl_->eval; }
State& Trainer::state() { return impl_->state; }
Logger& Trainer::logger() { return impl_->logger; }
torch::nn::Module& Trainer::model() { return *impl_->module; }
const TrainerOptions& Trainer::options() const { return impl_->options; }
const PrecisionChoice& Trainer::precision() const { return impl_->chosen_precision; }
const std::string& Trainer::param_groups() const { return impl_->param_groups; }
const std::vector<std::string>& Trainer::warnings() const { return impl_->logger.warnings(); }

}  // namespace baton
