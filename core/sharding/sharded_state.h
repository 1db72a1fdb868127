#pragma once
// What a rank of a sharded run writes into a checkpoint and reads back: its rows of the sharded parameters (its file
// in the checkpoint's model/ folder) and its optimizer's state over them (its file in optimizer/), with no
// collective; and, at any world size, the rows its new shard needs from all of those files (row_shards.h).
//
// The files name their tensors as an unsharded run names them ("fc.weight", "fc.weight/exp_avg"), each a block of
// rows [begin, begin + rows) of the global tensor along dim 0 (layout.h), with PyTorch's offsets (row_shards.h). A
// rank holding no rows of a tensor writes nothing for it. Optimizer state that is not per element (Adam's step count)
// is kept as the optimizer keeps it, per parameter ("fc.weight/step"), by every rank that holds rows of it.
//
// Checkpoints written before the folders (one file per rank beside state.safetensors,
// "model-shard-00001-of-00004.safetensors", each block's first row as the scalar "rows/<tensor>") are read as they
// were, at their own world size (copy_rows, load_optimizer_shard); those written when a rank's shard was one flat
// tensor per dtype kept counts as "shard:<dtype>/<buffer>" and still load.
#include <cstdint>
#include <map>
#include <string>

#include "baton/model_tensors.h"
#include "baton/state_dict.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/row_shards.h"

namespace torch::optim {
class Optimizer;
}

namespace baton::sharding {

class ShardedStep;

/// "model/shard-00002-model-00001-of-00001.safetensors" for kind "model", rank 1: the file of rank `rank` in the folder
/// of `kind` ("model", "optimizer").
std::string shard_folder_file(const std::string& kind, int rank);
/// This rank's rows of the sharded parameters: the file shard_folder_file("model", rank) holds. Views of the live
/// shards: write them out before the next step changes them.
std::vector<RowBlock> model_blocks(const ShardedStep& step);

/// The optimizer's state over this rank's shard: its tensors as blocks (per-element buffers at the rank's rows,
/// counts whole) and its options (lr, groups, ...) as scalars.
struct OptimizerBlocks {
  std::vector<RowBlock> blocks;
  StateDict scalars;
};
OptimizerBlocks optimizer_blocks(const ShardedStep& step, const torch::optim::Optimizer& optimizer);

/// This rank's rows of every sharded parameter, read from the model files of a checkpoint written at any world size
/// (`reader` over its model/ folder): one block of rows per parameter this rank holds rows of, in the layout's
/// order, for write_model_rows. Throws CheckpointError naming `what` and the tensor: one missing, one of another
/// shape or dtype than the model's.
std::vector<RowBlock> read_model_rows(const ShardedStep& step, const RowShardReader& reader, const std::string& what);
/// Copies blocks read_model_rows gave into the rows of the model's parameters they belong to.
void write_model_rows(const ShardedStep& step, const std::vector<RowBlock>& rows);
/// This rank's optimizer state, read from the optimizer files of a checkpoint written at any world size, in the
/// form load_optimizer_shard takes. Throws CheckpointError naming `what` and the tensor.
StateDict read_optimizer_rows(const ShardedStep& step, const RowShardReader& reader, const std::string& what);

/// "model-shard-00001-of-00004.safetensors" for kind "model", rank 1 of 4 (checkpoints written before the folders).
std::string shard_file_name(const std::string& kind, int rank, int world_size);
/// Whether `file` is a shard file of `kind` (any rank, any world size).
bool is_shard_file(const std::string& kind, const std::string& file);

/// This rank's rows of the model's sharded parameters. Like optimizer_shard's, its tensors are views of the live
/// shards: write them out before the next step changes them.
StateDict model_shard(const ShardedStep& step);

/// The optimizer's state over this rank's shard (the optimizer built over step.shard_parameters()).
StateDict optimizer_shard(const ShardedStep& step, const torch::optim::Optimizer& optimizer);

/// Restores the optimizer over step.shard_parameters() from `saved`: a file optimizer_shard() wrote at this rank
/// and world size, or an unsharded run's optimizer section (full tensors, of which this rank's rows are taken).
/// Throws CheckpointError naming `what` and the tensor: rows that are not this rank's, a shape or dtype other than
/// the parameter's, state of a parameter this run does not shard, more than one param group.
void load_optimizer_shard(const ShardedStep& step, torch::optim::Optimizer& optimizer, const StateDict& saved,
                          const std::string& what);

/// Rows found of each tensor while assembling full tensors from shard files, to tell a complete set from a partial one.
using RowsSeen = std::map<std::string, std::int64_t>;

/// Copies the row blocks of a model shard file into the full tensors of the same names in `full` (the model's
/// parameters), counting the rows copied in `seen`. Throws CheckpointError naming `what` and the tensor: a tensor
/// `full` does not have, a block of another dtype, row size or outside the tensor.
void copy_rows(const StateDict& file, const NamedTensors& full, RowsSeen& seen, const std::string& what);

}  // namespace baton::sharding
