#pragma once
// What a plugin saves into a checkpoint: named tensors plus named scalars. Tensors are written to the checkpoint's
// safetensors file, scalars to its JSON metadata; nothing is pickled and loading executes no code.
// The header forward-declares at::Tensor so that the plugin SDK stays light; a plugin that builds or reads
// tensors includes <ATen/core/Tensor.h> (or more) itself.
#include <cstdint>
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
