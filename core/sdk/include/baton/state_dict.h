#pragma once
// What a plugin saves into a checkpoint: named tensors plus named scalars. Tensors are written to the checkpoint's
// safetensors file, scalars to its JSON metadata; nothing is pickled and loading executes no code.
// The header forward-declares at::Tensor so that the plugin SDK stays light; a plugin that builds or reads
// tensors includes <ATen/core/Tensor.h> (or more) itself.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "baton/export.h"

namespace at {
class Tensor;
}

namespace baton {

class BATON_API StateDict {
 public:
  StateDict();
  ~StateDict();
  StateDict(const StateDict& other);
  StateDict& operator=(const StateDict& other);
  StateDict(StateDict&&) noexcept;
  StateDict& operator=(StateDict&&) noexcept;

  /// Stores a tensor under key (shallow: the checkpoint writer copies the bytes when it writes).
  void set_tensor(const std::string& key, const at::Tensor& tensor);
  bool has_tensor(const std::string& key) const;
  /// The tensor under key; throws CheckpointError naming the key when it is missing.
  at::Tensor tensor(const std::string& key) const;
  /// Keys in insertion order.
  std::vector<std::string> tensor_keys() const;

  void set_int(const std::string& key, std::int64_t value);
  void set_double(const std::string& key, double value);
  void set_bool(const std::string& key, bool value);
  void set_string(const std::string& key, const std::string& value);
  bool has(const std::string& key) const;
  // Typed getters throw CheckpointError naming the key when it is missing or holds another type (an int is
  // accepted where a double is asked).
  std::int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  /// Scalar keys in insertion order.
  std::vector<std::string> keys() const;

  /// Row tensors: state split over the ranks along dim 0 (a sharded EMA's average, any state a rank keeps only its
  /// rows of). `rows` holds rows [first_row, first_row + rows.size(0)) of the global tensor `key` (a 0-d tensor:
  /// given whole by one rank, first_row 0). A checkpoint writes each rank's row tensors to that rank's file in the
  /// plugin's folder (`<checkpoint>/<plugin id>/`, in the form of the model's shard files), in parallel and with no
  /// gather; a rank that holds no rows of a tensor sets nothing for it, and one that holds copies of a small tensor
  /// every rank has (a counter) sets it on one rank only, so the folder's files hold every row once.
  void set_rows(const std::string& key, const at::Tensor& rows, std::int64_t first_row);
  /// Saving: the keys set_rows gave; loading: the row tensors of the checkpoint's files. In order.
  std::vector<std::string> row_keys() const;
  bool has_rows(const std::string& key) const;
  /// The block set_rows stored under `key`, and its first row.
  at::Tensor row_block(const std::string& key, std::int64_t* first_row = nullptr) const;
  /// The global shape of row tensor `key`: read from a checkpoint, the shape over all ranks' blocks; stored by
  /// set_rows, the block's rows counted from 0.
  std::vector<std::int64_t> rows_shape(const std::string& key) const;
  /// Rows [first, first + count) of row tensor `key` (CPU), at any world size: read from the checkpoint's files,
  /// only the blocks that overlap them (each checked against its checksum), or taken from the block set_rows
  /// stored. A 0-d tensor: first 0, count 1, returned 0-d. Throws CheckpointError naming the key and rows.
  at::Tensor read_rows(const std::string& key, std::int64_t first, std::int64_t count) const;
  /// The checkpoint reader's side: row tensors held in files, by global shape, and what reads their rows.
  using RowReader = std::function<at::Tensor(const std::string& key, std::int64_t first, std::int64_t count)>;
  void attach_rows(std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes, RowReader read);

  /// No tensors, row tensors or scalars.
  bool empty() const;
  void clear();

  /// Scalars as a JSON object text, and back (used by the checkpoint writer; handy in tests).
  std::string scalars_json() const;
  void set_scalars_json(const std::string& json);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
