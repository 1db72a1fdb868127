#pragma once
// A step's data as named tensors (Composer's model contract: the trainer never looks inside a batch). A Batch is
// what a dataset hands out, sample dimension first in every field; Outputs are what a model computes from it. Both
// keep their fields in order, so "the first field" and "the fields as listed" mean the same thing everywhere.
// Only ATen's tensor type comes in.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"

namespace baton {

/// Named tensors in order. Reading a field that is not there throws baton::Error naming it and the fields present,
/// so a model or plugin that expects "mask" says so instead of failing somewhere inside ATen.
class BATON_API TensorFields {
 public:
  using Entry = std::pair<std::string, at::Tensor>;

  bool has(const std::string& name) const { return find(name) != nullptr; }
  /// The field's tensor, or null when there is none.
  const at::Tensor* find(const std::string& name) const;
  at::Tensor* find(const std::string& name);
  /// The field's tensor (replace it in place through the reference); throws when there is none.
  const at::Tensor& operator[](const std::string& name) const;
  at::Tensor& operator[](const std::string& name);
  /// Replaces the field, or appends it when there is none. An undefined tensor removes it.
  void set(const std::string& name, at::Tensor value);
  /// Removes the field; false when there was none.
  bool erase(const std::string& name);

  std::vector<std::string> names() const;
  std::size_t count() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }
  std::vector<Entry>::iterator begin() { return entries_.begin(); }
  std::vector<Entry>::iterator end() { return entries_.end(); }
  /// "inputs [8, 1, 28, 28] Float, targets [8] Long", for messages.
  std::string describe() const;

 protected:
  TensorFields(const char* kind, std::initializer_list<Entry> entries);
  [[noreturn]] void missing(const std::string& name) const;

 private:
  const char* kind_;  // "batch" or "outputs", for messages
  std::vector<Entry> entries_;
};

/// A batch of samples: every field [B, ...]. The built-in datasets give `inputs` and `targets`; a dataset may give
/// any fields (a dataset without targets is valid: a generative model's data).
class BATON_API Batch : public TensorFields {
 public:
  Batch() : TensorFields("batch", {}) {}
  Batch(std::initializer_list<Entry> entries) : TensorFields("batch", entries) {}
  /// The common case: inputs and targets (an undefined tensor is left out).
  static Batch of(at::Tensor inputs, at::Tensor targets);

  at::Tensor& inputs() { return (*this)["inputs"]; }
  const at::Tensor& inputs() const { return (*this)["inputs"]; }
  at::Tensor& targets() { return (*this)["targets"]; }
  const at::Tensor& targets() const { return (*this)["targets"]; }
  /// The number of samples: the first field's leading dimension; 0 for an empty batch.
  std::int64_t size() const;
  /// Samples [begin, end) of every field (views, no copy).
  Batch slice(std::int64_t begin, std::int64_t end) const;
};

/// What a model computes from a batch. A model with one output gives one field, `outputs` (a tensor converts to
/// that); a model may give several (a prediction and an auxiliary loss, a sample and its latent), and main() is the
/// one losses, metrics and predictions use by default.
class BATON_API Outputs : public TensorFields {
 public:
  Outputs() : TensorFields("outputs", {}) {}
  Outputs(at::Tensor main);  // NOLINT(google-explicit-constructor): a model's one tensor is its outputs
  Outputs(std::initializer_list<Entry> entries) : TensorFields("outputs", entries) {}

  /// The field `outputs` when there is one, else the first field; throws when there is none.
  const at::Tensor& main() const;
  at::Tensor& main();
  bool defined() const { return !empty(); }
};

}  // namespace baton
