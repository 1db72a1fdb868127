#include "trainer/checkpointer.h"

#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <sstream>

#include <ATen/Context.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "baton/text.h"
#include "baton/model_tensors.h"
#include "baton/optimizer_state.h"
#include "config/config.h"
#include "engine/engine.h"
#include "logging/run_logger.h"
#include "baton/time.h"
#include "trainer/loss_scaler.h"

namespace fs = std::filesystem;

namespace baton {
namespace {

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

}  // namespace

Checkpointer::Checkpointer(const RunContext& run, torch::nn::Module& module,
                           const std::vector<NamedOptimizer>& optimizers, const PluginList& plugins,
                           std::vector<double> base_lrs, LossScaler* scaler)
    : state_(run.state),
      engine_(run.engine),
      logger_(run.logger),
      options_(run.options),
      module_(module),
      optimizers_(optimizers),
      plugins_(plugins),
      base_lrs_(std::move(base_lrs)),
      scaler_(scaler) {
  if (!options_.run_dir.empty()) {
    std::string dir = options_.checkpoint_dir.empty() ? (fs::path(options_.run_dir) / "checkpoints").string()
                                                     : options_.checkpoint_dir;
    store_ = std::make_unique<CheckpointStore>(dir, options_.keep_last);
  }
}

Checkpointer::~Checkpointer() = default;

std::string Checkpointer::name_at(TimeUnit unit) const {
  const auto& now = state_.progress.now;
  if (unit == TimeUnit::epoch && now.batch_in_epoch == 0) return "ep" + std::to_string(now.epoch);
  return "ba" + std::to_string(now.batch);
}

void Checkpointer::event(Event event, bool save, TimeUnit unit) {
  if (!save || !store_) {
    engine_.fire(event);
    return;
  }
  PendingCheckpoint pending((fs::path(store_->dir()) / name_at(unit)).string());
  state_.checkpoint = &pending;
  try {
    engine_.fire(event);
  } catch (...) {
    state_.checkpoint = nullptr;
    throw;
  }
  state_.checkpoint = nullptr;
  write(name_at(unit), pending.files, pending.commit_hooks);
}

void Checkpointer::save_final(TimeUnit unit) {
  if (store_) write(name_at(unit), {}, {});
}

std::string Checkpointer::optimizer_section(std::size_t i) const {
  // The first is "optimizer" whatever its name, so a run of one optimizer reads the checkpoints it always wrote.
  return i == 0 ? std::string("optimizer") : "optimizer." + optimizers_[i].name;
}

CheckpointData Checkpointer::capture(const std::vector<std::pair<std::string, StateDict>>& files) const {
  CheckpointData data;
  data.timestamp = state_.progress.now;
  data.config_text = options_.config_text;

  StateDict model_state;
  for (auto& [name, tensor] : named_model_tensors(module_)) model_state.set_tensor(name, tensor.detach());
  data.sections.emplace_back("model", std::move(model_state));
  for (std::size_t i = 0; i < optimizers_.size(); ++i)
    data.sections.emplace_back(optimizer_section(i), export_optimizer_state(*optimizers_[i].optimizer,
                                                                           named_model_tensors(module_, false)));

  StateDict trainer_state;
  trainer_state.set_int("seed", static_cast<std::int64_t>(options_.seed));
  trainer_state.set_int("world_size", options_.world_size);
  trainer_state.set_int("batch_size", options_.batch_size);
  trainer_state.set_string("max_duration", options_.max_duration.str());
  {
    auto generator = at::globalContext().defaultGenerator(at::kCPU);
    std::lock_guard<std::mutex> lock(generator.mutex());
    trainer_state.set_tensor("rng/cpu", generator.get_state());
  }
  for (const auto& [name, value] : state_.metrics) trainer_state.set_double("metric/" + name, value);
  if (scaler_) scaler_->state_dict(trainer_state);
  data.sections.emplace_back("trainer", std::move(trainer_state));

  for (const auto& [id, plugin] : plugins_) {
    StateDict plugin_state;
    call_plugin([&] { plugin->state_dict(plugin_state); },
                [&] { return "plugin '" + id + "' failed to save its state (state_dict)"; });
    data.sections.emplace_back("plugin/" + id, std::move(plugin_state));
  }
  data.files = files;
  return data;
}

void Checkpointer::write(const std::string& name, const std::vector<std::pair<std::string, StateDict>>& files,
                         const std::vector<std::function<void(const std::string&)>>& hooks) {
  // Every rank captures, since a plugin's state may need a collective (a sharded EMA gathers), and keeps the
  // same record of the save, so all ranks make the same decisions after it; rank 0 alone writes.
  auto started = std::chrono::steady_clock::now();
  CheckpointData data = capture(files);
  last_save_batch_ = state_.progress.now.batch;
  state_.last_checkpoint = (fs::path(store_->dir()) / name).string();
  if (options_.rank != 0) return;
  std::string path = store_->save(name, data);
  state_.last_checkpoint = path;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!options_.quiet) logger_.info("checkpoint " + path + " (" + format_decimals(seconds, 2) + " s)");
  for (const auto& hook : hooks) {
    try {
      call_plugin([&] { hook(path); }, [&] { return "after saving " + path; });
    } catch (const std::exception& e) {
      logger_.warn(e.what());
    }
  }
}

void Checkpointer::restore_model(const CheckpointData& data, const std::string& path) {
  const StateDict* saved = data.section("model");
  if (!saved) throw CheckpointError("checkpoint " + path + " has no model section");
  c10::NoGradGuard no_grad;
  auto expected = named_model_tensors(module_);
  for (auto& [name, tensor] : expected) {
    if (!saved->has_tensor(name))
      throw CheckpointError("checkpoint " + path + ": model tensor '" + name + "' is missing");
    at::Tensor value = saved->tensor(name);
    if (value.sizes() != tensor.sizes() || value.scalar_type() != tensor.scalar_type()) {
      throw CheckpointError("checkpoint " + path + ": model tensor '" + name + "' is " +
                            c10::toString(value.scalar_type()) + format_shape(value.sizes()) + " in the checkpoint but " +
                            c10::toString(tensor.scalar_type()) + format_shape(tensor.sizes()) + " in the model");
    }
    tensor.copy_(value);
  }
  if (saved->tensor_keys().size() != expected.size()) {
    for (const auto& key : saved->tensor_keys()) {
      bool known = false;
      for (const auto& item : expected) known = known || item.first == key;
      if (!known) throw CheckpointError("checkpoint " + path + ": tensor '" + key + "' does not belong to this model");
    }
  }
}

void Checkpointer::restore_training_state(const CheckpointData& data, const std::string& path) {
  std::int64_t saved_world = options_.world_size, saved_batch = options_.batch_size;
  std::string saved_duration;
  for (std::size_t i = 0; i < optimizers_.size(); ++i) {
    const StateDict* saved = data.section(optimizer_section(i));
    if (saved == nullptr) {
      // A model's second optimizer missing from its checkpoint would resume from a fresh state: not bitwise.
      if (i > 0)
        throw CheckpointError("checkpoint " + path + " has no state for optimizer '" + optimizers_[i].name +
                              "' (section " + optimizer_section(i) + "): it was written by a run of other optimizers");
      continue;
    }
    try {
      import_optimizer_state(*optimizers_[i].optimizer, named_model_tensors(module_, /*buffers=*/false), *saved);
    } catch (const CheckpointError& e) {
      const std::string which = optimizers_.size() > 1 ? "optimizer '" + optimizers_[i].name + "': " : "";
      throw CheckpointError("checkpoint " + path + ": " + which + e.what());
    }
  }
  if (const StateDict* saved = data.section("trainer")) {
    if (saved->has("seed") && saved->get_int("seed") != static_cast<std::int64_t>(options_.seed))
      logger_.warn("checkpoint " + path + " was written with seed " + std::to_string(saved->get_int("seed")) +
                   ", this run uses " + std::to_string(options_.seed) + ": the data order will differ");
    if (saved->has_tensor("rng/cpu")) {
      auto generator = at::globalContext().defaultGenerator(at::kCPU);
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(saved->tensor("rng/cpu"));
    }
    for (const auto& key : saved->keys())
      if (key.rfind("metric/", 0) == 0) state_.metrics[key.substr(7)] = saved->get_double(key);
    if (scaler_) scaler_->load_state_dict(*saved);
    if (saved->has("world_size")) saved_world = saved->get_int("world_size");
    if (saved->has("batch_size")) saved_batch = saved->get_int("batch_size");
    if (saved->has("max_duration")) saved_duration = saved->get_string("max_duration");
  }
  // The data and the model are what a resumed run is meant to continue: other settings there (another
  // train_subset mid-epoch, other widths) are allowed, but never silently.
  const auto changed = changed_settings(data.config_text, options_.config_text, {"data", "model"});
  if (!changed.empty()) {
    std::string list;
    for (const auto& item : changed) list += (list.empty() ? "" : ", ") + item;
    logger_.warn("checkpoint " + path + " was written with other data or model settings than this run's: " + list +
                 (data.timestamp.batch_in_epoch > 0 ? "; it resumes mid-epoch, on other data than it started on"
                                                    : ""));
  }
  state_.progress.now = data.timestamp;
  last_save_batch_ = data.timestamp.batch;
  if (saved_world != options_.world_size || saved_batch != options_.batch_size)
    continue_at_new_scale(path, saved_world, saved_batch);
  if (!saved_duration.empty() && saved_duration != options_.max_duration.str())
    continue_to_new_duration(path, saved_duration);
}

void Checkpointer::restore_plugins(const CheckpointData& data, const std::string& path) {
  for (const auto& [id, plugin] : plugins_) {
    const StateDict* saved = data.section("plugin/" + id);
    call_plugin([&] { plugin->load_state_dict(saved ? *saved : StateDict()); },
                [&] { return "plugin '" + id + "' failed to load its state (load_state_dict) from " + path; });
  }
  for (const auto& [name, section] : data.sections) {
    if (name.rfind("plugin/", 0) != 0) continue;
    std::string id = name.substr(7);
    bool present = false;
    for (const auto& p : plugins_) present = present || p.first == id;
    if (!present) logger_.warn("checkpoint " + path + " holds state of plugin '" + id + "', which this run does not use");
  }
}

void Checkpointer::load(const std::string& path, bool with_training_state) {
  engine_.fire(Event::before_load);
  CheckpointData data = load_checkpoint(path);
  restore_model(data, path);
  if (with_training_state) restore_training_state(data, path);
  restore_plugins(data, path);
  state_.last_checkpoint = path;
  engine_.fire(Event::after_load);
}

// A checkpoint written at another world size or per-rank batch size. Every world size draws the same seeded order
// for an epoch, and k global batches of B x W samples cover its first k x B x W samples whatever W is, so the
// position within the epoch carries over through the samples seen; only when they are not a whole number of the
// new global batches are a few of them trained again.
void Checkpointer::continue_at_new_scale(const std::string& path, std::int64_t saved_world, std::int64_t saved_batch) {
  Timestamp& now = state_.progress.now;
  const std::int64_t global = options_.batch_size * options_.world_size;
  logger_.info("checkpoint " + path + " was written by " + std::to_string(saved_world) + " rank(s) at batch size " +
               std::to_string(saved_batch) + "; continuing with " + std::to_string(options_.world_size) +
               " at batch size " + std::to_string(options_.batch_size) + " (global batch " +
               std::to_string(saved_world * saved_batch) + " -> " + std::to_string(global) + ")");
  if (now.batch_in_epoch == 0) return;
  const std::int64_t seen = now.sample_in_epoch, kept = seen / global * global;
  if (kept != seen)
    logger_.warn("resuming mid-epoch with another global batch: " + std::to_string(seen - kept) + " of the " +
                 std::to_string(seen) + " samples epoch " + std::to_string(now.epoch) +
                 " had seen are trained again (resume from an epoch checkpoint to avoid this)");
  now.batch_in_epoch = kept / global;
  now.sample -= seen - kept;
  now.sample_in_epoch = kept;
}

// A checkpoint written by a run of another max_duration. The lr schedule is a function of the run's length, so the
// resumed run continues on the curve of its own length, which is what extending a run asks for; when that moves
// the learning rate, the warning says from what to what.
void Checkpointer::continue_to_new_duration(const std::string& path, const std::string& saved_text) {
  const std::string change = "checkpoint " + path + " was written by a run of max_duration " + saved_text +
                             "; this run has max_duration " + options_.max_duration.str();
  std::optional<Time> saved;
  try {
    saved = Time::parse(saved_text);
  } catch (const TimeError&) {
    // Not a time this baton reads: the change is still worth saying, without the lr.
  }
  if (saved && options_.lr_schedule && !base_lrs_.empty()) {
    Progress before = state_.progress;
    before.max_duration = *saved;
    const double lr_before = base_lrs_.front() * options_.lr_schedule(before);
    const double lr_now = base_lrs_.front() * options_.lr_schedule(state_.progress);
    if (lr_before != lr_now) {
      std::ostringstream lrs;
      lrs << "; the learning-rate schedule follows the new length: the lr at " << format_timestamp(state_.progress.now)
          << " is " << lr_now << " instead of " << lr_before;
      logger_.warn(change + lrs.str());
      return;
    }
  }
  // A warning either way: the run continues a schedule of another length, which the user should see and count.
  logger_.warn(saved ? change + " (the learning rate at this point is unchanged)" : change);
}

std::string Checkpointer::resume() {
  if (options_.resume.empty()) return "";
  std::string path = options_.resume;
  if (path == "auto") {
    if (!store_) throw Error("--resume auto needs a run folder");
    // The folders skipped on the way are reported also when a newer-format checkpoint stops the search.
    std::vector<std::string> warnings;
    std::optional<CheckpointInfo> newest;
    std::exception_ptr refused;
    try {
      newest = store_->newest_valid(warnings);
    } catch (const CheckpointError&) {
      refused = std::current_exception();
    }
    for (const auto& w : warnings) logger_.warn(w);
    if (refused) std::rethrow_exception(refused);
    if (!newest) {
      logger_.info("no checkpoint to resume from in " + store_->dir() + ": starting fresh");
      return "";
    }
    path = newest->path;
  }
  load(path, /*with_training_state=*/true);
  logger_.info("resumed from " + path + " at " + format_timestamp(state_.progress.now));
  return path;
}

}  // namespace baton
