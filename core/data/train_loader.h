#pragma once
// The training loop's source of batches: a PrefetchLoader over the sampler's plan, running ahead of the loop, and
// the policy for when it has to be started again at the loop's position.
#include <cstdint>
#include <memory>

#include "baton/dataset.h"
#include "baton/time.h"
#include "data/prefetch_loader.h"
#include "data/sampler.h"

namespace baton {

class TrainLoader {
 public:
  TrainLoader(const Dataset& data, const BatchSampler& sampler, PrefetchOptions options)
      : data_(data), sampler_(sampler), options_(options) {}

  /// The batch at `progress.now`. The loader is (re)started there when there is none yet (the first batch, the
  /// first after a resume), when it has delivered all it was asked for, or when the position moved without it; it
  /// fetches no batch past `max_duration`.
  Batch next(const Progress& progress, const Time& max_duration);
  /// Joins the loader's threads: a stop or an error leaves at most `prefetch` batches unused.
  void stop() { loader_.reset(); }

 private:
  const Dataset& data_;
  const BatchSampler& sampler_;
  PrefetchOptions options_;
  std::unique_ptr<PrefetchLoader> loader_;
  std::int64_t start_ = 0;  // the epoch * batches_per_epoch + batch_in_epoch it started at
};

}  // namespace baton
