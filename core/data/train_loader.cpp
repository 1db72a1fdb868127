#include "data/train_loader.h"

#include <algorithm>
#include <limits>

namespace baton {
namespace {

// The batches from here to max_duration. Samples convert to batches rounding up (never fewer than the loop runs);
// a length in dur, which only an embedding program can give, has no batch count before the run knows its own: the
// loader then runs until the trainer stops it.
std::int64_t batches_left(const Progress& progress, const Time& max_duration) {
  const TimeUnit unit = max_duration.unit();
  if (unit != TimeUnit::epoch && unit != TimeUnit::batch && unit != TimeUnit::sample)
    return std::numeric_limits<std::int64_t>::max();
  return std::max<std::int64_t>(1, progress.to_batches(max_duration) - progress.now.batch);
}

}  // namespace

Batch TrainLoader::next(const Progress& progress, const Time& max_duration) {
  const Timestamp& now = progress.now;
  const std::int64_t position = now.epoch * sampler_.batches_per_epoch() + now.batch_in_epoch;
  if (!loader_ || loader_->done() || start_ + loader_->position() != position) {
    loader_.reset();  // its threads are joined before the new loader's start
    loader_ = std::make_unique<PrefetchLoader>(
        data_, sampler_plan(sampler_, now.epoch, now.batch_in_epoch, batches_left(progress, max_duration)), options_);
    start_ = position;
  }
  return loader_->next();
}

}  // namespace baton
