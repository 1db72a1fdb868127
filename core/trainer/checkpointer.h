#pragma once
// The trainer's checkpoint collaborator: fires the checkpoint events (plugins add their files through
// State::checkpoint), captures the model, optimizer, trainer and plugin state, writes the folder (rank 0), and
// restores it: a standalone load for evaluation, or a resume that continues the run exactly, also at another world
// size, batch size or length.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baton/trainer.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/row_shards.h"
#include "trainer/run_context.h"

namespace baton {
namespace sharding {
class ShardedStep;
}

class CheckpointSelection;
class Engine;
class LossScaler;
class RunLogger;

/// The run's plugins by id, in configured order.
using PluginList = std::vector<std::pair<std::string, std::shared_ptr<Plugin>>>;

class Checkpointer {
 public:
  /// `base_lrs`: each parameter group's lr before any schedule, to say how a new run length moves the lr.
  /// `scaler`: amp_fp16's loss scaler, whose state is saved and restored with the trainer's; null otherwise.
  /// `sharded`: a sharded run's step (zero1 / zero2 / zero3), whose optimizer is the run's: each rank then writes its
  /// rows of the parameters and its optimizer state into shard files of its own (sharding/sharded_state.h), and
  /// reads back the rows of its shard at any world size, the model made whole again by the step's all-gather.
  /// `selection`: the run's best checkpoints, ranked as each is saved, kept in its state and restored with it.
  Checkpointer(const RunContext& run, torch::nn::Module& module, const std::vector<NamedOptimizer>& optimizers,
               const PluginList& plugins, std::vector<double> base_lrs, LossScaler* scaler = nullptr,
               sharding::ShardedStep* sharded = nullptr, CheckpointSelection* selection = nullptr);
  ~Checkpointer();

  /// Whether this run writes checkpoints at all (it has a run folder).
  bool has_store() const { return store_ != nullptr; }
  /// The batch count of the last save (every rank keeps it), -1 before any.
  std::int64_t last_save_batch() const { return last_save_batch_; }

  /// Fires a checkpoint event; when `save`, plugins may add files to the checkpoint, which is then written under
  /// the name the time has in `unit` ("ep3" at an epoch's end, else "ba120").
  void event(Event event, bool save, TimeUnit unit);
  /// Writes a checkpoint without events: the end of a run whose last save was not taken at a batch.
  void save_final(TimeUnit unit);
  /// Restores a checkpoint between before_load and after_load: the model always; with `with_training_state`
  /// the optimizer, RNG, metrics and time as well, for a resume.
  void load(const std::string& path, bool with_training_state);
  /// Restores `path` with its training state (State::request_rollback) but keeps the run's time, so training goes
  /// on from this batch with the checkpoint's weights. Returns the checkpoint's time.
  Timestamp roll_back(const std::string& path);
  /// Resumes as TrainerOptions::resume says ("auto": the newest valid checkpoint of the store). Returns the
  /// folder resumed from; empty when starting fresh.
  std::string resume();

 private:
  /// A checkpoint read for this rank, not yet applied: its files, and what this rank takes of its shard folders.
  struct Loaded {
    std::string path;
    CheckpointData data;
    bool in_folders = false;             // the checkpoint keeps its sharded tensors in model/ and optimizer/
    std::vector<RowBlock> model_rows;    // a sharded run: this rank's rows of each sharded parameter
    NamedTensors model_whole;            // any other run: those tensors whole
    std::optional<StateDict> optimizer;  // sharded: this rank's rows (load_optimizer_shard's form); else whole
    std::uint64_t bytes_read = 0;        // of the shard folders' files
    std::uint64_t bytes_needed = 0;      // what this rank takes of them
    // Plugins' row tensors (StateDict::set_rows), read when the plugin asks: what their readers read and took.
    struct RowTally;
    std::shared_ptr<RowTally> plugin_rows;
  };
  /// A folder of row shard files a save writes, each rank its own file: model/, optimizer/, a plugin's.
  struct RowFolder {
    std::string kind;
    std::vector<RowBlock> blocks;
    StateDict scalars;
  };

  std::string name_at(TimeUnit unit) const;
  /// The checkpoint section of optimizer i.
  std::string optimizer_section(std::size_t i) const;
  /// Optimizer i's state in `data`: its section, or an older checkpoint's name for it; null when absent.
  const StateDict* saved_optimizer(const CheckpointData& data, std::size_t i) const;
  void write(const std::string& name, const std::vector<std::pair<std::string, StateDict>>& files,
             const std::vector<std::function<void(const std::string&)>>& hooks);
  CheckpointData capture(const std::vector<std::pair<std::string, StateDict>>& files) const;
  /// A sharded save: every rank writes its shard files, the ranks exchange what they wrote, rank 0 commits.
  std::string write_sharded(const std::string& name, const CheckpointData& data, std::vector<RowFolder> folders);
  /// The plugins' row tensors in `data`, one folder per plugin that has them on any rank (a collective).
  std::vector<RowFolder> plugin_row_folders(const CheckpointData& data) const;
  /// Attaches the row tensors of each plugin's folder to its section of `loaded`, this rank's rows already read.
  void read_plugin_rows(Loaded& loaded) const;
  /// The files of a checkpoint this rank reads whole: all but the shard folders' (read in parts) and, in a checkpoint
  /// written before them, the other ranks' optimizer shards.
  FileFilter files_to_read() const;
  /// Verifies and reads `path`: everything this rank needs of it, nothing applied yet. Throws CheckpointError.
  Loaded read(const std::string& path, bool with_training_state) const;
  /// Restores what read() gave, between before_load and after_load.
  void apply(const Loaded& loaded, bool with_training_state);
  void report_reads(const Loaded& loaded);
  void restore_model(const Loaded& loaded);
  void restore_training_state(const Loaded& loaded);
  void restore_plugins(const CheckpointData& data, const std::string& path);
  void continue_at_new_scale(const std::string& path, std::int64_t saved_world, std::int64_t saved_batch);
  void continue_to_new_duration(const std::string& path, const std::string& saved_text);

  State& state_;
  Engine& engine_;
  RunLogger& logger_;
  const TrainerOptions& options_;
  torch::nn::Module& module_;
  const std::vector<NamedOptimizer>& optimizers_;
  const PluginList& plugins_;
  std::vector<double> base_lrs_;
  LossScaler* scaler_;
  sharding::ShardedStep* sharded_;
  CheckpointSelection* selection_;
  std::unique_ptr<CheckpointStore> store_;
  std::int64_t last_save_batch_ = -1;
};

}  // namespace baton
