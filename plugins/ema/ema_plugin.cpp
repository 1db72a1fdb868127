// The `ema` plugin: an exponential moving average of the model's weights (Composer's EMA algorithm, without its
// bugs), evaluated in place of (or beside) the raw weights, exported with every checkpoint, and the file best/ shows
// for the checkpoints the run selects (its `select` asks the run for that selection). A thin adapter over
// baton::ExponentialMovingAverage; docs/ema.md describes it for users.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include <torch/nn/module.h>

#include "baton/ema.h"
#include "baton/model_tensors.h"
#include "baton/plugin.h"
#include "baton/posthoc.h"
#include "baton/safetensors.h"

#include "ema_schedule.h"
#include "ema_settings.h"

namespace fs = std::filesystem;

namespace baton::ema_plugin {

using posthoc::PosthocTracker;

namespace {

constexpr const char* kShadowPrefix = "shadow/";
constexpr const char* kExportFile = "ema.safetensors";
constexpr const char* kRawLabel = "eval_raw";
// The weight sets this plugin keeps (declared: Declarations::weight_set), which `baton eval/predict --weights` may ask for.
constexpr const char* kEmaSet = "ema";
constexpr const char* kRawSet = "raw";

// `averaged`: the options of the run's EMA (sharded over the ranks, following zero3's rows), which the profiles
// share but for their dtype.
std::optional<PosthocTracker> make_tracker(const EmaSettings& settings, EmaOptions averaged) {
  if (!settings.posthoc.enabled) return std::nullopt;
  averaged.float32 = settings.posthoc.float32;
  return PosthocTracker(settings.posthoc.sigma_rels, averaged);
}

NamedTensors model_state_copy(const torch::nn::Module& model) {
  NamedTensors out = named_model_tensors(model);
  for (auto& item : out) item.second = item.second.detach().clone();
  return out;
}

class EmaAlgorithm final : public Algorithm {
 public:
  explicit EmaAlgorithm(const PluginConfig& config)
      : settings_(parse_settings(config)),
        ema_(settings_.ema),
        posthoc_(make_tracker(settings_, settings_.ema)) {}

  // One line per event this plugin acts on (docs/plugins.md's worked example).
  void subscribe(Subscriptions& events) override {
    events.on(Event::init, this, &EmaAlgorithm::on_init);
    events.on(Event::after_load, this, &EmaAlgorithm::on_after_load);
    events.on(Event::fit_start, this, &EmaAlgorithm::on_fit_start);
    events.on(Event::batch_start, this, &EmaAlgorithm::on_batch_start);
    events.on(Event::batch_end, this, &EmaAlgorithm::on_batch_end);
    events.on(Event::epoch_end, this, &EmaAlgorithm::on_epoch_end);
    events.on(Event::eval_start, this, &EmaAlgorithm::on_eval_start);
    events.on(Event::eval_end, this, &EmaAlgorithm::on_eval_or_predict_end);
    events.on(Event::predict_start, this, &EmaAlgorithm::on_predict_start);
    events.on(Event::predict_end, this, &EmaAlgorithm::on_eval_or_predict_end);
    events.on(Event::batch_checkpoint, this, &EmaAlgorithm::on_checkpoint);
    events.on(Event::epoch_checkpoint, this, &EmaAlgorithm::on_checkpoint);
    events.on(Event::fit_end, this, &EmaAlgorithm::on_fit_end);
  }

  // What the run must know before it starts: the sets `--weights` may name, the metrics this plugin logs, the
  // run's checkpoint selection it asks for, the file best/ shows, and the raw weights' evaluation pass.
  void declare(Declarations& run) const override {
    run.weight_set(kEmaSet);
    run.weight_set(kRawSet);
    run.metric("ema/smoothing");
    run.metric("ema/half_life_batches");
    if (settings_.select.enabled) run.keep_best(selection_metric(), settings_.select.keep);
    run.best_file(kExportFile);
    if (settings_.eval == EvalMode::both) run.eval_pass(kRawLabel);
    // trainer.cuda_graphs may record the update: one multi-tensor lerp at a fixed smoothing on the model's device.
    // A warmup's smoothing changes with every update, post-hoc profiles each have their own, and an average in host
    // memory is copied out of the GPU: those updates run after the recorded step.
    if (settings_.warmup == Warmup::none && !settings_.posthoc.enabled && settings_.ema.device.empty())
      run.capturable();
  }

  void state_dict(StateDict& out) const override {
    if (!ema_.initialized()) return;
    if (ema_.sharded()) {
      // Each rank's rows, under the model's names: the checkpoint's ema/ folder, written by every rank at once.
      ema_.save_rows(out);
    } else {
      // The average the checkpoint event just took for ema.safetensors, or anew.
      NamedTensors shadow = checkpoint_shadow_ ? std::move(*checkpoint_shadow_) : ema_.state_dict();
      for (auto& [name, tensor] : shadow) out.set_tensor(kShadowPrefix + name, tensor);
    }
    checkpoint_shadow_.reset();
    out.set_bool("started", started_);
    out.set_int("updates", updates_);
    out.set_double("smoothing", settings_.base_smoothing());
    if (posthoc_) posthoc_->save(out);
  }

  void load_state_dict(const StateDict& in) override {
    // Checkpoints written without this plugin: the EMA restarts from the loaded weights at after_load, where a
    // logger is at hand to say so.
    restart_from_weights_ = !in.has("started");
    restart_posthoc_ = posthoc_ && !PosthocTracker::saved_in(in);
    if (restart_from_weights_) return;
    if (!ema_.initialized()) throw Error("the EMA is loaded before init built it");
    std::vector<std::pair<std::string, at::Tensor>> shadow;
    const std::string prefix = kShadowPrefix;
    for (const auto& key : in.tensor_keys())
      if (key.rfind(prefix, 0) == 0) shadow.emplace_back(key.substr(prefix.size()), in.tensor(key));
    try {
      // A sharded run's rows (at any world size: each rank reads its own), or the whole average.
      if (ema_.saved_as_rows(in))
        ema_.load_rows(in);
      else
        ema_.load_state_dict(shadow, /*strict=*/true);
    } catch (const Error& e) {
      throw CheckpointError(std::string("the EMA in the checkpoint does not match the model: ") + e.what());
    }
    started_ = in.get_bool("started");
    updates_ = in.get_int("updates");
    if (posthoc_ && !restart_posthoc_) posthoc_->load(in);
  }

  void close() override { restore_raw(); }

 private:
  // The sub-module at a dotted path ("generator", "nets.g"): the EMA follows, evaluates and exports it alone (a
  // GAN's G_ema), the rest of the model keeping its raw weights throughout.
  static torch::nn::Module* sub_module(torch::nn::Module& root, const std::string& path) {
    std::string names;
    for (const auto& item : root.named_modules("", /*include_self=*/false)) {
      if (item.key() == path) return item.value().get();
      if (item.key().find('.') == std::string::npos) names += (names.empty() ? "" : ", ") + item.key();
    }
    throw Error("module = \"" + path + "\": the model has no such sub-module (its sub-modules: " +
                (names.empty() ? std::string("none") : names) + ")");
  }

  WatchedMetric selection_metric() const {
    const PluginConfig& table = settings_.select.table;
    return WatchedMetric{settings_.select.metric, table.full_key("metric"), table.where("metric"),
                         settings_.select.maximize};
  }

  void on_init(State& state, Logger&) {
    if (state.facts.model() == nullptr) throw Error("the ema plugin needs a model");
    model_ = settings_.module.empty() ? state.facts.model() : sub_module(*state.facts.model(), settings_.module);
    // The request for a set is the run's (checked against what plugins declare); another plugin's set means the
    // raw weights here, for that plugin to swap its own in.
    eval_weights_ = state.facts.requested_weights();
    // Data-parallel ranks hold identical weights, so each keeps only its rows of the average.
    const bool shard = settings_.sharded.value_or(true) && state.facts.communicator() && state.facts.world_size() > 1;
    const bool zero3 = state.facts.sharding() == "zero3";
    if (zero3) check_zero3(state);
    if (shard || zero3) {
      EmaOptions options = settings_.ema;
      if (shard) options.shard_over = state.facts.communicator();
      // zero3 releases the parameters between steps: the EMA follows this rank's rows of them in the run's shards.
      if (zero3) options.held_rows = held_rows_of(state.facts, settings_.module);
      ema_ = ExponentialMovingAverage(options);
      // The post-hoc profiles likewise: each rank keeps its rows of every profile, gathered for a snapshot.
      posthoc_ = make_tracker(settings_, options);
    } else if (state.facts.rank() != 0) {
      posthoc_.reset();  // profiles over whole weights: rank 0's alone, which writes the snapshots
    }
    // Built now so that a checkpoint loaded before fit (resume, baton eval) has somewhere to go.
    ema_.reset(*model_);
    started_ = false;
    updates_ = 0;
    if (posthoc_) posthoc_->reset(*model_);
  }

  // What this plugin cannot do yet when the run is sharded zero3, refused before the run starts.
  void check_zero3(const State& state) const {
    if (state.facts.world_size() > 1 && settings_.sharded.has_value() && !*settings_.sharded)
      throw Error("ema: sharded = false under sharding \"zero3\": each rank holds only its rows of the weights, so "
                  "the average is sharded as they are (leave sharded out)");
  }

  // The run's held rows (RunFacts::held_rows), named as in `module` when the EMA follows a sub-module.
  static std::function<std::vector<HeldRows>()> held_rows_of(const RunFacts& facts, const std::string& module) {
    const RunFacts* run = &facts;  // the run's facts outlive its plugins' calls
    const std::string prefix = module.empty() ? "" : module + ".";
    return [run, prefix] {
      std::vector<HeldRows> out;
      for (auto& held : run->held_rows())
        if (held.name.compare(0, prefix.size(), prefix) == 0) {
          held.name = held.name.substr(prefix.size());
          out.push_back(std::move(held));
        }
      return out;
    };
  }

  void on_after_load(State& state, Logger& logger) {
    if (restart_from_weights_) {
      restart_from_weights_ = false;
      ema_.reset(*model_);
      started_ = state.progress.reached(settings_.ema_start);
      updates_ = started_ ? 1 : 0;
      logger.warn("ema: " + state.last_checkpoint +
                  " holds no EMA state (saved without the ema plugin): the EMA starts from the loaded weights");
    }
    ema_.to(target_device(state));
    if (posthoc_) after_load_posthoc(state, logger);
  }

  void after_load_posthoc(State& state, Logger& logger) {
    if (restart_posthoc_) {
      restart_posthoc_ = false;
      posthoc_->restart_at(*model_, state.progress.now.batch);
      logger.warn("ema: " + state.last_checkpoint + " holds no post-hoc EMA profiles: they start from the loaded "
                  "weights, as if those had been the weights since batch 0");
    }
    posthoc_->to(target_device(state));
  }

  void on_fit_start(State& state, Logger& logger) {
    ema_.to(target_device(state));
    logger.info(settings_.describe(state.progress.batches_per_epoch));
    if (ema_.sharded())
      logger.info("ema: sharded over " + std::to_string(state.facts.world_size()) + " ranks: each holds " +
                  format_bytes(ema_.bytes()) + " of the " + format_bytes(ema_.full_bytes()) +
                  " average and updates it without communication");
    warn_if_never_started(state, logger);
    logger.log_metric("ema/smoothing", settings_.base_smoothing());
    double half_life = settings_.half_life_batches(state.progress.batches_per_epoch);
    if (std::isfinite(half_life)) logger.log_metric("ema/half_life_batches", half_life);
    if (posthoc_) posthoc_fit_start(state, logger);
  }

  // The average starts at the first update point at or after ema_start; at the run's end or later it never
  // departs from the weights, so every "EMA" result would be the raw weights under another name.
  void warn_if_never_started(const State& state, Logger& logger) const {
    if (started_) return;
    const std::int64_t start = state.progress.to_batches(settings_.ema_start);
    const std::int64_t end = state.progress.to_batches(state.progress.max_duration);
    if (start < end) return;
    logger.warn("ema: ema_start " + settings_.ema_start.str() + " (batch " + std::to_string(start) +
                ") is at or beyond max_duration " + state.progress.max_duration.str() + " (batch " +
                std::to_string(end) + "): the average never starts, so the EMA evaluations and ema.safetensors hold "
                "the raw weights; set an earlier ema_start");
  }

  void posthoc_fit_start(State& state, Logger& logger) {
    posthoc_->to(target_device(state));
    // Snapshots newer than the checkpoint resumed from belong to a run this one no longer continues.
    if (writes_snapshots(state)) posthoc_->remove_snapshots_after_now(state.facts.run_dir());
    std::string widths;
    for (std::size_t i = 0; i < posthoc_->profiles(); ++i)
      widths += (i == 0 ? "" : ", ") + posthoc_->profile_name(i) + " (gamma " +
                std::to_string(posthoc_->gamma(i)) + ")";
    logger.info("ema: post-hoc EMA profiles " + widths + " hold " + format_bytes(posthoc_->bytes()) +
                "; snapshots every " + settings_.posthoc.snapshot_every.str() + " to posthoc/");
  }

  void update_posthoc(State& state) {
    if (posthoc_ && state.progress.now.batch > posthoc_->time()) posthoc_->update(*model_, state.progress.now.batch);
  }

  // Every rank that holds profiles: sharded ones are gathered (a collective), and rank 0 writes.
  void write_snapshots(State& state, Logger& logger) {
    if (state.facts.run_dir().empty()) return;
    std::int64_t written = posthoc_->write_snapshots(state.facts.run_dir(), writes_snapshots(state));
    if (written == 0) return;
    logger.info("ema: post-hoc snapshots at batch " + std::to_string(posthoc_->time()) + ": " + format_bytes(written) +
                " written, " + format_bytes(posthoc::snapshot_disk_use(state.facts.run_dir())) + " in " + state.facts.run_dir() + "/posthoc");
  }

  static bool writes_snapshots(const State& state) { return !state.facts.run_dir().empty() && state.facts.rank() == 0; }

  void update(State& state) {
    if (!started_) {
      if (!state.progress.reached(settings_.ema_start)) return;
      ema_.reset(*model_);
      ema_.to(target_device(state));
      started_ = true;
      updates_ = 1;
      return;
    }
    // A replayed step's update ran in the graph (trainer.cuda_graphs); the count goes on here.
    if (!state.capture.replayed) ema_.update(*model_, warmup_smoothing(settings_, settings_.base_smoothing(), updates_));
    ++updates_;
  }

  static bool keeps(const std::string& set) { return set == kEmaSet || set == kRawSet; }

  // The set asked for (baton eval/predict --weights; another plugin's set: the raw weights, for that plugin to
  // swap its own in), else the configured one; eval_raw is the raw weights' pass.
  bool wants_ema_weights() const {
    if (!eval_weights_.empty()) return eval_weights_ == kEmaSet;
    return settings_.eval != EvalMode::raw;
  }

  void swap_in_if(bool wanted) {
    // Before ema_start there is no average yet: the raw weights are used.
    if (wanted && started_ && !ema_.swapped()) ema_.swap(*model_);
  }

  void on_eval_start(State& state, Logger&) { swap_in_if(state.eval_label == "eval" && wants_ema_weights()); }

  void on_predict_start(State& state, Logger&) {
    swap_in_if(wants_ema_weights());
    // Says which set the prediction uses (PredictResult::weights): before ema_start it is the raw one. A request
    // for another plugin's set is that plugin's to name.
    if (eval_weights_.empty() || keeps(eval_weights_)) state.weights = ema_.swapped() ? kEmaSet : kRawSet;
  }

  void on_batch_start(State& state, Logger&) {
    checkpoint_shadow_.reset();
    restore_raw();
    if (state.capture.active) say_step_variant(state);
  }

  // trainer.cuda_graphs: what this step's batch_end will do (nothing, or an update at the fixed smoothing) as the
  // step's variant; the first update, which copies the weights, runs uncaptured.
  void say_step_variant(State& state) const {
    Progress at_end = state.progress;
    at_end.now.advance_batch(state.batch.size() * state.facts.world_size());
    const bool due = update_due(Event::batch_end, at_end, settings_.update_interval);
    if (due && !started_ && at_end.reached(settings_.ema_start)) {
      state.capture.uncaptured = "the EMA's first update copies the weights into the average";
      return;
    }
    state.capture.variant.push_back(due && started_ ? 1 : 0);
  }

  void on_batch_end(State& state, Logger& logger) { on_update_point(Event::batch_end, state, logger); }
  void on_epoch_end(State& state, Logger& logger) { on_update_point(Event::epoch_end, state, logger); }

  void on_update_point(Event event, State& state, Logger& logger) {
    if (update_due(event, state.progress, settings_.update_interval)) {
      update(state);
      update_posthoc(state);
    }
    if (posthoc_ && update_due(event, state.progress, settings_.posthoc.snapshot_every))
      write_snapshots(state, logger);
  }

  void on_eval_or_predict_end(State&, Logger&) { restore_raw(); }
  void restore_raw() {
    if (ema_.initialized() && ema_.swapped()) ema_.swap(*model_);
  }

  void on_checkpoint(State& state, Logger&) {
    if (state.checkpoint == nullptr) return;
    // A sharded EMA is saved as each rank's rows (state_dict) and never gathered for a checkpoint: the checkpoint's
    // ema/ folder is its export (best/ and model.init put the file together from it), so before ema_start it holds
    // the raw weights, as ema.safetensors would (the average is reset from them when it starts).
    if (ema_.sharded()) {
      if (!started_) ema_.reset(*model_);
      return;
    }
    NamedTensors weights = inference_weights(state);  // every rank: a sharded EMA gathers
    if (started_) checkpoint_shadow_ = weights;   // the same tensors serve state_dict right after
    state.checkpoint->add_tensors_file(kExportFile, export_file(weights));
  }

  // Every ema.safetensors (in checkpoints, best/ and the run folder) is this, with the keys docs/ema.md lists.
  StateDict export_file(const NamedTensors& weights) const {
    StateDict file;
    for (const auto& [name, tensor] : weights) file.set_tensor(name, tensor);
    file.set_bool("ema_started", started_);
    file.set_int("ema_updates", updates_);
    file.set_double("smoothing", settings_.base_smoothing());
    return file;
  }

  void on_fit_end(State& state, Logger& logger) {
    // The last weights are always a snapshot, so synthesis can target the end of training.
    if (posthoc_) write_snapshots(state, logger);
    checkpoint_shadow_.reset();
    restore_raw();
    if (state.facts.run_dir().empty() || !ema_.initialized()) return;
    if (state.facts.rank() != 0 && !(started_ && ema_.sharded())) return;
    NamedTensors weights = inference_weights(state);  // a collective when sharded: every rank takes part
    if (state.facts.rank() != 0) return;
    fs::create_directories(state.facts.run_dir());
    write_state_dict_atomic((fs::path(state.facts.run_dir()) / kExportFile).string(), export_file(weights));
  }

  // What inference should use: the average once it has started, the raw weights before.
  NamedTensors inference_weights(const State& state) {
    if (started_) return ema_.state_dict();
    // zero3 before the average starts: the raw weights exist as each rank's rows only. The average, unused until
    // it starts (and reset then), takes them and gathers them: a collective, as every rank checkpoints.
    if (!state.facts.held_rows().empty()) {
      ema_.reset(*model_);
      return ema_.state_dict();
    }
    return model_state_copy(*model_);
  }

  std::string target_device(const State& state) const {
    return settings_.ema.device.empty() ? state.facts.device() : settings_.ema.device;
  }

  EmaSettings settings_;
  std::string eval_weights_;  // the set a standalone evaluation or prediction asked for (RunFacts::requested_weights)
  ExponentialMovingAverage ema_;
  torch::nn::Module* model_ = nullptr;
  bool started_ = false;
  std::int64_t updates_ = 0;
  bool restart_from_weights_ = false;
  std::optional<PosthocTracker> posthoc_;
  bool restart_posthoc_ = false;
  mutable std::optional<NamedTensors> checkpoint_shadow_;
};

}  // namespace
}  // namespace baton::ema_plugin

BATON_PLUGIN(baton::ema_plugin::EmaAlgorithm, "ema", "1.0.0",
             "exponential moving average of the weights: swap-to-EMA evaluation, export, checkpoint selection")
