#include "sharding/sharded_state.h"

#include <cstdio>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarType.h>
#include <torch/optim/optimizer.h>

#include "baton/error.h"
#include "baton/optimizer_state.h"
#include "baton/text.h"
#include "sharding/zero.h"

namespace baton::sharding {
namespace {

constexpr const char* kRowsPrefix = "rows/";
constexpr const char* kPerDtypePrefix = "shard:";

std::string five_digits(int value) {
  char text[16];
  std::snprintf(text, sizeof text, "%05d", value);
  return text;
}

// The name under which a rank's flat shard of `dtype` was exported when it was one tensor ("shard:Float/step"): read
// from checkpoints written so.
std::string dtype_key(at::ScalarType dtype) { return std::string(kPerDtypePrefix) + c10::toString(dtype); }

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// Where the rows of tensor `key` start in the global tensor: the file's "rows/<key>", or -1 for a full tensor.
std::int64_t first_row(const StateDict& file, const std::string& key) {
  const std::string rows = kRowsPrefix + key;
  return file.has(rows) ? file.get_int(rows) : -1;
}

// Whether optimizer state `value` of parameter `slot` is per element (momentum, Adam's moments): the shard's shape and
// dtype. Anything else (Adam's step count) is kept whole.
bool per_element(const at::Tensor& value, const Slot& slot) {
  return value.scalar_type() == slot.dtype && value.sizes().vec() == slot.shard_shape();
}

std::string describe(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())) + format_shape(t.sizes()); }

}  // namespace

std::string shard_folder_file(const std::string& kind, int rank) { return kind + "/" + row_shard_file_name(rank); }

std::vector<RowBlock> model_blocks(const ShardedStep& step) {
  std::vector<RowBlock> out;
  for (const Slot& slot : step.layout().slots()) {
    if (slot.shard_numel() == 0) continue;
    at::Tensor rows = step.shard_of(slot.name);
    // A 0-d parameter is written as it is (rank 0 holds it), as Python's state dict has it.
    out.push_back({slot.name, slot.shape.empty() ? rows.reshape({}) : rows, slot.held.begin});
  }
  return out;
}

OptimizerBlocks optimizer_blocks(const ShardedStep& step, const torch::optim::Optimizer& optimizer) {
  const Layout& layout = step.layout();
  const StateDict state = export_optimizer_state(optimizer, step.named_shard_parameters());
  OptimizerBlocks out;
  for (const std::string& key : state.tensor_keys()) {
    const Slot& slot = layout.slots()[layout.index_of(key.substr(0, key.rfind('/')))];
    const at::Tensor value = state.tensor(key);
    if (per_element(value, slot))
      out.blocks.push_back({key, slot.shape.empty() ? value.reshape({}) : value, slot.held.begin});
    else
      out.blocks.push_back({key, value, 0});  // a count, whole
  }
  out.scalars.set_scalars_json(state.scalars_json());  // the options (lr, groups, ...)
  return out;
}

namespace {

// A checkpoint's model tensor against the parameter it is: the same dtype and global shape.
void check_global(const RowShardReader::Info& info, const Slot& slot, const std::string& key, const std::string& what) {
  if (info.dtype != slot.dtype || info.shape != slot.shape)
    throw CheckpointError(what + ": tensor '" + key + "' is " + c10::toString(info.dtype) + format_shape(info.shape) +
                          " in the checkpoint, but parameter '" + slot.name + "' is " + c10::toString(slot.dtype) +
                          format_shape(slot.shape));
}

// Rows [held] of tensor `key` (of `slot`'s shape), as this rank's shard of it: shard_shape(), [1] for a 0-d one.
at::Tensor read_held_rows(const RowShardReader& reader, const Slot& slot, const std::string& key) {
  at::Tensor rows = at::empty(slot.shard_shape(), at::TensorOptions().dtype(slot.dtype));
  reader.read_rows(key, slot.held.begin, slot.shape.empty() ? rows.reshape({}) : rows);
  return rows;
}

}  // namespace

std::vector<RowBlock> read_model_rows(const ShardedStep& step, const RowShardReader& reader, const std::string& what) {
  std::vector<RowBlock> out;
  const Layout& layout = step.layout();
  for (const auto& [key, info] : reader.tensors()) {
    try {
      layout.index_of(key);
    } catch (const Error&) {
      throw CheckpointError(what + ": tensor '" + key + "' is no parameter this run shards");
    }
  }
  for (const Slot& slot : layout.slots()) {
    if (!reader.has(slot.name)) throw CheckpointError(what + ": model tensor '" + slot.name + "' is missing");
    check_global(reader.tensors().at(slot.name), slot, slot.name, what);
    if (slot.shard_numel() == 0) continue;
    out.push_back({slot.name, read_held_rows(reader, slot, slot.name), slot.held.begin});
  }
  return out;
}

void write_model_rows(const ShardedStep& step, const std::vector<RowBlock>& rows) {
  c10::NoGradGuard no_grad;
  const Layout& layout = step.layout();
  for (const RowBlock& block : rows) {
    const std::size_t index = layout.index_of(block.name);
    layout.shard(step.model_parameters()[index], index).copy_(block.rows);
  }
}

StateDict read_optimizer_rows(const ShardedStep& step, const RowShardReader& reader, const std::string& what) {
  const Layout& layout = step.layout();
  StateDict out = reader.scalars();
  for (const auto& [key, info] : reader.tensors()) {
    const std::size_t slash = key.rfind('/');
    if (slash == std::string::npos)
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' names no parameter");
    std::size_t index = 0;
    try {
      index = layout.index_of(key.substr(0, slash));
    } catch (const Error&) {
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' belongs to no parameter this run shards");
    }
    const Slot& slot = layout.slots()[index];
    if (slot.shard_numel() == 0) continue;  // none of its rows are this rank's
    if (info.dtype == slot.dtype && info.shape == slot.shape) {
      out.set_tensor(key, read_held_rows(reader, slot, key));
      out.set_int(kRowsPrefix + key, slot.held.begin);
    } else {
      out.set_tensor(key, reader.read(key));  // a count (Adam's step): load_optimizer_shard checks it
    }
  }
  return out;
}

std::string shard_file_name(const std::string& kind, int rank, int world_size) {
  return kind + "-shard-" + five_digits(rank) + "-of-" + five_digits(world_size) + ".safetensors";
}

bool is_shard_file(const std::string& kind, const std::string& file) {
  const std::string prefix = kind + "-shard-";
  const std::string_view suffix = ".safetensors";
  return file.rfind(prefix, 0) == 0 && file.size() > prefix.size() + suffix.size() &&
         std::string_view(file).substr(file.size() - suffix.size()) == suffix;
}

StateDict model_shard(const ShardedStep& step) {
  StateDict out;
  const Layout& layout = step.layout();
  for (const Slot& slot : layout.slots()) {
    if (slot.shard_numel() == 0) continue;
    out.set_tensor(slot.name, step.shard_of(slot.name));
    out.set_int(kRowsPrefix + slot.name, slot.held.begin);
  }
  return out;
}

StateDict optimizer_shard(const ShardedStep& step, const torch::optim::Optimizer& optimizer) {
  const Layout& layout = step.layout();
  StateDict out = export_optimizer_state(optimizer, step.named_shard_parameters());
  // A per-element buffer (momentum, Adam's moments) has the shard's shape: it is a block of rows of the tensor's
  // buffer, marked with where it starts. Anything else (Adam's step count) is kept as it is.
  for (const std::string& key : out.tensor_keys()) {
    const std::size_t slash = key.rfind('/');
    const Slot& slot = layout.slots()[layout.index_of(key.substr(0, slash))];
    if (per_element(out.tensor(key), slot)) out.set_int(kRowsPrefix + key, slot.held.begin);
  }
  return out;
}

void load_optimizer_shard(const ShardedStep& step, torch::optim::Optimizer& optimizer, const StateDict& saved,
                          const std::string& what) {
  const Layout& layout = step.layout();
  const auto& groups = optimizer.param_groups();
  const std::int64_t saved_groups = saved.has("groups") ? saved.get_int("groups") : 1;
  if (saved_groups != static_cast<std::int64_t>(groups.size()))
    throw CheckpointError(what + ": the optimizer state has " + std::to_string(saved_groups) +
                          " param groups, this run's optimizer " + std::to_string(groups.size()) +
                          " (optimizer.weight_decay_exclude and lr_scale make the groups: keep the checkpoint's)");
  const NamedTensors shards = step.named_shard_parameters();
  StateDict mine;
  mine.set_scalars_json(saved.scalars_json());
  // Each group holds this rank's shards of its parameters (another count at another rank, or in an unsharded
  // run's state); which parameter's state is which goes by name.
  for (std::size_t g = 0; g < groups.size(); ++g)
    mine.set_int("group" + std::to_string(g) + "/params", static_cast<std::int64_t>(groups[g].params().size()));
  std::map<std::string, std::set<std::size_t>> filled;  // per buffer: the slots given it
  c10::NoGradGuard no_grad;
  for (const std::string& key : saved.tensor_keys()) {
    const at::Tensor value = saved.tensor(key);
    const std::size_t slash = key.rfind('/');
    if (slash == std::string::npos)
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' names no parameter");
    const std::string name = key.substr(0, slash), buffer = key.substr(slash + 1);
    if (starts_with(name, kPerDtypePrefix)) {
      // Written when a rank's shard was one flat tensor per dtype: a count (Adam's step) for all its parameters.
      for (const auto& [shard_name, tensor] : shards)
        if (dtype_key(tensor.scalar_type()) == name) mine.set_tensor(shard_name + "/" + buffer, value);
      continue;
    }
    std::size_t index = 0;
    try {
      index = layout.index_of(name);
    } catch (const Error&) {
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' belongs to no parameter this run shards");
    }
    const Slot& slot = layout.slots()[index];
    if (slot.shard_numel() == 0) continue;  // this rank holds none of its rows
    // A count (Adam's step), the same for every rank's rows.
    if (value.numel() == 1 && value.scalar_type() == at::kLong) {
      mine.set_tensor(key, value);
      continue;
    }
    if (value.scalar_type() != slot.dtype)
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' is " + describe(value) +
                            ", but parameter '" + name + "' is " + c10::toString(slot.dtype));
    const std::int64_t begin = first_row(saved, key);
    if (begin < 0) {  // a full tensor, from an unsharded run
      if (value.sizes().vec() != slot.shape)
        throw CheckpointError(what + ": optimizer state tensor '" + key + "' is " + describe(value) +
                              ", but parameter '" + name + "' has shape " + format_shape(slot.shape));
      mine.set_tensor(key, layout.shard(value, index).contiguous());
    } else {
      if (begin != slot.held.begin || value.sizes().vec() != slot.shard_shape())
        throw CheckpointError(what + ": optimizer state tensor '" + key + "' holds rows from " + std::to_string(begin) +
                              " of shape " + format_shape(value.sizes()) + ", but this rank holds rows " +
                              std::to_string(slot.held.begin) + " to " + std::to_string(slot.held.end) + " of '" +
                              name + "' (" + format_shape(slot.shard_shape()) +
                              "): the checkpoint was sharded over another number of ranks");
      mine.set_tensor(key, value);
    }
    filled[buffer].insert(index);
  }
  // A per-element buffer must cover every slot this rank holds rows of: a missing one would resume silently at 0.
  for (const auto& [buffer, slots] : filled)
    for (const auto& [name, tensor] : shards)
      if (!slots.count(layout.index_of(name)))
        throw CheckpointError(what + ": optimizer state tensor '" + name + "/" + buffer + "' is missing");
  try {
    import_optimizer_state(optimizer, shards, mine);
  } catch (const CheckpointError& e) {
    throw CheckpointError(what + ": " + e.what());
  }
}

void copy_rows(const StateDict& file, const NamedTensors& full, RowsSeen& seen, const std::string& what) {
  c10::NoGradGuard no_grad;
  for (const std::string& key : file.tensor_keys()) {
    const at::Tensor block = file.tensor(key);
    const at::Tensor* target = nullptr;
    for (const auto& [name, tensor] : full)
      if (name == key) target = &tensor;
    if (!target) throw CheckpointError(what + ": tensor '" + key + "' does not belong to this model");
    const std::int64_t begin = first_row(file, key);
    // A 0-d tensor is one row of one element (layout.h).
    const at::Tensor as_rows = target->dim() == 0 ? target->reshape({1}) : *target;
    const std::int64_t rows = block.dim() == 0 ? 1 : block.size(0);
    std::vector<std::int64_t> expected = as_rows.sizes().vec();
    expected[0] = rows;
    if (begin < 0 || block.scalar_type() != target->scalar_type() || block.sizes().vec() != expected ||
        begin + rows > as_rows.size(0))
      throw CheckpointError(what + ": model tensor '" + key + "' is " + describe(block) + " at row " +
                            std::to_string(begin) + ", which is no block of rows of the model's " + describe(*target));
    as_rows.narrow(0, begin, rows).copy_(block);
    seen[key] += rows;
  }
}

}  // namespace baton::sharding
