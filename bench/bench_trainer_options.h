#pragma once
// What the benchmarks that time the trainer give it: a run of `batches` batches of `batch_size`, nothing evaluated
// or saved, nothing printed, so that what is timed is the training steps.
#include <cstdint>

#include "baton/trainer.h"

namespace bench {

inline baton::TrainerOptions steps_only(std::int64_t batches, std::int64_t batch_size) {
  baton::TrainerOptions options;
  options.max_duration = baton::Time(batches, baton::TimeUnit::batch);
  options.eval_interval = baton::Time(0, baton::TimeUnit::batch);
  options.save_interval = baton::Time(0, baton::TimeUnit::batch);
  options.batch_size = batch_size;
  options.quiet = true;
  options.progress = false;
  options.precision = baton::Precision::fp32;  // what a hand-written loop computes in; benchmarks of amp set it
  return options;
}

}  // namespace bench
