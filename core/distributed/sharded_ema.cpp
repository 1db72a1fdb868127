#include "distributed/sharded_ema.h"

#include <algorithm>

#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/error.h"
#include "distributed/communicator.h"

namespace baton {
namespace {

// The tensors the EMA averages, in a fixed order: floating-point parameters, then floating-point buffers.
std::vector<std::pair<std::string, at::Tensor>> averaged_tensors(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    if (item.value().is_floating_point()) out.emplace_back(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true))
    if (item.value().is_floating_point()) out.emplace_back(item.key(), item.value());
  return out;
}

void check_smoothing(double s) {
  if (!(s >= 0 && s <= 1)) throw Error("sharded EMA: smoothing " + std::to_string(s) + " is outside [0, 1]");
}

}  // namespace

struct ShardedEma::Impl {
  // Where one model tensor's elements overlap this rank's slice.
  struct Segment {
    std::size_t tensor;
    std::int64_t offset_in_tensor;
    std::int64_t offset_in_shard;
    std::int64_t length;
  };

  std::shared_ptr<Communicator> comm;
  double smoothing = 0;
  std::vector<std::string> names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::int64_t> offsets;  // of each tensor in the flattened EMA
  std::int64_t total = 0;
  std::int64_t chunk = 0;  // every rank's slice length (the last one padded) so an allgather can join them
  std::int64_t begin = 0, end = 0;
  std::vector<Segment> segments;
  at::Tensor shard;  // fp32, `chunk` elements

  void layout(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int rank, int world) {
    for (const auto& [name, t] : tensors) {
      names.push_back(name);
      shapes.push_back(t.sizes().vec());
      offsets.push_back(total);
      total += t.numel();
    }
    chunk = (total + world - 1) / world;
    begin = std::min(total, chunk * rank);
    end = std::min(total, begin + chunk);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      std::int64_t lo = std::max(begin, offsets[i]);
      std::int64_t hi = std::min(end, offsets[i] + tensors[i].second.numel());
      if (lo < hi) segments.push_back(Segment{i, lo - offsets[i], lo - begin, hi - lo});
    }
    shard = at::zeros({chunk}, at::TensorOptions().dtype(at::kFloat).device(tensors.empty()
                                                                             ? at::Device(at::kCPU)
                                                                             : tensors.front().second.device()));
  }

  std::vector<std::pair<std::string, at::Tensor>> weights_of(const torch::nn::Module& model) const {
    auto tensors = averaged_tensors(model);
    if (tensors.size() != names.size())
      throw Error("sharded EMA: the model has " + std::to_string(tensors.size()) + " floating-point tensors, the EMA " +
                  std::to_string(names.size()));
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].first != names[i] || tensors[i].second.sizes().vec() != shapes[i])
        throw Error("sharded EMA: model tensor '" + tensors[i].first + "' does not match the EMA's '" + names[i] + "'");
    return tensors;
  }

  at::Tensor piece(const at::Tensor& weight, const Segment& s) const {
    return weight.detach().reshape({-1}).slice(0, s.offset_in_tensor, s.offset_in_tensor + s.length);
  }

  void copy_from(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    c10::NoGradGuard no_grad;
    for (const auto& s : segments)
      shard.slice(0, s.offset_in_shard, s.offset_in_shard + s.length).copy_(piece(tensors[s.tensor].second, s));
  }
};

ShardedEma::ShardedEma(const torch::nn::Module& model, std::shared_ptr<Communicator> comm, double smoothing)
    : impl_(std::make_unique<Impl>()) {
  check_smoothing(smoothing);
  impl_->comm = std::move(comm);
  impl_->smoothing = smoothing;
  auto tensors = averaged_tensors(model);
  impl_->layout(tensors, impl_->comm ? impl_->comm->rank() : 0, impl_->comm ? impl_->comm->world_size() : 1);
  impl_->copy_from(tensors);
}

ShardedEma::~ShardedEma() = default;

void ShardedEma::update(const torch::nn::Module& model) { update(model, impl_->smoothing); }

void ShardedEma::update(const torch::nn::Module& model, double smoothing) {
  check_smoothing(smoothing);
  auto tensors = impl_->weights_of(model);
  c10::NoGradGuard no_grad;
  for (const auto& s : impl_->segments) {
    at::Tensor ema = impl_->shard.slice(0, s.offset_in_shard, s.offset_in_shard + s.length);
    ema.mul_(smoothing).add_(impl_->piece(tensors[s.tensor].second, s).to(at::kFloat), 1.0 - smoothing);
  }
}

std::vector<std::pair<std::string, at::Tensor>> ShardedEma::gather() const {
  at::Tensor full = impl_->comm ? impl_->comm->all_gather(impl_->shard) : impl_->shard;
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (std::size_t i = 0; i < impl_->names.size(); ++i) {
    std::int64_t n = 1;
    for (auto d : impl_->shapes[i]) n *= d;
    out.emplace_back(impl_->names[i],
                     full.slice(0, impl_->offsets[i], impl_->offsets[i] + n).view(impl_->shapes[i]).clone());
  }
  return out;
}

void ShardedEma::load_full(const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::vector<std::pair<std::string, at::Tensor>> ordered;
  for (std::size_t i = 0; i < impl_->names.size(); ++i) {
    auto it = std::find_if(state.begin(), state.end(), [&](const auto& item) { return item.first == impl_->names[i]; });
    if (it == state.end()) throw Error("sharded EMA: tensor '" + impl_->names[i] + "' is missing from the saved EMA");
    if (it->second.sizes().vec() != impl_->shapes[i])
      throw Error("sharded EMA: saved tensor '" + impl_->names[i] + "' has another shape than the model's");
    ordered.emplace_back(it->first, it->second.to(impl_->shard.device(), at::kFloat));
  }
  impl_->copy_from(ordered);
}

std::int64_t ShardedEma::total_elements() const { return impl_->total; }
std::int64_t ShardedEma::shard_begin() const { return impl_->begin; }
std::int64_t ShardedEma::shard_end() const { return impl_->end; }
std::int64_t ShardedEma::bytes() const { return impl_->shard.numel() * impl_->shard.element_size(); }
std::int64_t ShardedEma::full_bytes() const { return impl_->total * static_cast<std::int64_t>(sizeof(float)); }
double ShardedEma::smoothing() const { return impl_->smoothing; }

}  // namespace baton
