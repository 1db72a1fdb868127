// The built-in learning-rate schedules as components: [scheduler] name = "constant" | "cosine" | "linear", each
// with a linear warmup. A schedule is a multiplier of the optimizer's lr, a pure function of the run's progress,
// so a resumed run continues it exactly without saving any state.
#include <algorithm>
#include <cmath>

#include "baton/components.h"
#include "components/builtins.h"

namespace baton {
namespace {

struct Shape {
  Time warmup;
  double floor = 0;
};

Shape read_shape(const PluginConfig& c, bool decays) {
  Shape shape;
  shape.warmup = c.get_time_or("warmup", Time(0, TimeUnit::batch),
                               {TimeUnit::batch, TimeUnit::epoch, TimeUnit::duration}, TimeZero::allowed);
  if (decays) shape.floor = c.get_number_or("min_lr_ratio", 0.0, Range::closed(0, 1));
  return shape;
}

// Linear warmup to the full rate over `warm` batches: batch b (0-based) trains at (b + 1) / warm. Then `decay`
// of the fraction t in [0, 1] of the batches after warmup, from 1 down to `floor`.
template <class Decay>
LrSchedule schedule(Shape shape, Decay decay) {
  return [shape, decay](const Progress& p) {
    const std::int64_t now = p.now.batch;
    const std::int64_t warm = shape.warmup.value() == 0 ? 0 : p.to_batches(shape.warmup);
    if (now < warm) return static_cast<double>(now + 1) / static_cast<double>(warm);
    const std::int64_t total = p.to_batches(p.max_duration);
    if (total <= warm) return 1.0;
    const double t = std::min(1.0, static_cast<double>(now - warm) / static_cast<double>(total - warm));
    return shape.floor + (1.0 - shape.floor) * decay(t);
  };
}

LrSchedule make_constant(const PluginConfig& c) {
  const Shape shape = read_shape(c, false);
  if (shape.warmup.value() == 0) return nullptr;  // the optimizer's lr as it is
  return schedule(shape, [](double) { return 1.0; });
}

LrSchedule make_cosine(const PluginConfig& c) {
  return schedule(read_shape(c, true), [](double t) { return 0.5 * (1.0 + std::cos(M_PI * t)); });
}

LrSchedule make_linear(const PluginConfig& c) {
  return schedule(read_shape(c, true), [](double t) { return 1.0 - t; });
}

}  // namespace

void register_builtin_schedulers(Components& components) {
  components.schedulers.add("constant", "the optimizer's lr after a linear warmup (warmup)", &make_constant);
  components.schedulers.add("cosine", "linear warmup, then a cosine decay to lr * min_lr_ratio at the run's end",
                            &make_cosine);
  components.schedulers.add("linear", "linear warmup, then a linear decay to lr * min_lr_ratio at the run's end",
                            &make_linear);
}

}  // namespace baton
