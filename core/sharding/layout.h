#pragma once
// Where each rank's shards live: FSDP2's Shard(0) layout, stored as one flat buffer per dtype.
//
// A tensor of global shape [d0, d1, ...] is split along dim 0 as torch.chunk(t, W, 0) splits it: c = ceil(d0 / W)
// rows per rank, rank r holding rows [r*c, min((r+1)*c, d0)), so trailing ranks may hold fewer rows or none. A 0-d
// tensor counts as one row, held by rank 0. Every rank's piece of every tensor is thus one rectangular block with
// known offsets: a state dict shards with no communication, and the sharded checkpoint can name each block.
//
// For speed a rank keeps its shards of all tensors of one dtype in one flat buffer, so an update over the rank's
// shards (an optimizer step, the EMA) is one fused op. Each tensor owns a padded slot of c * row_numel elements at
// the same offset on every rank, so the buffer has the same size S on every rank. Everything here is computed from
// the global shapes alone, never from a rank's local sizes: a collective sized from uneven local shards makes the
// ranks disagree on its size and hang (a known failure of shard-local saves elsewhere).
//
// The collectives use the same slots: pack() lays full tensors out rank-major as W buffers of S elements, so that
// Communicator::reduce_scatter hands each rank exactly its buffer; Communicator::all_gather of the ranks' buffers
// gives the same [W * S] arrangement back, which unpack() turns into full tensors, dropping the padding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace baton::sharding {

/// A tensor to shard, by its global (unsharded) shape.
struct TensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  at::ScalarType dtype = at::kFloat;
};

/// Rows [begin, end) of a tensor's dim 0; empty when begin == end.
struct RowRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t count() const { return end - begin; }
};

/// Consecutive slots of one dtype: elements [begin, end) of every rank's buffer of `dtype`, whole slots only. The
/// collectives of a sharded step move a bucket at a time, so their buffers are a bucket's size, not the model's.
struct Bucket {
  at::ScalarType dtype = at::kFloat;
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t numel() const { return end - begin; }
};

/// One tensor's place in the layout.
struct Slot {
  std::string name;
  std::vector<std::int64_t> shape;  // global
  at::ScalarType dtype = at::kFloat;
  std::int64_t rows = 0;            // dim 0; 1 for a 0-d tensor
  std::int64_t row_numel = 0;       // elements per row: the product of the other dims (1 for 1-D and 0-d)
  std::int64_t rows_per_rank = 0;   // c = ceil(rows / W): the slot's height on every rank, padding included
  std::int64_t offset = 0;          // first element of the slot in a rank's buffer of this dtype, on every rank
  RowRange held;                    // the rows this rank holds

  /// The slot's elements in a rank's buffer, padding included: rows_per_rank * row_numel.
  std::int64_t slot_numel() const { return rows_per_rank * row_numel; }
  /// The elements this rank holds: held.count() * row_numel.
  std::int64_t shard_numel() const { return held.count() * row_numel; }
  /// This rank's shard: [held rows, d1, ...]; for a 0-d tensor [1] on rank 0 and [0] elsewhere.
  std::vector<std::int64_t> shard_shape() const;
};

class Layout {
 public:
  /// Throws Error on a world size below 1, a rank outside [0, world_size), a negative dimension or a name given
  /// twice.
  Layout(std::vector<TensorSpec> tensors, int rank, int world_size);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  /// In the order given.
  const std::vector<Slot>& slots() const { return slots_; }
  /// The slot's index; throws Error naming `name` when the layout has no such tensor.
  std::size_t index_of(const std::string& name) const;
  /// Rows of slot `index` held by rank `rank` (any rank, not only this one).
  RowRange rows_of(std::size_t index, int rank) const;
  /// The dtypes with a buffer, in order of first appearance.
  const std::vector<at::ScalarType>& dtypes() const { return dtypes_; }
  /// S: the elements of a rank's buffer of `dtype`, the same on every rank (0 for a dtype with no tensor).
  std::int64_t buffer_numel(at::ScalarType dtype) const;

  /// The buckets covering every buffer, dtype by dtype in dtypes() order: consecutive slots joined while a rank's
  /// part stays within `max_bytes` (a larger slot is a bucket alone). Their union is each buffer, [0, S).
  std::vector<Bucket> buckets(std::int64_t max_bytes) const;
  /// The same, with a bucket also ending wherever `group_of_slot` (one entry per slot) changes, so every bucket's
  /// slots belong to one group (a zero3 unit's slots are gathered and reduced together, apart from the others').
  std::vector<Bucket> buckets(std::int64_t max_bytes, const std::vector<int>& group_of_slot) const;
  /// Whether `slot` lies in `bucket`.
  static bool in_bucket(const Slot& slot, const Bucket& bucket) {
    return slot.dtype == bucket.dtype && slot.offset >= bucket.begin && slot.offset + slot.slot_numel() <= bucket.end;
  }

  /// A zeroed buffer of S elements of `dtype` for this rank's shards.
  at::Tensor new_buffer(at::ScalarType dtype, at::Device device) const;
  /// This rank's rows of the full tensor `full` of slot `index`: a view into `full`, of shard_shape().
  /// Throws Error when `full`'s shape is not the slot's.
  at::Tensor shard(const at::Tensor& full, std::size_t index) const;
  /// Slot `index`'s shard inside this rank's `buffer` (of its dtype, S elements): a view of shard_shape(), so an
  /// update through it updates the buffer.
  at::Tensor shard_of_buffer(const at::Tensor& buffer, std::size_t index) const;
  /// Copies this rank's rows of `full` (slot `index`'s full tensor; any dtype, converted) into `buffer`.
  void write_shard(const at::Tensor& full, std::size_t index, const at::Tensor& buffer) const;
  /// write_shard for every slot of `buffer`'s dtype, `full` holding one tensor per slot in the layout's order
  /// (those of other dtypes are not read and may be undefined); the slots' padding is zeroed.
  void write_shards(const std::vector<at::Tensor>& full, const at::Tensor& buffer) const;

  /// The slots of `dtype` of every rank, rank-major: a [W * S] tensor whose part q (elements [q*S, (q+1)*S)) is
  /// rank q's buffer, padding zeroed. `full` holds one tensor per slot, as in write_shards; the result is on the
  /// device of the first of them. Communicator::reduce_scatter of it gives each rank its buffer summed (or
  /// averaged) over the ranks.
  at::Tensor pack(const std::vector<at::Tensor>& full, at::ScalarType dtype) const;
  /// pack() of the slots of one bucket: [W * bucket.numel()], part q being elements [begin, end) of rank q's buffer.
  at::Tensor pack(const std::vector<at::Tensor>& full, const Bucket& bucket) const;
  /// The full tensors of `gathered`'s dtype from every rank's buffer concatenated in rank order ([W * S], as
  /// Communicator::all_gather returns): one tensor per slot in the layout's order, undefined for the slots of
  /// other dtypes.
  std::vector<at::Tensor> unpack(const at::Tensor& gathered) const;
  /// unpack() into existing full tensors (parameters, say), one per slot as in write_shards.
  void unpack_into(const at::Tensor& gathered, const std::vector<at::Tensor>& full) const;
  /// unpack_into() of one bucket's slots from the ranks' parts of it ([W * bucket.numel()], rank order).
  void unpack_into(const at::Tensor& gathered, const std::vector<at::Tensor>& full, const Bucket& bucket) const;
  /// Slot `index`'s shard inside `part`, this rank's part of `bucket` ([bucket.numel()] elements, as
  /// Communicator::reduce_scatter returns it): a view of shard_shape().
  at::Tensor shard_of_part(const at::Tensor& part, const Bucket& bucket, std::size_t index) const;
  /// This rank's part of `bucket` from the full tensors (`full` as in pack()): [bucket.numel()], each slot's rows
  /// at its place, padding zeroed: what this rank gives the bucket's all-gather.
  at::Tensor pack_own(const std::vector<at::Tensor>& full, const Bucket& bucket) const;

 private:
  void check_full(const at::Tensor& full, std::size_t index, const char* what) const;
  void check_buffer(const at::Tensor& buffer, std::int64_t numel, const char* what) const;
  void check_count(const std::vector<at::Tensor>& full, const char* what) const;

  int rank_ = 0;
  int world_size_ = 1;
  std::vector<Slot> slots_;
  std::vector<at::ScalarType> dtypes_;
  std::vector<std::int64_t> buffer_numels_;  // beside dtypes_
};

}  // namespace baton::sharding
