// The trainer reads as its event timeline (docs/events.md): fit → epochs → batches → microbatches, evaluation and
// checkpoints at the points the schedule says, fit_end on every exit path. Its collaborators hold the rest:
// Checkpointer (capture, save, load, resume), Evaluator (the passes and their history), Schedule (when to evaluate
// and save, and what the run's end still needs), TrainLoader (the batches), StopAgreement (when to stop, across
// ranks), and the built-in callbacks: TrainingLog (progress and train/loss) and run_outputs.h's (the final model
// export and charts). trainer_setup.cpp builds the trainer; passes.cpp holds a model's own training step and the
// passes a plugin may run.
#include <chrono>
#include <utility>

#include <ATen/ops/zeros.h>

#include "baton/communicator.h"
#include "memory/cpu_cache.h"
#include "sdk/exception_text.h"
#include "sdk/step_generator.h"
#include "trainer/data_parallel.h"
#include "baton/time.h"
#include "trainer/step_errors.h"
#include "trainer/trainer_impl.h"

namespace baton {
namespace {

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

// --- the run -------------------------------------------------------------------------------------------------------

FitResult Trainer::Impl::fit() {
  if (train->size() == 0) throw Error("the training set is empty");
  const auto started = std::chrono::steady_clock::now();
  fit_started = started;
  // Large CPU tensors through the cache (trainer.cpu_allocator), its peak counted from this fit's start.
  memory::use_cpu_allocator(options.cpu_allocator);
  memory::release_cpu_cache();
  std::exception_ptr failure;
  try {
    ensure_init();
    const bool resumed = !checkpoints.resume().empty();
    if (!resumed && !options.resume.empty()) start_from_weights();  // "auto" found no checkpoint: a fresh start
    if (resumed && options.rank == 0 && !options.run_dir.empty())
      // The end-of-run table and chart cover the whole run: the evaluations before this point are in metrics.jsonl.
      evaluator.load_history(metrics_path(), state.progress.now.batch);
    // Destinations open here, not at construction, so `baton check` (and evaluate or predict) creates no files.
    logger.open_destinations(LoggerContext{
        options.run_dir, resumed, state.progress.now,
        options.logged_config_text.empty() ? options.config_text : options.logged_config_text, &logger});
    broadcast_model(comm(), *module);
    if (sharded) sharded->load_parameters();  // the shards take rank 0's values too
    clock.guess_first_save(first_save_guess());
    if (options.cuda_graphs) {
      check_graphs();
      graphs = std::make_unique<StepGraphs>(device);
      state.capture.active = true;
    }
    fitting = true;
    selection.fit_start();
    fire(Event::fit_start);
    // zero3: from here each unit is whole only while it runs. After fit_start, where plugins see the whole model (an
    // EMA starts from it, channels_last converts it: the units keep that memory format when gathered).
    if (sharded) sharded->release_units();
    module->train();
    while (!state.progress.reached(options.max_duration) && !stop_now()) train_epoch();
    if (graphs)
      logger.info("trainer.cuda_graphs: " + std::to_string(graphs->replays) + " steps replayed from " +
                  std::to_string(graphs->graphs.size()) + " recorded graphs, " + std::to_string(graphs->uncaptured) +
                  " uncaptured, " + std::to_string(graphs->warm) + " warm-up" +
                  (graphs->off.empty() ? std::string() : "; recording stopped: " + graphs->off));
    stop_now();
    // The last batch normally took the final evaluation and checkpoint (train_epoch). A run that ends with no batch
    // at all (resumed at its end) or stopped outside batch_end still gets them here, without events; a stop for the
    // time limit is a pause, and leaves the final evaluation to the run that continues it.
    const std::int64_t now = state.progress.now.batch;
    if (!paused_for_time())
      for_each_eval_set([&](Evaluator& set, const Schedule& when) {
        if (when.final_eval_missing(set.last_batch(), now)) evaluate_in_fit(set);
      });
    if (schedule.final_save_missing(checkpoints.last_save_batch(), now)) {
      checkpoints.save_final(options.save_interval.unit());
      note_checkpoint();
    }
    // zero3: the whole model again (every rank gathers), for the checks and the export below and for the caller.
    if (sharded) sharded->gather_units();
    // A diverged run is a failed run: its weights are not exported, and the user learns where to go back to.
    if (!options.allow_nonfinite)
      if (const std::string tensor = nonfinite_tensor(); !tensor.empty())
        throw Error("the weights are not finite at the end of the run (" + tensor + " holds NaN or inf), so " +
                    "model.safetensors is not written; " +
                    (last_finite_checkpoint.empty()
                         ? std::string("no checkpoint was saved with finite weights")
                         : "the last checkpoint with finite weights is " + last_finite_checkpoint) +
                    ". Lower optimizer.lr (or add gradient_clipping), and add the nan_monitor plugin to stop at the " +
                    "first NaN; trainer.allow_nonfinite = true accepts such a run");
  } catch (...) {
    failure = std::current_exception();
    state.clear_step_data();  // a batch that failed half-way leaves nothing on State for fit_end
  }
  fitting = false;
  train_loader.stop();
  finish(failure);
  memory::release_cpu_cache();  // the memory back to the program that embeds the trainer
  FitResult result;
  result.end = state.progress.now;
  result.evals = history;
  result.stop_cause = stopping.cause();
  result.stop_reason = state.stop_requested() ? state.stop_reason() : "";
  result.last_checkpoint = state.last_checkpoint;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

// fit_end and close run on every exit path; their own errors are reported without hiding the first one.
void Trainer::Impl::finish(std::exception_ptr failure) {
  run_failed = failure != nullptr;
  try {
    if (!engine.closed()) fire(Event::fit_end);
  } catch (const std::exception& e) {
    if (!failure) failure = std::current_exception();
    else logger.warn(e.what());
  }
  close(failure);
}

// How the run ended, as the destinations that record it (mlflow's run status) are told.
RunEnd Trainer::Impl::run_end(const std::exception_ptr& failure) const {
  RunEnd end;
  if (failure) {
    end.failed = true;
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      end.message = detail::exception_text(e);
    } catch (...) {
      end.message = "an exception that is not a std::exception";
    }
  } else if (state.stop_requested()) {
    end.interrupted = stopping.cause() == StopCause::interrupted;
    end.message = state.stop_reason();
  }
  return end;
}

void Trainer::Impl::close(std::exception_ptr failure) {
  for (const auto& message : engine.close()) logger.warn(message);
  logger.flush();
  try {
    logger.close_destinations(run_end(failure));
  } catch (const std::exception& e) {
    if (!failure) failure = std::current_exception();
    else logger.warn(e.what());
  }
  if (failure) std::rethrow_exception(failure);
}

// --- the epoch -----------------------------------------------------------------------------------------------------

void Trainer::Impl::train_epoch() {
  const Timestamp& now = state.progress.now;
  const std::int64_t batches = sampler.batches_per_epoch();
  if (now.batch_in_epoch == 0) {
    fire(Event::iteration_start);
    fire(Event::epoch_start);
  }
  while (now.batch_in_epoch < batches && !state.progress.reached(options.max_duration) && !stop_now()) {
    const double fraction_before = state.progress.fraction();
    const double batch_started = fit_seconds();
    train_batch();
    fire(Event::batch_end, batch_end_side);  // recorded steps gave the capturable plugins theirs (graph_step.cpp)
    state.clear_step_data();
    clock.took(WallClock::Activity::batch, fit_seconds() - batch_started);
    if (evaluate_and_save_after_batch(fraction_before, now.batch_in_epoch == batches)) break;
  }
  if (now.batch_in_epoch == batches) end_epoch();
}

// What follows a batch, as the schedules and the wall clock say. The run's last batch ends with an evaluation and a
// checkpoint through the usual events (plugins see them: exports, checkpoint selection) unless the epoch's end right
// after takes them; a stop for the time limit saves without the final evaluation. Returns whether the run stops
// after this batch.
bool Trainer::Impl::evaluate_and_save_after_batch(double fraction_before, bool epoch_ends) {
  bool stop = stop_now();  // the ranks agree on a rollback here too
  if (state.rollback_requested()) roll_back();
  const bool save_by_time = stopping.save_due();
  const bool final_batch = stop || state.progress.reached(options.max_duration);
  const bool final_eval = state.progress.reached(options.max_duration) || (stop && !paused_for_time());
  AfterBatch next = schedule.after_batch(state.progress, fraction_before, epoch_ends, final_batch);
  bool evaluated = false;
  for_each_eval_set([&](Evaluator& set, const Schedule& when) {
    if (!when.after_batch(state.progress, fraction_before, epoch_ends, final_eval).evaluate) return;
    evaluate_in_fit(set);
    evaluated = true;
  });
  // A stop asked for during the evaluation (an early stopper) makes this the last batch, with its save.
  if (evaluated && !stop && (stop = stop_now()))
    next.save = schedule.after_batch(state.progress, fraction_before, epoch_ends, true).save;
  checkpoint_event(Event::batch_checkpoint, next.save || (save_by_time && schedule.saves_enabled()), TimeUnit::batch);
  return stop;
}

void Trainer::Impl::end_epoch() {
  Timestamp& now = state.progress.now;
  now.advance_epoch();
  fire(Event::epoch_end);
  for_each_eval_set([&](Evaluator& set, const Schedule& when) {
    if (when.eval_due_at_epoch(now.epoch)) evaluate_in_fit(set);
  });
  // The run's end (a stop asked for at this evaluation) saves here, with events, unless its batch saved.
  const bool final_save = stop_now() && schedule.final_save_missing(checkpoints.last_save_batch(), now.batch);
  checkpoint_event(Event::epoch_checkpoint, schedule.save_due_at_epoch(now.epoch) || final_save, TimeUnit::epoch);
  fire(Event::iteration_end);
  fire(Event::iteration_checkpoint);
}

// A plugin asked to go back to the last checkpoint (State::request_rollback): the weights, the optimizer and every
// plugin's state come back from it, the run's time and data order stay, so the batches since it are skipped.
void Trainer::Impl::roll_back() {
  const std::string reason = std::exchange(state.rollback_reason, std::string());
  if (state.last_checkpoint.empty()) {
    logger.warn(reason + "; no checkpoint has been saved yet, so nothing is rolled back (the run goes on)");
    return;
  }
  if (sharded) {
    logger.warn(reason + "; a rollback under distributed.sharding = \"" + sharding_name(options.sharding) +
                "\" is not supported yet, so nothing is rolled back (the run goes on)");
    return;
  }
  const std::string from = state.last_checkpoint;
  const Timestamp at = checkpoints.roll_back(from);
  // The recorded steps point at the optimizer state the checkpoint replaced: recorded again, after a warm-up.
  if (graphs) graphs = std::make_unique<StepGraphs>(device);
  const std::int64_t skipped = state.progress.now.batch - at.batch;
  logger.warn(reason + ": rolled back to " + from + " (" + format_timestamp(at) + "); the " +
              std::to_string(skipped) + " batches since it, to " + format_timestamp(state.progress.now) +
              ", are skipped: their data is not trained on again");
}

// --- the wall clock ------------------------------------------------------------------------------------------------

ClockReading Trainer::Impl::read_clock() const {
  ClockReading reading;
  if (!fitting) return reading;
  const double now = fit_seconds();
  reading.save_due = clock.save_due(now);
  reading.time_up = clock.limit_near(now);
  if (reading.time_up) reading.why = clock.stop_reason(now);
  return reading;
}

void Trainer::Impl::evaluate_in_fit(Evaluator& set) {
  const double started = fit_seconds();
  set.run_in_fit();
  if (!history.empty()) selection.evaluated(history.back());
  clock.took(WallClock::Activity::evaluation, fit_seconds() - started);
}

void Trainer::Impl::checkpoint_event(Event event, bool save, TimeUnit unit) {
  const double started = fit_seconds();
  checkpoints.event(event, save, unit);
  if (save && checkpoints.has_store()) {
    const double now = fit_seconds();
    clock.took(WallClock::Activity::save, now - started);
    clock.saved_at(now);
  }
  note_checkpoint();
}

// --- one batch -----------------------------------------------------------------------------------------------------

// Draws the batch and trains on it: after_dataloader … after_train_batch, then the optimizer step (after
// after_train_batch, as in Composer, so gradient clipping sees the averaged gradients).
void Trainer::Impl::train_batch() {
  Timestamp& now = state.progress.now;
  const Scoped<bool> stepping(in_step, true);
  // Everything the step draws (plugins from after_dataloader, the model's forward) comes from the step's seed.
  StepGeneratorScope step_random(state, StepStream::train, static_cast<std::uint64_t>(now.batch));
  fire(Event::before_dataloader);
  std::int64_t drawn = 0;  // time counts the samples drawn, whatever a plugin makes of the batch on State
  {
    Batch batch = train_loader.next(state.progress, options.max_duration);
    drawn = batch.size();
    state.batch = to_device(batch, device);
  }
  fire(Event::after_dataloader);
  state.capture.variant.clear();
  state.capture.uncaptured.clear();
  fire(Event::batch_start);
  apply_lr_schedule();
  fire(Event::before_train_batch);
  batch_end_side = EngineSide::all;
  if (graphs && graph_step(drawn)) return;
  eager_step();
  now.advance_batch(drawn * options.world_size);
}

// The step as it runs without graphs: zero the gradients, forward, loss, backward (or the model's own step),
// reduce, after_train_batch, then the optimizer step unless skipped.
void Trainer::Impl::eager_step() {
  zero_gradients();
  broadcast_buffers(comm(), *module);
  state.skip_step = false;
  if (model.training_step()) {
    own_training_step();
    fire(Event::after_train_batch);
    if (state.skip_step)
      throw Error("a plugin asked to skip the optimizer step of " + step_where() + " (State::skip_step), but the " +
                  "model steps its own optimizers and has stepped already");
  } else {
    const Batch step_batch = state.batch;  // what a recomputation of the gradients starts from
    forward_backward();
    step_overflow = reduce_gradients();
    {
      const Scoped<const Batch*> recomputable(passes.step_batch, &step_batch);
      fire(Event::after_train_batch);
    }
    // Ranks that disagreed on a skip would leave the replicas (or the shards) apart: one rank's skip is every rank's.
    const bool skip = comm() ? comm()->any(state.skip_step) : state.skip_step;
    if (!step_overflow && !skip) step_optimizers();
    if (scaler) scaler->update(step_overflow);
  }
}

void Trainer::Impl::apply_lr_schedule() {
  if (!options.lr_schedule) return;
  const double factor = options.lr_schedule(state.progress);
  std::size_t i = 0;
  for (const auto& o : optimizers)
    for (auto& group : o.optimizer->param_groups())
      if (i < base_lrs.size()) group.options().set_lr(base_lrs[i++] * factor);
}

// Where a failing step was, for its message: "training batch 3 of epoch 1 (ep 0 ba 2)".
std::string Trainer::Impl::step_where() const {
  const auto& now = state.progress.now;
  return "training batch " + std::to_string(now.batch_in_epoch + 1) + " of epoch " + std::to_string(now.epoch + 1) +
         " (" + format_timestamp(now) + ")";
}

// Forward, loss and backward of one step on State's data, firing before_forward … before_backward. Each value is
// read back from State after the events that may replace it (Composer's state.batch, state.outputs, state.loss),
// so a plugin's inputs, targets, outputs or loss term take effect.
at::Tensor Trainer::Impl::step_once() {
  const auto where = [this] { return step_where(); };
  const auto spec = [this] { return train->spec(); };
  fire(Event::before_forward);
  state.outputs = detail::autocast_step(precision, device.type(), where, "the model's forward", state.batch, spec,
                                        [&] { return model.forward(state.batch); });
  fire(Event::after_forward);
  fire(Event::before_loss);
  state.loss = detail::autocast_step(precision, device.type(), where, "the loss", state.batch, spec,
                                     [&] { return loss(state.outputs, state.batch); });
  fire(Event::after_loss);
  fire(Event::before_backward);
  return state.loss;
}

// The batch's forward and backward passes. With microbatch_size set (Composer's device_train_microbatch_size) the
// batch is split: before_forward … after_backward fire per microbatch with that microbatch on State, and each
// microbatch's loss is weighted by its share of the batch, so the accumulated gradients are those of the whole
// batch's mean loss. After the last one State holds the whole batch again, the outputs of all microbatches and the
// weighted sum of their losses.
void Trainer::Impl::forward_backward() {
  try {
    forward_backward_batches();
  } catch (const std::exception& e) {
    // zero3: a unit the model's forward never ran through run_unit stays released, so the forward fails on its
    // empty parameters; say which units and why rather than leave a shape error.
    std::string never;
    if (sharded && sharded->released())
      for (std::size_t u = 0; u < sharded->units().size(); ++u)
        if (sharded->unit_runs(u) == 0) never += (never.empty() ? "" : ", ") + sharded->units()[u].name;
    if (never.empty()) throw;
    throw Error(std::string(e.what()) + "\nsharding \"zero3\": the units " + never + " had not run yet when " +
                "this failed. A unit the model's forward does not run through baton::run_unit (baton/unit.h) keeps " +
                "its parameters released (empty) outside it: run each unit through run_unit, or name the modules " +
                "the forward does run so in [distributed] units (TrainerOptions::units)");
  }
}

void Trainer::Impl::forward_backward_batches() {
  const std::int64_t n = state.batch.size();
  const std::int64_t step = options.microbatch_size;
  if (step <= 0 || step >= n) {
    const at::Tensor loss = step_once();
    if (sharded) sharded->reduce_during_backward(true);  // each bucket reduced as its gradients complete
    backward(loss);
    fire(Event::after_backward);
    return;
  }
  const Batch whole = state.batch;
  std::vector<Outputs> outputs;
  at::Tensor total;
  for (std::int64_t begin = 0; begin < n; begin += step) {
    const std::int64_t end = std::min(n, begin + step);
    state.batch = whole.slice(begin, end);
    const at::Tensor weighted = step_once() * (static_cast<double>(end - begin) / static_cast<double>(n));
    // Sharded, the last microbatch's backward reduces each bucket as its gradients complete; the earlier ones
    // accumulate the model's gradients unreduced.
    if (sharded) sharded->reduce_during_backward(end == n);
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
}

// amp_fp16 backpropagates the scaled loss; the gradients are unscaled before anything reads them.
void Trainer::Impl::backward(const at::Tensor& loss) {
  detail::during_step([this] { return step_where(); }, "backward", state.batch, [this] { return train->spec(); }, [&] {
    if (scaler)
      scaler->scale(loss).backward();
    else
      loss.backward();
  });
}

// The gradients every plugin sees from after_train_batch on and the step uses: averaged across ranks, then unscaled
// (amp_fp16). Returns whether they hold an inf or a NaN, when the scaler skips the step; averaging spreads one rank's
// to all, so every rank skips the same steps. Sharded, the optimizer steps the rank's shard of the averaged
// gradients (reduce-scattered), and one rank's inf lands in one rank's shard only: the ranks agree on it.
bool Trainer::Impl::reduce_gradients() {
  if (sharded) {
    sharded->reduce_gradients();
    const bool overflow = scaler && scaler->unscale(sharded->shard_parameters());
    return scaler && comm() ? comm()->any(overflow) : overflow;
  }
  average_gradients(comm(), *module);
  return scaler && scaler->unscale(module->parameters());
}

// Before a step's backward. Sharded, the optimizer holds the shards, not the model's parameters, whose .grad would
// otherwise accumulate across steps (zero1 keeps it after the reduce).
void Trainer::Impl::zero_gradients() {
  for (const auto& o : optimizers) o.optimizer->zero_grad();
  if (sharded) sharded->zero_grad();
}

// Sharded, the optimizer stepped this rank's shard: the all-gather makes the model's parameters whole again on every
// rank, in place, for the next forward and for every plugin from batch_end on.
void Trainer::Impl::step_optimizers() {
  for (const auto& o : optimizers) o.optimizer->step();
  if (sharded) sharded->gather_parameters();
}

// --- without training ----------------------------------------------------------------------------------------------

std::vector<EvalResult> Trainer::Impl::evaluate_standalone(const std::string& checkpoint) {
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

PredictResult Trainer::Impl::predict(const Dataset& data, const std::string& checkpoint) {
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

}  // namespace baton
