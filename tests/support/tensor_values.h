#pragma once
// Tensors read out as plain numbers and whole models compared bit for bit, for the tests' expected values: those
// are computed by loops over doubles, not by the ATen calls the code under test makes. Include after "baton_test.h".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/equal.h>
#include <torch/nn/module.h>

namespace baton::test {

using Rows = std::vector<std::vector<double>>;
using Weights = std::map<std::string, at::Tensor>;  // a model's parameters and buffers by name

/// A tensor's values as doubles, flattened.
inline std::vector<double> values_of(const at::Tensor& t) {
  at::Tensor d = t.detach().to(at::kDouble).cpu().contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

/// The rows of a tensor [N, ...] as doubles, each row flattened.
inline Rows rows_of(const at::Tensor& t) {
  const std::vector<double> all = values_of(t);
  const std::size_t n = static_cast<std::size_t>(t.size(0));
  const std::size_t width = n ? all.size() / n : 0;
  Rows rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i].assign(all.begin() + i * width, all.begin() + (i + 1) * width);
  return rows;
}

inline std::vector<std::int64_t> labels_of(const at::Tensor& t) {
  at::Tensor l = t.to(at::kLong).cpu().contiguous();
  return std::vector<std::int64_t>(l.data_ptr<std::int64_t>(), l.data_ptr<std::int64_t>() + l.numel());
}

/// -sum_c p_c log softmax(o)_c, averaged over rows: cross entropy of logits against class probabilities.
inline double hand_cross_entropy(const Rows& logits, const Rows& probabilities) {
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    double top = logits[i][0];
    for (double v : logits[i]) top = std::max(top, v);
    double z = 0;
    for (double v : logits[i]) z += std::exp(v - top);
    const double log_z = top + std::log(z);
    for (std::size_t c = 0; c < logits[i].size(); ++c) total -= probabilities[i][c] * (logits[i][c] - log_z);
  }
  return total / static_cast<double>(logits.size());
}

/// A copy of every parameter and buffer (BatchNorm's running statistics included).
inline Weights copy_state(const torch::nn::Module& model) {
  Weights out;
  for (const auto& item : model.named_parameters(true)) out[item.key()] = item.value().detach().clone();
  for (const auto& item : model.named_buffers(true)) out[item.key()] = item.value().detach().clone();
  return out;
}

/// The same names, dtypes and bits.
inline bool bitwise_equal(const Weights& a, const Weights& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, tensor] : a) {
    auto it = b.find(name);
    if (it == b.end() || tensor.scalar_type() != it->second.scalar_type() || !at::equal(tensor, it->second))
      return false;
  }
  return true;
}

/// Whether two models hold bitwise the same parameters and buffers.
inline bool same_weights(const torch::nn::Module& a, const torch::nn::Module& b) {
  return bitwise_equal(copy_state(a), copy_state(b));
}

}  // namespace baton::test
