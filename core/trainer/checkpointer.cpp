#include "trainer/checkpointer.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "baton/text.h"
#include "baton/model_tensors.h"
#include "baton/communicator.h"
#include "baton/optimizer_state.h"
#include "config/config.h"
#include "engine/engine.h"
#include "logging/run_logger.h"
#include "baton/time.h"
#include "sharding/sharded_state.h"
#include "sharding/zero.h"
#include "trainer/checkpoint_selection.h"
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
                           std::vector<double> base_lrs, LossScaler* scaler,
                           sharding::ShardedStep* sharded, CheckpointSelection* selection)
    : state_(run.state),
      engine_(run.engine),
      logger_(run.logger),
      options_(run.options),
      module_(module),
      optimizers_(optimizers),
      plugins_(plugins),
      base_lrs_(std::move(base_lrs)),
      scaler_(scaler),
      sharded_(sharded),
      selection_(selection) {
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
  // The trainer's one optimizer is "optimizer"; a model's own are each under their name ("optimizer.generator"),
  // so reading a checkpoint never depends on the order they were given in.
  const std::string& name = optimizers_[i].name;
  return name == "optimizer" ? name : "optimizer." + name;
}

const StateDict* Checkpointer::saved_optimizer(const CheckpointData& data, std::size_t i) const {
  if (const StateDict* named = data.section(optimizer_section(i))) return named;
  // Checkpoints written before every optimizer was named kept a model's first one as plain "optimizer".
  return i == 0 ? data.section("optimizer") : nullptr;
}

CheckpointData Checkpointer::capture(const std::vector<std::pair<std::string, StateDict>>& files) const {
  CheckpointData data;
  data.timestamp = state_.progress.now;
  data.config_text = options_.config_text;

  // Sharded, the parameters the ranks shard and the optimizer's state go to each rank's shard files instead.
  std::set<std::string> in_shards;
  if (sharded_)
    for (const auto& slot : sharded_->layout().slots()) in_shards.insert(slot.name);
  StateDict model_state;
  for (auto& [name, tensor] : named_model_tensors(module_))
    if (!in_shards.count(name)) model_state.set_tensor(name, tensor.detach());
  data.sections.emplace_back("model", std::move(model_state));
  if (!sharded_)
    for (std::size_t i = 0; i < optimizers_.size(); ++i)
      data.sections.emplace_back(optimizer_section(i), export_optimizer_state(*optimizers_[i].optimizer,
                                                                             named_model_tensors(module_, false)));

  StateDict trainer_state;
  trainer_state.set_int("seed", static_cast<std::int64_t>(options_.seed));
  trainer_state.set_int("world_size", options_.world_size);
  trainer_state.set_int("batch_size", options_.batch_size);
  trainer_state.set_string("max_duration", options_.max_duration.str());
  if (sharded_) trainer_state.set_string("sharding", sharding_name(options_.sharding));
  {
    auto generator = at::globalContext().defaultGenerator(at::kCPU);
    std::lock_guard<std::mutex> lock(generator.mutex());
    trainer_state.set_tensor("rng/cpu", generator.get_state());
  }
  for (const auto& [name, value] : state_.metrics) trainer_state.set_double("metric/" + name, value);
  if (scaler_) scaler_->state_dict(trainer_state);
  if (selection_) selection_->save(trainer_state);
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
  // Ranked before the capture, so the checkpoint holds its own place in the selection.
  const bool selected = selection_ && selection_->offer(name, (fs::path(store_->dir()) / name).string());
  CheckpointData data = capture(files);
  last_save_batch_ = state_.progress.now.batch;
  state_.last_checkpoint = (fs::path(store_->dir()) / name).string();
  std::vector<RowFolder> folders = plugin_row_folders(data);
  if (sharded_ || !folders.empty()) {
    std::string path = write_sharded(name, data, std::move(folders));
    if (options_.rank != 0) return;
    state_.last_checkpoint = path;
  } else {
    if (options_.rank != 0) return;
    state_.last_checkpoint = store_->save(name, data);
  }
  const std::string& path = state_.last_checkpoint;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!options_.quiet) logger_.info("checkpoint " + path + " (" + format_decimals(seconds, 2) + " s)");
  for (const auto& hook : hooks) {
    try {
      call_plugin([&] { hook(path); }, [&] { return "after saving " + path; });
    } catch (const std::exception& e) {
      logger_.warn(e.what());
    }
  }
  // best/ follows once the checkpoint is on disk; a copy that fails leaves the run and the checkpoint as they are.
  if (selected) {
    try {
      selection_->publish(name);
    } catch (const std::exception& e) {
      logger_.warn("checkpoint selection: cannot update best/ with " + path + ": " + e.what());
    }
  }
}

std::vector<Checkpointer::RowFolder> Checkpointer::plugin_row_folders(const CheckpointData& data) const {
  std::vector<RowFolder> out;
  Communicator* comm = options_.communicator.get();
  for (const auto& [section, content] : data.sections) {
    if (section.rfind("plugin/", 0) != 0) continue;
    const std::string id = section.substr(7);
    // Every rank takes part for every plugin: a rank holding no rows still writes its (empty) file.
    const bool here = !content.row_keys().empty();
    if (!(comm ? comm->any(here) : here)) continue;
    if (id == "model" || id == "optimizer")
      throw Error("plugin '" + id + "' keeps row tensors, whose folder would be the checkpoint's own " + id + "/");
    RowFolder folder{id, {}, {}};
    for (const std::string& key : content.row_keys()) {
      std::int64_t first = 0;
      at::Tensor rows = content.row_block(key, &first);
      folder.blocks.push_back({key, rows, first});
    }
    out.push_back(std::move(folder));
  }
  return out;
}

// Each rank writes its files of the row folders (model/ and optimizer/ when sharded, and each plugin's of row
// tensors; row_shards.h); then one all-gather tells every rank what every rank wrote (or that it failed), which is
// also the barrier after which rank 0 may commit: meta.json lists every rank's files with their sizes and
// checksums, so the checkpoint exists only once all of them are durable. A last collective tells the other ranks
// whether rank 0's commit succeeded, so all ranks fail together and none trains on believing a save that is not
// there. A rank that dies mid-save fails the collectives of the others.
std::string Checkpointer::write_sharded(const std::string& name, const CheckpointData& data,
                                        std::vector<RowFolder> folders) {
  const int rank = options_.rank, world = options_.world_size;
  const std::string target = (fs::path(store_->dir()) / name).string();
  // The same list on every rank, whatever fails below: the exchange after it has one record per folder.
  std::vector<std::string> kinds;
  if (sharded_) kinds = {"model", "optimizer"};
  for (const auto& folder : folders) kinds.push_back(folder.kind);
  std::vector<SharedFile> mine;
  std::exception_ptr failed;
  try {
    if (sharded_) {
      sharding::OptimizerBlocks optimizer = sharding::optimizer_blocks(*sharded_, *optimizers_.front().optimizer);
      folders.insert(folders.begin(), {RowFolder{"model", sharding::model_blocks(*sharded_), {}},
                                       RowFolder{"optimizer", std::move(optimizer.blocks), std::move(optimizer.scalars)}});
    }
    for (const RowFolder& folder : folders)
      mine.push_back(store_->write_shared(name, sharding::shard_folder_file(folder.kind, rank), [&](const std::string& file) {
        const RowShardDigest digest = write_row_shard_file(file, folder.blocks, folder.scalars);
        return SharedFile{file, digest.file.bytes, digest.file.crc32, digest.header_crc32};
      }));
  } catch (...) {
    failed = std::current_exception();
  }
  // Per file: written (1 / 0), bytes, crc32, the header's crc32.
  constexpr std::size_t kFields = 4;
  std::vector<std::int64_t> record;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    const bool ok = !failed && k < mine.size();
    record.insert(record.end(), {ok ? 1 : 0, ok ? static_cast<std::int64_t>(mine[k].bytes) : 0,
                                 ok ? static_cast<std::int64_t>(mine[k].crc32) : 0,
                                 ok ? static_cast<std::int64_t>(mine[k].header_crc32.value_or(0)) : 0});
  }
  Communicator* comm = options_.communicator.get();
  at::Tensor all = at::tensor(record, at::kLong);
  // On the model's device, as the backend needs (NCCL: CUDA tensors); a model with no parameters has none.
  const auto parameters = module_.parameters();
  if (comm) all = comm->all_gather(parameters.empty() ? all : all.to(parameters.front().device())).cpu();
  if (failed) std::rethrow_exception(failed);
  const std::int64_t* fields = all.data_ptr<std::int64_t>();
  std::vector<SharedFile> shared;
  for (int q = 0; q < world; ++q) {
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      const std::int64_t* f = fields + (static_cast<std::size_t>(q) * kinds.size() + k) * kFields;
      if (f[0] != 1)
        throw Error("cannot save checkpoint " + target + ": rank " + std::to_string(q) +
                    " could not write its shard files (that rank's error says why)");
      shared.push_back({sharding::shard_folder_file(kinds[k], q), static_cast<std::uint64_t>(f[1]),
                        static_cast<std::uint32_t>(f[2]), static_cast<std::uint32_t>(f[3])});
    }
  }
  std::string path = target;
  std::exception_ptr commit_failed;
  if (rank == 0) {
    try {
      path = store_->save(name, data, shared);
    } catch (...) {
      commit_failed = std::current_exception();
    }
  }
  const bool any_failed = comm ? comm->any(commit_failed != nullptr) : commit_failed != nullptr;
  if (commit_failed) std::rethrow_exception(commit_failed);
  if (any_failed)
    throw Error("cannot save checkpoint " + target + ": rank 0 could not commit it (rank 0's error says why)");
  return path;
}

FileFilter Checkpointer::files_to_read() const {
  const std::string own = sharding::shard_file_name("optimizer", options_.rank, options_.world_size);
  return [own](const std::string& file) {
    if (file.find('/') != std::string::npos) return false;  // a shard folder's: read in parts (read())
    return !sharding::is_shard_file("optimizer", file) || file == own;
  };
}

namespace {

std::uint64_t bytes_of(const at::Tensor& t) { return static_cast<std::uint64_t>(t.numel()) * t.element_size(); }

}  // namespace

struct Checkpointer::Loaded::RowTally {
  std::vector<std::shared_ptr<const RowShardReader>> readers;
  std::atomic<std::uint64_t> taken{0};
};

void Checkpointer::read_plugin_rows(Loaded& loaded) const {
  const std::string what = "checkpoint " + loaded.path;
  for (auto& [section, content] : loaded.data.sections) {
    if (section.rfind("plugin/", 0) != 0) continue;
    const std::vector<RowShardSource> files = folder_sources(loaded.data, loaded.path, section.substr(7));
    if (files.empty()) continue;
    if (!loaded.plugin_rows) loaded.plugin_rows = std::make_shared<Loaded::RowTally>();
    auto reader = std::make_shared<const RowShardReader>(files, what);
    loaded.plugin_rows->readers.push_back(reader);
    // This rank's rows in a sharded run's layout at this world size (what a sharded EMA keeps), read now, so that a
    // damaged file is found while --resume auto can still pass over the checkpoint; other rows on request.
    std::vector<sharding::TensorSpec> specs;
    for (const auto& [name, info] : reader->tensors()) specs.push_back({name, info.shape, info.dtype});
    const sharding::Layout layout(specs, options_.rank, options_.world_size);
    auto ahead = std::make_shared<std::map<std::string, RowBlock>>();
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
    const auto read_rows = [reader](const std::string& key, std::int64_t first, std::int64_t count) {
      const RowShardReader::Info& info = reader->tensors().at(key);
      std::vector<std::int64_t> shape = info.shape;
      if (!shape.empty()) shape[0] = count;
      at::Tensor into = at::empty(shape, at::TensorOptions().dtype(info.dtype));
      reader->read_rows(key, first, into);
      return into;
    };
    for (const sharding::Slot& slot : layout.slots()) {
      shapes.emplace_back(slot.name, slot.shape);
      if (slot.held.count() > 0) (*ahead)[slot.name] = {slot.name, read_rows(slot.name, slot.held.begin, slot.held.count()), slot.held.begin};
    }
    std::shared_ptr<Loaded::RowTally> tally = loaded.plugin_rows;
    content.attach_rows(std::move(shapes), [read_rows, ahead, tally](const std::string& key, std::int64_t first,
                                                                      std::int64_t count) {
      auto found = ahead->find(key);
      const bool read_ahead = found != ahead->end() && found->second.first_row == first &&
                              (found->second.rows.dim() == 0 ? 1 : found->second.rows.size(0)) == count;
      at::Tensor rows = read_ahead ? found->second.rows : read_rows(key, first, count);
      tally->taken += static_cast<std::uint64_t>(rows.numel()) * rows.element_size();
      return rows;
    });
  }
}

Checkpointer::Loaded Checkpointer::read(const std::string& path, bool with_training_state) const {
  Loaded loaded;
  loaded.path = path;
  loaded.data = load_checkpoint(path, files_to_read());
  read_plugin_rows(loaded);
  const std::vector<RowShardSource> model_files = folder_sources(loaded.data, path, "model");
  if (model_files.empty()) return loaded;
  loaded.in_folders = true;
  const std::string what = "checkpoint " + path;
  // A sharded run reads the rows of its shard; any other needs the tensors whole.
  const RowShardReader model(model_files, what);
  if (sharded_) {
    loaded.model_rows = sharding::read_model_rows(*sharded_, model, what);
    for (const RowBlock& block : loaded.model_rows) loaded.bytes_needed += bytes_of(block.rows);
  } else {
    for (const auto& [name, info] : model.tensors()) {
      loaded.model_whole.emplace_back(name, model.read(name));
      loaded.bytes_needed += bytes_of(loaded.model_whole.back().second);
    }
  }
  loaded.bytes_read += model.bytes_read();
  const std::vector<RowShardSource> optimizer_files = folder_sources(loaded.data, path, "optimizer");
  if (with_training_state && !optimizer_files.empty()) {
    const RowShardReader optimizer(optimizer_files, what);
    loaded.optimizer = sharded_ ? sharding::read_optimizer_rows(*sharded_, optimizer, what) : optimizer.read_all();
    for (const std::string& key : loaded.optimizer->tensor_keys()) loaded.bytes_needed += bytes_of(loaded.optimizer->tensor(key));
    loaded.bytes_read += optimizer.bytes_read();
  }
  return loaded;
}

void Checkpointer::restore_model(const Loaded& loaded) {
  const CheckpointData& data = loaded.data;
  const std::string& path = loaded.path;
  const StateDict* saved = data.section("model");
  if (!saved) throw CheckpointError("checkpoint " + path + " has no model section");
  c10::NoGradGuard no_grad;
  auto expected = named_model_tensors(module_);
  // The sharded parameters: this rank's rows (sharded run) or whole tensors from the model/ folder, or, in a
  // checkpoint written before the folders, row blocks in the ranks' model shard files.
  const auto copy_checked = [&](const std::string& name, const at::Tensor& value, const at::Tensor& target) {
    if (value.sizes() != target.sizes() || value.scalar_type() != target.scalar_type())
      throw CheckpointError("checkpoint " + path + ": model tensor '" + name + "' is " +
                            c10::toString(value.scalar_type()) + format_shape(value.sizes()) +
                            " in the checkpoint but " + c10::toString(target.scalar_type()) +
                            format_shape(target.sizes()) + " in the model");
    target.copy_(value);
  };
  std::set<std::string> from_folder;
  if (sharded_ && loaded.in_folders) {
    sharding::write_model_rows(*sharded_, loaded.model_rows);
    for (const auto& slot : sharded_->layout().slots()) from_folder.insert(slot.name);
  }
  for (const auto& [name, value] : loaded.model_whole) {
    from_folder.insert(name);
    const at::Tensor* target = nullptr;
    for (const auto& item : expected)
      if (item.first == name) target = &item.second;
    if (!target) throw CheckpointError("checkpoint " + path + ": tensor '" + name + "' does not belong to this model");
    copy_checked(name, value, *target);
  }
  sharding::RowsSeen rows;
  for (const auto& [file, content] : data.files)
    if (sharding::is_shard_file("model", file))
      sharding::copy_rows(content, expected, rows, "checkpoint " + path + ": " + file);
  for (auto& [name, tensor] : expected) {
    if (from_folder.count(name)) continue;
    if (auto found = rows.find(name); found != rows.end()) {
      const std::int64_t all = tensor.dim() == 0 ? 1 : tensor.size(0);
      if (found->second != all)
        throw CheckpointError("checkpoint " + path + ": the model shard files hold " + std::to_string(found->second) +
                              " of the " + std::to_string(all) + " rows of model tensor '" + name +
                              "' (a shard file is missing or written twice)");
      continue;
    }
    if (!saved->has_tensor(name))
      throw CheckpointError("checkpoint " + path + ": model tensor '" + name + "' is missing");
    copy_checked(name, saved->tensor(name), tensor);
  }
  for (const auto& key : saved->tensor_keys()) {
    bool known = rows.count(key) > 0 || from_folder.count(key) > 0;
    for (const auto& item : expected) known = known || item.first == key;
    if (!known) throw CheckpointError("checkpoint " + path + ": tensor '" + key + "' does not belong to this model");
  }
  // Each rank holds its own rows only: the step's all-gather makes the model whole on every rank.
  if (sharded_ && loaded.in_folders) {
    sharded_->load_parameters();
    sharded_->gather_parameters();
  }
}

void Checkpointer::restore_training_state(const Loaded& loaded) {
  const CheckpointData& data = loaded.data;
  const std::string& path = loaded.path;
  std::int64_t saved_world = options_.world_size, saved_batch = options_.batch_size;
  std::string saved_duration;
  const StateDict* trainer_saved = data.section("trainer");
  const std::string saved_sharding =
      trainer_saved && trainer_saved->has("sharding") ? trainer_saved->get_string("sharding") : "";
  const std::int64_t written_by =
      trainer_saved && trainer_saved->has("world_size") ? trainer_saved->get_int("world_size") : 1;
  // A checkpoint written before the shard folders: its optimizer shards are whole files of their ranks' rows.
  if (!saved_sharding.empty() && !loaded.in_folders && (!sharded_ || written_by != options_.world_size))
    throw CheckpointError("checkpoint " + path + " was written by a run sharded (" + saved_sharding + ") over " +
                          std::to_string(written_by) + " rank(s) by an earlier baton, whose optimizer state is one " +
                          "file per rank; it resumes only sharded (zero1, zero2 or zero3) over " +
                          std::to_string(written_by) + " rank(s) (this run: sharding \"" +
                          sharding_name(options_.sharding) + "\" over " + std::to_string(options_.world_size) +
                          "). Its weights load anywhere (baton eval, init from it)");
  const std::string what = "checkpoint " + path;
  if (sharded_) {
    const StateDict* saved = nullptr;
    std::string where = what;
    if (loaded.optimizer) {
      saved = &*loaded.optimizer;
    } else if (!saved_sharding.empty()) {
      const std::string own = sharding::shard_file_name("optimizer", options_.rank, options_.world_size);
      for (const auto& [file, content] : data.files)
        if (file == own) saved = &content;
      if (!saved) throw CheckpointError("checkpoint " + path + " has no " + own);
      where += ": " + own;
    } else {
      saved = data.section(optimizer_section(0));  // an unsharded run's: this rank takes its rows
    }
    if (saved) sharding::load_optimizer_shard(*sharded_, *optimizers_.front().optimizer, *saved, where);
  }
  for (std::size_t i = 0; i < optimizers_.size() && !sharded_; ++i) {
    // A sharded run's optimizer state (it has one optimizer), whole; else the optimizer's section.
    const StateDict* saved = loaded.optimizer && i == 0 ? &*loaded.optimizer : saved_optimizer(data, i);
    if (saved == nullptr) {
      // A model's optimizer missing from its checkpoint would resume from a fresh state: not bitwise.
      if (optimizers_.size() > 1)
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
  if (selection_) selection_->load(data, path);
  // The data and the model are what a resumed run is meant to continue: other settings there (another
  // train_subset mid-epoch, other widths) are allowed, but never silently. The batch size is not among them: the
  // samples stay the same at another per-rank batch, and continue_at_new_scale says what changes.
  std::string list;
  for (const auto& item : changed_settings(data.config_text, options_.config_text, {"data", "model"}))
    if (item.rfind("data.batch_size ", 0) != 0) list += (list.empty() ? "" : ", ") + item;
  if (!list.empty()) {
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

void Checkpointer::apply(const Loaded& loaded, bool with_training_state) {
  engine_.fire(Event::before_load);
  restore_model(loaded);
  if (with_training_state) restore_training_state(loaded);
  restore_plugins(loaded.data, loaded.path);
  state_.last_checkpoint = loaded.path;
  engine_.fire(Event::after_load);
  if (loaded.in_folders || loaded.plugin_rows) report_reads(loaded);
}

// What each rank read of the shard folders against what it took from them, said by rank 0 for all (one small
// all-gather): the measure of a resume that reads only its rows.
void Checkpointer::report_reads(const Loaded& loaded) {
  std::uint64_t read_bytes = loaded.bytes_read, needed = loaded.bytes_needed;
  if (loaded.plugin_rows) {
    for (const auto& reader : loaded.plugin_rows->readers) read_bytes += reader->bytes_read();
    needed += loaded.plugin_rows->taken.load();
  }
  at::Tensor counts = at::tensor(std::vector<std::int64_t>{static_cast<std::int64_t>(read_bytes),
                                                           static_cast<std::int64_t>(needed)},
                                 at::kLong);
  if (Communicator* comm = options_.communicator.get()) {
    const auto parameters = module_.parameters();
    counts = comm->all_gather(parameters.empty() ? counts : counts.to(parameters.front().device())).cpu();
  }
  if (options_.rank != 0 || options_.quiet) return;
  std::vector<std::uint64_t> read, taken;
  const std::int64_t* c = counts.data_ptr<std::int64_t>();
  for (std::int64_t q = 0; q < counts.numel() / 2; ++q) {
    read.push_back(static_cast<std::uint64_t>(c[2 * q]));
    taken.push_back(static_cast<std::uint64_t>(c[2 * q + 1]));
  }
  logger_.info("shard files of " + loaded.path + " read in parts: " + read_report(read, taken));
}

void Checkpointer::load(const std::string& path, bool with_training_state) {
  apply(read(path, with_training_state), with_training_state);
}

Timestamp Checkpointer::roll_back(const std::string& path) {
  const Timestamp now = state_.progress.now;
  const std::int64_t last_save = last_save_batch_;
  load(path, /*with_training_state=*/true);
  const Timestamp at = state_.progress.now;
  state_.progress.now = now;
  last_save_batch_ = last_save;
  return at;
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
  std::optional<Loaded> loaded;
  if (path == "auto") {
    if (!store_) throw Error("--resume auto needs a run folder");
    Communicator* comm = options_.communicator.get();
    // Each rank reads its part of each candidate, newest first, and the ranks agree on it: one that any rank cannot
    // read (a damaged shard file only it reads from) is skipped by all, so every rank resumes the same checkpoint.
    const auto check = [&](const std::string& candidate) {
      std::string problem;
      try {
        loaded = read(candidate, /*with_training_state=*/true);
      } catch (const CheckpointError& e) {
        problem = e.what();
        loaded.reset();
      }
      if (comm && comm->any(!problem.empty()) && problem.empty()) {
        problem = "checkpoint " + candidate + ": another rank could not read its part of it (its warning says why)";
        loaded.reset();
      }
      if (!problem.empty()) throw CheckpointError(problem);
    };
    // The folders skipped on the way are reported also when a newer-format checkpoint stops the search.
    std::vector<std::string> warnings;
    std::optional<CheckpointInfo> newest;
    std::exception_ptr refused;
    try {
      newest = store_->newest_valid(warnings, files_to_read(), check);
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
  } else {
    loaded = read(path, /*with_training_state=*/true);
  }
  apply(*loaded, /*with_training_state=*/true);
  logger_.info("resumed from " + path + " at " + format_timestamp(state_.progress.now));
  return path;
}

}  // namespace baton
