#include "sharding/layout.h"

#include <algorithm>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include "baton/error.h"

namespace baton::sharding {
namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

RowRange rows_held(std::int64_t rows, std::int64_t rows_per_rank, int rank) {
  return {std::min(rank * rows_per_rank, rows), std::min((rank + 1) * rows_per_rank, rows)};
}

// How the rows of a slot fall on the ranks, as torch.chunk does: the first `whole` ranks hold rows_per_rank rows
// each, rank `whole` (when there is one) holds the `rest`, and the ranks after it hold none.
struct Split {
  std::int64_t whole = 0;
  std::int64_t rest = 0;
};

Split split_of(const Slot& slot) {
  Split split;
  if (slot.rows_per_rank == 0) return split;
  split.whole = slot.rows / slot.rows_per_rank;
  split.rest = slot.rows - split.whole * slot.rows_per_rank;
  return split;
}

}  // namespace

std::vector<std::int64_t> Slot::shard_shape() const {
  std::vector<std::int64_t> out{held.count()};
  if (!shape.empty()) out.insert(out.end(), shape.begin() + 1, shape.end());
  return out;
}

Layout::Layout(std::vector<TensorSpec> tensors, int rank, int world_size) : rank_(rank), world_size_(world_size) {
  if (world_size < 1)
    throw Error("sharding layout: the world size must be at least 1, not " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size)
    throw Error("sharding layout: rank " + std::to_string(rank) + " is outside [0, " +
                std::to_string(world_size - 1) + "] (world size " + std::to_string(world_size) + ")");
  for (auto& spec : tensors) {
    for (const Slot& other : slots_)
      if (other.name == spec.name) throw Error("sharding layout: the tensor '" + spec.name + "' is given twice");
    Slot slot;
    slot.rows = spec.shape.empty() ? 1 : spec.shape[0];
    slot.row_numel = 1;
    for (std::size_t d = 0; d < spec.shape.size(); ++d) {
      if (spec.shape[d] < 0)
        throw Error("sharding layout: the tensor '" + spec.name + "' has a negative dimension " +
                    std::to_string(spec.shape[d]) + " in its shape " + shape_text(spec.shape));
      if (d > 0) slot.row_numel *= spec.shape[d];
    }
    slot.rows_per_rank = (slot.rows + world_size - 1) / world_size;
    slot.held = rows_held(slot.rows, slot.rows_per_rank, rank);
    auto group = std::find(dtypes_.begin(), dtypes_.end(), spec.dtype);
    if (group == dtypes_.end()) {
      dtypes_.push_back(spec.dtype);
      buffer_numels_.push_back(0);
      group = dtypes_.end() - 1;
    }
    std::int64_t& numel = buffer_numels_[static_cast<std::size_t>(group - dtypes_.begin())];
    slot.offset = numel;
    numel += slot.slot_numel();
    slot.name = std::move(spec.name);
    slot.shape = std::move(spec.shape);
    slot.dtype = spec.dtype;
    slots_.push_back(std::move(slot));
  }
}

std::size_t Layout::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].name == name) return i;
  throw Error("sharding layout: no tensor named '" + name + "' (it has " + std::to_string(slots_.size()) +
              " tensors)");
}

RowRange Layout::rows_of(std::size_t index, int rank) const {
  if (index >= slots_.size())
    throw Error("sharding layout: tensor index " + std::to_string(index) + " is outside the layout's " +
                std::to_string(slots_.size()) + " tensors");
  if (rank < 0 || rank >= world_size_)
    throw Error("sharding layout: rank " + std::to_string(rank) + " is outside [0, " +
                std::to_string(world_size_ - 1) + "]");
  return rows_held(slots_[index].rows, slots_[index].rows_per_rank, rank);
}

std::int64_t Layout::buffer_numel(at::ScalarType dtype) const {
  auto group = std::find(dtypes_.begin(), dtypes_.end(), dtype);
  return group == dtypes_.end() ? 0 : buffer_numels_[static_cast<std::size_t>(group - dtypes_.begin())];
}

void Layout::check_full(const at::Tensor& full, std::size_t index, const char* what) const {
  if (index >= slots_.size())
    throw Error(std::string("sharding: ") + what + ": tensor index " + std::to_string(index) +
                " is outside the layout's " + std::to_string(slots_.size()) + " tensors");
  const Slot& slot = slots_[index];
  if (!full.defined())
    throw Error(std::string("sharding: ") + what + ": the tensor '" + slot.name + "' is undefined");
  if (full.sizes() != at::IntArrayRef(slot.shape))
    throw Error(std::string("sharding: ") + what + ": the tensor '" + slot.name + "' has shape " +
                shape_text(full.sizes()) + ", the layout's is " + shape_text(slot.shape));
}

void Layout::check_buffer(const at::Tensor& buffer, std::int64_t numel, const char* what) const {
  if (!buffer.defined()) throw Error(std::string("sharding: ") + what + ": the buffer is undefined");
  const at::ScalarType dtype = buffer.scalar_type();
  if (buffer.dim() != 1 || buffer.numel() != numel || !buffer.is_contiguous())
    throw Error(std::string("sharding: ") + what + ": the " + c10::toString(dtype) + " buffer has shape " +
                shape_text(buffer.sizes()) + (buffer.is_contiguous() ? "" : " (not contiguous)") +
                ", the layout's is [" + std::to_string(numel) + "] (contiguous)");
}

void Layout::check_count(const std::vector<at::Tensor>& full, const char* what) const {
  if (full.size() != slots_.size())
    throw Error(std::string("sharding: ") + what + ": " + std::to_string(full.size()) +
                " tensors given, the layout has " + std::to_string(slots_.size()));
}

at::Tensor Layout::new_buffer(at::ScalarType dtype, at::Device device) const {
  return at::zeros({buffer_numel(dtype)}, at::TensorOptions().dtype(dtype).device(device));
}

at::Tensor Layout::shard(const at::Tensor& full, std::size_t index) const {
  check_full(full, index, "shard");
  const Slot& slot = slots_[index];
  // A 0-d tensor is one row: [1] on rank 0, [0] elsewhere.
  at::Tensor rows = slot.shape.empty() ? full.reshape({1}) : full;
  return rows.narrow(0, slot.held.begin, slot.held.count());
}

at::Tensor Layout::shard_of_buffer(const at::Tensor& buffer, std::size_t index) const {
  if (index >= slots_.size())
    throw Error("sharding: shard_of_buffer: tensor index " + std::to_string(index) + " is outside the layout's " +
                std::to_string(slots_.size()) + " tensors");
  const Slot& slot = slots_[index];
  if (!buffer.defined()) throw Error("sharding: shard_of_buffer: the buffer is undefined");
  if (buffer.scalar_type() != slot.dtype)
    throw Error("sharding: shard_of_buffer: the tensor '" + slot.name + "' lives in the " +
                c10::toString(slot.dtype) + " buffer, not a " + c10::toString(buffer.scalar_type()) + " one");
  check_buffer(buffer, buffer_numel(slot.dtype), "shard_of_buffer");
  return buffer.narrow(0, slot.offset, slot.shard_numel()).view(slot.shard_shape());
}

void Layout::write_shard(const at::Tensor& full, std::size_t index, const at::Tensor& buffer) const {
  c10::NoGradGuard no_grad;  // `full` may be a parameter: the buffer takes its values, not its autograd history
  at::Tensor rows = shard(full, index);
  shard_of_buffer(buffer, index).copy_(rows);
}

void Layout::write_shards(const std::vector<at::Tensor>& full, const at::Tensor& buffer) const {
  check_count(full, "write_shards");
  if (!buffer.defined()) throw Error("sharding: write_shards: the buffer is undefined");
  const at::ScalarType dtype = buffer.scalar_type();
  check_buffer(buffer, buffer_numel(dtype), "write_shards");
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (slot.dtype != dtype) continue;
    write_shard(full[i], i, buffer);
    // The padding stays zero, so a sum or norm over the whole buffer counts real elements only.
    buffer.narrow(0, slot.offset + slot.shard_numel(), slot.slot_numel() - slot.shard_numel()).zero_();
  }
}

std::vector<Bucket> Layout::buckets(std::int64_t max_bytes) const {
  return buckets(max_bytes, std::vector<int>(slots_.size(), 0));
}

std::vector<Bucket> Layout::buckets(std::int64_t max_bytes, const std::vector<int>& group_of_slot) const {
  if (group_of_slot.size() != slots_.size())
    throw Error("layout: buckets: " + std::to_string(group_of_slot.size()) + " groups given for " +
                std::to_string(slots_.size()) + " slots");
  std::vector<Bucket> out;
  for (at::ScalarType dtype : dtypes_) {
    const std::int64_t most = std::max<std::int64_t>(1, max_bytes / static_cast<std::int64_t>(c10::elementSize(dtype)));
    Bucket current{dtype, 0, 0};
    int group = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const Slot& slot = slots_[i];
      if (slot.dtype != dtype) continue;
      const bool other_group = current.numel() > 0 && group_of_slot[i] != group;
      if (other_group || (current.numel() > 0 && current.numel() + slot.slot_numel() > most)) {
        out.push_back(current);
        current = Bucket{dtype, current.end, current.end};
      }
      group = group_of_slot[i];
      current.end = slot.offset + slot.slot_numel();
    }
    out.push_back(current);
  }
  return out;
}

at::Tensor Layout::pack(const std::vector<at::Tensor>& full, at::ScalarType dtype) const {
  return pack(full, Bucket{dtype, 0, buffer_numel(dtype)});
}

at::Tensor Layout::pack(const std::vector<at::Tensor>& full, const Bucket& bucket) const {
  check_count(full, "pack");
  const at::ScalarType dtype = bucket.dtype;
  const std::int64_t size = bucket.numel();
  const std::int64_t world = world_size_;
  c10::Device device = c10::kCPU;
  bool any = false;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!in_bucket(slots_[i], bucket)) continue;
    check_full(full[i], i, "pack");
    if (!any) device = full[i].device();
    any = true;
  }
  if (!any)
    throw Error(std::string("sharding: pack: the layout has no tensor of dtype ") + c10::toString(dtype) +
                (size == buffer_numel(dtype) ? "" : " in elements [" + std::to_string(bucket.begin) + ", " +
                                                        std::to_string(bucket.end) + ")"));
  c10::NoGradGuard no_grad;
  at::Tensor packed = at::empty({world * size}, at::TensorOptions().dtype(dtype).device(device));
  at::Tensor parts = packed.view({world, size});  // row q: rank q's part of the bucket
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (!in_bucket(slot, bucket) || slot.slot_numel() == 0) continue;
    const std::int64_t height = slot.slot_numel();
    const Split split = split_of(slot);
    at::Tensor block = parts.narrow(1, slot.offset - bucket.begin, height);  // [W, c * row_numel]: this slot
    at::Tensor flat = full[i].reshape({-1});                  // rank q's rows are flat[q*height, ...): contiguous
    if (split.whole > 0)  // the ranks holding a whole slot: one strided copy
      block.narrow(0, 0, split.whole).copy_(flat.narrow(0, 0, split.whole * height).view({split.whole, height}));
    if (split.whole < world) {
      at::Tensor partial = block[split.whole];
      const std::int64_t rest = split.rest * slot.row_numel;
      partial.narrow(0, 0, rest).copy_(flat.narrow(0, split.whole * height, rest));
      partial.narrow(0, rest, height - rest).zero_();
      block.narrow(0, split.whole + 1, world - split.whole - 1).zero_();  // ranks with no rows: all padding
    }
  }
  return packed;
}

std::vector<at::Tensor> Layout::unpack(const at::Tensor& gathered) const {
  if (!gathered.defined()) throw Error("sharding: unpack: the gathered buffer is undefined");
  std::vector<at::Tensor> full(slots_.size());
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].dtype == gathered.scalar_type()) full[i] = at::empty(slots_[i].shape, gathered.options());
  unpack_into(gathered, full);
  return full;
}

void Layout::unpack_into(const at::Tensor& gathered, const std::vector<at::Tensor>& full) const {
  if (!gathered.defined()) throw Error("sharding: unpack: the gathered buffer is undefined");
  unpack_into(gathered, full, Bucket{gathered.scalar_type(), 0, buffer_numel(gathered.scalar_type())});
}

void Layout::unpack_into(const at::Tensor& gathered, const std::vector<at::Tensor>& full, const Bucket& bucket) const {
  check_count(full, "unpack");
  if (!gathered.defined()) throw Error("sharding: unpack: the gathered buffer is undefined");
  const at::ScalarType dtype = gathered.scalar_type();
  if (dtype != bucket.dtype)
    throw Error(std::string("sharding: unpack: the gathered buffer is ") + c10::toString(dtype) + ", the bucket " +
                c10::toString(bucket.dtype));
  const std::int64_t size = bucket.numel();
  const std::int64_t world = world_size_;
  if (gathered.dim() != 1 || gathered.numel() != world * size)
    throw Error(std::string("sharding: unpack: the gathered ") + c10::toString(dtype) + " buffer has shape " +
                shape_text(gathered.sizes()) + ", the layout's is [" + std::to_string(world * size) + "] (" +
                std::to_string(world) + " ranks x " + std::to_string(size) + " elements)");
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (in_bucket(slots_[i], bucket)) check_full(full[i], i, "unpack");
  c10::NoGradGuard no_grad;  // the targets may be parameters
  at::Tensor parts = gathered.contiguous().view({world, size});
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (!in_bucket(slot, bucket) || slot.slot_numel() == 0) continue;
    const std::int64_t height = slot.slot_numel();
    const Split split = split_of(slot);
    at::Tensor block = parts.narrow(1, slot.offset - bucket.begin, height);
    // Written in place when the target is contiguous, else through a contiguous copy.
    const at::Tensor& target = full[i];
    at::Tensor flat = target.is_contiguous() ? target.view({-1}) : at::empty({target.numel()}, target.options());
    if (split.whole > 0)
      flat.narrow(0, 0, split.whole * height).view({split.whole, height}).copy_(block.narrow(0, 0, split.whole));
    if (split.rest > 0) {
      const std::int64_t rest = split.rest * slot.row_numel;
      flat.narrow(0, split.whole * height, rest).copy_(block[split.whole].narrow(0, 0, rest));
    }
    if (!target.is_contiguous()) target.copy_(flat.view(target.sizes()));
  }
}

at::Tensor Layout::shard_of_part(const at::Tensor& part, const Bucket& bucket, std::size_t index) const {
  if (index >= slots_.size() || !in_bucket(slots_[index], bucket))
    throw Error("sharding: shard_of_part: tensor index " + std::to_string(index) + " is not in the bucket");
  const Slot& slot = slots_[index];
  if (!part.defined() || part.dim() != 1 || part.numel() != bucket.numel() || part.scalar_type() != bucket.dtype)
    throw Error("sharding: shard_of_part: the part of the bucket holding '" + slot.name + "' must be " +
                c10::toString(bucket.dtype) + "[" + std::to_string(bucket.numel()) + "]");
  return part.narrow(0, slot.offset - bucket.begin, slot.shard_numel()).view(slot.shard_shape());
}

at::Tensor Layout::pack_own(const std::vector<at::Tensor>& full, const Bucket& bucket) const {
  check_count(full, "pack_own");
  at::Tensor part;
  c10::NoGradGuard no_grad;  // `full` may hold parameters: the part takes their values
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    if (!in_bucket(slot, bucket) || slot.slot_numel() == 0) continue;
    check_full(full[i], i, "pack_own");
    if (!part.defined()) part = at::empty({bucket.numel()}, full[i].options().requires_grad(false));
    shard_of_part(part, bucket, i).copy_(shard(full[i], i));
    part.narrow(0, slot.offset - bucket.begin + slot.shard_numel(), slot.slot_numel() - slot.shard_numel()).zero_();
  }
  if (!part.defined())
    throw Error(std::string("sharding: pack_own: no tensor of the layout lies in the ") +
                c10::toString(bucket.dtype) + " elements [" + std::to_string(bucket.begin) + ", " +
                std::to_string(bucket.end) + ")");
  return part;
}

}  // namespace baton::sharding
