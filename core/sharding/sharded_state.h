#pragma once
// What a rank of a sharded run writes into a checkpoint and reads back: its rows of the sharded parameters (the
// "model" shard file) and its optimizer's state over them (the "optimizer" shard file), with no collective.
//
// Each file names its tensors as an unsharded run names them ("fc.weight", "fc.weight/exp_avg"), each tensor being
// the block of rows [begin, begin + rows) of the global tensor along dim 0 (layout.h), and records where the block
// starts as the scalar "rows/<tensor>" = begin. So a file is readable without the run's layout, the model's full
// tensors are assembled from any set of files covering every row (a sharded run's evaluation, or `baton eval` on
// its checkpoint), and a later reader may take only the rows it needs. A rank holding no rows of a tensor writes
// nothing for it. Optimizer state that is not per element (Adam's step count) is kept as the optimizer keeps it, per
// parameter ("fc.weight/step"); checkpoints written when a rank's shard was one flat tensor per dtype kept it as
// "shard:<dtype>/<buffer>" and still load.
#include <cstdint>
#include <map>
#include <string>

#include "baton/model_tensors.h"
#include "baton/state_dict.h"

namespace torch::optim {
class Optimizer;
}

namespace baton::sharding {

class ShardedStep;

/// "model-shard-00001-of-00004.safetensors" for kind "model", rank 1 of 4.
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
