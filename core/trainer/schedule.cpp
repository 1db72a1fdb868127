#include "trainer/schedule.h"

#include <cmath>

namespace baton {

Schedule::Schedule(Time eval_interval, Time save_interval, bool has_eval_data, bool can_save)
    : eval_interval_(eval_interval),
      save_interval_(save_interval),
      evaluations_(eval_interval.value() != 0 && has_eval_data),
      saves_(save_interval.value() != 0 && can_save) {}

AfterBatch Schedule::after_batch(const Progress& progress, double fraction_before, bool epoch_ends,
                                 bool final_batch) const {
  const std::int64_t batch = progress.now.batch;
  bool eval_due = false;
  if (evaluations_) {
    switch (eval_interval_.unit()) {
      case TimeUnit::batch: eval_due = batch % eval_interval_.count() == 0; break;
      case TimeUnit::duration: {
        // Due whenever the run crosses a multiple of the interval (the slack absorbs rounding of the fraction).
        const double every = eval_interval_.value();
        eval_due = std::floor(progress.fraction() / every + 1e-9) > std::floor(fraction_before / every + 1e-9);
        break;
      }
      default: break;
    }
  }
  const bool save_due =
      saves_ && save_interval_.unit() == TimeUnit::batch && batch % save_interval_.count() == 0;
  // The epoch's end takes the final evaluation and save itself when its own interval has them due.
  const std::int64_t epoch_after = progress.now.epoch + 1;
  const bool epoch_evaluates = epoch_ends && eval_due_at_epoch(epoch_after);
  const bool epoch_saves = epoch_ends && save_due_at_epoch(epoch_after);
  AfterBatch out;
  out.evaluate = eval_due || (final_batch && evaluations_ && !epoch_evaluates);
  out.save = save_due || (final_batch && saves_ && !epoch_saves);
  return out;
}

bool Schedule::eval_due_at_epoch(std::int64_t epoch) const {
  return evaluations_ && eval_interval_.unit() == TimeUnit::epoch && epoch % eval_interval_.count() == 0;
}

bool Schedule::save_due_at_epoch(std::int64_t epoch) const {
  return saves_ && save_interval_.unit() == TimeUnit::epoch && epoch % save_interval_.count() == 0;
}

}  // namespace baton
