#pragma once
// Private to core/ema's tests: a small two-level model and the closed form its weights' EMA must match.
#include <cmath>
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>

#include "baton/ema.h"
#include "baton_test.h"
#include "error_text.h"

namespace baton::ema_test {


// A two-level model: dotted names, parameters, a floating buffer and an integer buffer (like BatchNorm's).
// Module::to(dtype) in C++ converts integer buffers too (Python's does not), so models are built in their dtype.
struct Block : torch::nn::Module {
  explicit Block(at::ScalarType dtype = at::kFloat) {
    weight = register_parameter("weight", at::zeros({3, 4}, dtype));
    bias = register_parameter("bias", at::zeros({4}, dtype));
  }
  at::Tensor weight, bias;
};

struct Net : torch::nn::Module {
  explicit Net(at::ScalarType dtype = at::kFloat) {
    block = register_module("block", std::make_shared<Block>(dtype));
    head = register_parameter("head", at::zeros({5}, dtype));
    running_mean = register_buffer("running_mean", at::zeros({4}, dtype));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  }
  std::shared_ptr<Block> block;
  at::Tensor head, running_mean, num_batches_tracked;
};

inline std::vector<double> values(const at::Tensor& t) {
  at::Tensor d = t.detach().to(at::kDouble).cpu().contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// Element i of the weights at step j, rounded to the tensor's dtype (the EMA sees the rounded value).
inline double weight_value(std::size_t i, int step, at::ScalarType dtype) {
  const double exact = std::sin(0.37 * static_cast<double>(i) + 1.3 * step) + 0.25 * step;
  return values(at::full({}, exact, at::kDouble).to(dtype))[0];
}

inline void set_weights(const at::Tensor& t, int step) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = weight_value(i, step, t.scalar_type());
  at::NoGradGuard no_grad;
  at::Tensor source = at::from_blob(v.data(), t.sizes(), at::kDouble).to(t.scalar_type());
  t.copy_(source);
}

inline void set_all(Net& net, int step) {
  for (const auto& p : net.named_parameters()) set_weights(p.value(), step);
  set_weights(net.running_mean, step);
  net.num_batches_tracked.fill_(step * 10 + 1);
}

// ema_k = s^k w0 + (1 - s) sum_{j=1..k} s^(k-j) w_j, in double.
inline double closed_form(std::size_t i, int k, double s, at::ScalarType dtype) {
  double sum = std::pow(s, k) * weight_value(i, 0, dtype);
  for (int j = 1; j <= k; ++j) sum += (1 - s) * std::pow(s, k - j) * weight_value(i, j, dtype);
  return sum;
}

inline void check_closed_form(const at::Tensor& ema, int k, double s, at::ScalarType weight_dtype, double tolerance) {
  const auto got = values(ema);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(got[i] - closed_form(i, k, s, weight_dtype)) <= tolerance);
  }
}

inline void check_equal_to_weights(const at::Tensor& ema, int step, at::ScalarType dtype) {
  const auto got = values(ema);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == weight_value(i, step, dtype));
}

inline bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

inline std::vector<at::Tensor> snapshot(const torch::nn::Module& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.named_parameters()) out.push_back(p.value().detach().clone());
  for (const auto& b : model.named_buffers()) out.push_back(b.value().detach().clone());
  return out;
}

inline bool same_as(const torch::nn::Module& model, const std::vector<at::Tensor>& saved) {
  auto now = snapshot(model);
  if (now.size() != saved.size()) return false;
  for (std::size_t i = 0; i < now.size(); ++i)
    if (!bitwise_equal(now[i], saved[i])) return false;
  return true;
}

using baton::test::contains;

// Runs k updates over the weight sequence of set_all.
inline void run_updates(baton::ExponentialMovingAverage& ema, Net& net, int k) {
  for (int j = 1; j <= k; ++j) {
    set_all(net, j);
    ema.update(net);
  }
}


}  // namespace baton::ema_test
