#include "sharding/sharded_state.h"

#include <cstdio>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarType.h>

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

// The name under which the flat shard parameter of `dtype` is exported: its state keys are "shard:Float/step".
std::string dtype_key(at::ScalarType dtype) { return std::string(kPerDtypePrefix) + c10::toString(dtype); }

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// The flat shard parameters under their export names, in the layout's dtype order.
NamedParameters flat_parameters(const ShardedStep& step) {
  NamedParameters flat;
  for (at::ScalarType dtype : step.layout().dtypes()) flat.emplace_back(dtype_key(dtype), step.shard_parameter(dtype));
  return flat;
}

// Where the rows of tensor `key` start in the global tensor: the file's "rows/<key>", or -1 for a full tensor.
std::int64_t first_row(const StateDict& file, const std::string& key) {
  const std::string rows = kRowsPrefix + key;
  return file.has(rows) ? file.get_int(rows) : -1;
}

std::string describe(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())) + format_shape(t.sizes()); }

}  // namespace

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
  const StateDict exported = export_optimizer_state(optimizer, flat_parameters(step));
  StateDict out;
  out.set_scalars_json(exported.scalars_json());  // the optimizer's type and its param group's options
  for (const std::string& key : exported.tensor_keys()) {
    const at::Tensor value = exported.tensor(key);
    const std::size_t slash = key.rfind('/');
    const std::string owner = key.substr(0, slash), buffer = key.substr(slash + 1);
    at::ScalarType dtype = at::kFloat;
    for (at::ScalarType d : layout.dtypes())
      if (owner == dtype_key(d)) dtype = d;
    // A per-element buffer (momentum, Adam's moments) is a flat tensor like the shard parameter: it is cut into the
    // parameters' row blocks. Anything else (Adam's step count) stays as the flat parameter holds it.
    const bool per_element = value.dim() == 1 && value.scalar_type() == dtype &&
                             value.size(0) == layout.buffer_numel(dtype);
    if (!per_element) {
      out.set_tensor(key, value);
      continue;
    }
    for (std::size_t i = 0; i < layout.slots().size(); ++i) {
      const Slot& slot = layout.slots()[i];
      if (slot.dtype != dtype || slot.shard_numel() == 0) continue;
      const std::string name = slot.name + "/" + buffer;
      out.set_tensor(name, layout.shard_of_buffer(value, i));
      out.set_int(kRowsPrefix + name, slot.held.begin);
    }
  }
  return out;
}

void load_optimizer_shard(const ShardedStep& step, torch::optim::Optimizer& optimizer, const StateDict& saved,
                          const std::string& what) {
  const Layout& layout = step.layout();
  if (saved.has("groups") && saved.get_int("groups") != 1)
    throw CheckpointError(what + ": the optimizer state has " + std::to_string(saved.get_int("groups")) +
                          " param groups; a sharded run's optimizer has one, over the rank's shard");
  StateDict flat;
  flat.set_scalars_json(saved.scalars_json());
  flat.set_int("group0/params", static_cast<std::int64_t>(layout.dtypes().size()));
  // The flat buffers being filled, by "shard:<dtype>/<buffer>"; padding and rows this rank holds none of stay 0.
  std::map<std::string, at::Tensor> buffers;
  std::map<std::string, std::set<std::size_t>> filled;  // the slots written into each buffer
  c10::NoGradGuard no_grad;
  for (const std::string& key : saved.tensor_keys()) {
    const at::Tensor value = saved.tensor(key);
    if (starts_with(key, kPerDtypePrefix)) {
      flat.set_tensor(key, value);
      continue;
    }
    const std::size_t slash = key.rfind('/');
    if (slash == std::string::npos)
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' names no parameter");
    const std::string name = key.substr(0, slash), buffer = key.substr(slash + 1);
    std::size_t index = 0;
    try {
      index = layout.index_of(name);
    } catch (const Error&) {
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' belongs to no parameter this run shards");
    }
    const Slot& slot = layout.slots()[index];
    const std::string flat_key = dtype_key(slot.dtype) + "/" + buffer;
    // An unsharded run keeps a count (Adam's step) per parameter; the flat shard parameter keeps one.
    if (value.numel() == 1 && value.scalar_type() == at::kLong) {
      flat.set_tensor(flat_key, value);
      continue;
    }
    if (value.scalar_type() != slot.dtype)
      throw CheckpointError(what + ": optimizer state tensor '" + key + "' is " + describe(value) +
                            ", but parameter '" + name + "' is " + c10::toString(slot.dtype));
    at::Tensor rows;
    const std::int64_t begin = first_row(saved, key);
    if (begin < 0) {  // a full tensor, from an unsharded run
      if (value.sizes().vec() != slot.shape)
        throw CheckpointError(what + ": optimizer state tensor '" + key + "' is " + describe(value) +
                              ", but parameter '" + name + "' has shape " + format_shape(slot.shape));
      rows = layout.shard(value, index);
    } else {
      if (begin != slot.held.begin || value.sizes().vec() != slot.shard_shape())
        throw CheckpointError(what + ": optimizer state tensor '" + key + "' holds rows from " + std::to_string(begin) +
                              " of shape " + format_shape(value.sizes()) + ", but this rank holds rows " +
                              std::to_string(slot.held.begin) + " to " + std::to_string(slot.held.end) + " of '" +
                              name + "' (" + format_shape(slot.shard_shape()) +
                              "): the checkpoint was sharded over another number of ranks");
      rows = value;
    }
    auto found = buffers.find(flat_key);
    if (found == buffers.end())
      found = buffers.emplace(flat_key, layout.new_buffer(slot.dtype, step.shard_parameter(slot.dtype).device())).first;
    layout.shard_of_buffer(found->second, index).copy_(rows);
    filled[flat_key].insert(index);
  }
  // A per-element buffer must cover every slot this rank holds rows of: a missing one would resume silently at 0.
  for (const auto& [flat_key, slots] : filled) {
    for (std::size_t i = 0; i < layout.slots().size(); ++i) {
      const Slot& slot = layout.slots()[i];
      if (flat_key.rfind(dtype_key(slot.dtype) + "/", 0) != 0 || slot.shard_numel() == 0 || slots.count(i)) continue;
      throw CheckpointError(what + ": optimizer state tensor '" + slot.name + "/" +
                            flat_key.substr(flat_key.find('/') + 1) + "' is missing");
    }
  }
  for (auto& [flat_key, buffer] : buffers) flat.set_tensor(flat_key, buffer);
  try {
    import_optimizer_state(optimizer, flat_parameters(step), flat);
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
