#include "data/sampler.h"

#include <ATen/ops/empty.h>

#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "baton/error.h"
#include "data/random.h"

namespace baton {
namespace {

void check_options(const SamplerOptions& o) {
  if (o.batch_size < 1) throw Error("sampler: batch_size must be at least 1, got " + std::to_string(o.batch_size));
  if (o.world_size < 1) throw Error("sampler: world_size must be at least 1, got " + std::to_string(o.world_size));
  if (o.rank < 0 || o.rank >= o.world_size)
    throw Error("sampler: rank " + std::to_string(o.rank) + " is outside [0, " + std::to_string(o.world_size) + ")");
  if (o.dataset_size < o.world_size)
    throw Error("sampler: the dataset has " + std::to_string(o.dataset_size) + " samples, fewer than the " +
                std::to_string(o.world_size) + " ranks");
}

// Every rank gets the same number of samples (the permutation is truncated to a multiple of world_size), so all
// ranks run the same number of batches and collective operations stay in step.
std::int64_t rank_share_size(const SamplerOptions& o) { return o.dataset_size / o.world_size; }

std::vector<std::int64_t> full_order(const SamplerOptions& o, std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(o.dataset_size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!o.shuffle) return order;
  detail::PortableRandom random(baton::mix64(o.seed) ^ static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[random.below(i + 1)]);
  return order;
}

}  // namespace

BatchSampler::BatchSampler(SamplerOptions options) : options_(options) { check_options(options_); }

std::int64_t BatchSampler::samples_per_epoch() const {
  const std::int64_t share = rank_share_size(options_);
  return options_.drop_last ? share - share % options_.batch_size : share;
}

std::int64_t BatchSampler::batches_per_epoch() const {
  const std::int64_t share = rank_share_size(options_);
  return options_.drop_last ? share / options_.batch_size : (share + options_.batch_size - 1) / options_.batch_size;
}

std::vector<std::int64_t> BatchSampler::epoch_order(std::int64_t epoch) const {
  if (epoch < 0) throw Error("sampler: negative epoch " + std::to_string(epoch));
  if (epoch == cached_epoch_) return cached_order_;
  const auto order = full_order(options_, epoch);
  std::vector<std::int64_t> share;
  share.reserve(static_cast<std::size_t>(rank_share_size(options_)));
  const auto used = static_cast<std::size_t>(rank_share_size(options_) * options_.world_size);
  for (std::size_t i = static_cast<std::size_t>(options_.rank); i < used; i += options_.world_size)
    share.push_back(order[i]);
  cached_epoch_ = epoch;
  cached_order_ = share;
  return share;
}

at::Tensor BatchSampler::batch_indices(std::int64_t epoch, std::int64_t batch_in_epoch) const {
  const std::int64_t batches = batches_per_epoch();
  if (batch_in_epoch < 0 || batch_in_epoch >= batches)
    throw Error("sampler: batch " + std::to_string(batch_in_epoch) + " is outside the epoch's " +
                std::to_string(batches) + " batches");
  epoch_order(epoch);  // fills the cache
  const std::int64_t begin = batch_in_epoch * options_.batch_size;
  const std::int64_t count = std::min<std::int64_t>(options_.batch_size, samples_per_epoch() - begin);
  at::Tensor indices = at::empty({count}, at::kLong);
  std::memcpy(indices.data_ptr<std::int64_t>(), cached_order_.data() + begin,
              static_cast<std::size_t>(count) * sizeof(std::int64_t));
  return indices;
}

}  // namespace baton
