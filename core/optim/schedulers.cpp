// The built-in learning-rate schedules as components, Composer's set: [scheduler] name = "constant" | "cosine" |
// "linear" | "polynomial" | "step" | "multistep" | "exponential" | "cosine_restarts", each with a linear warmup. A
// schedule is a multiplier of the optimizer's lr, a pure function of the run's progress, so a resumed run continues
// it exactly without saving any state. Composer's formulas, with t in batches: step gamma^floor(t / step_size);
// multistep gamma^(milestones reached); exponential gamma^(t / decay_period); polynomial
// floor + (1 - floor) (1 - tau)^power over the fraction tau of the run after warmup; cosine with warm restarts
// floor + (1 - floor) (1 + cos(pi tau_i)) / 2 over the fraction tau_i of the current period, the periods t_0,
// t_0 t_mult, t_0 t_mult^2, ... from the end of warmup.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "baton/components.h"
#include "baton/error.h"
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

// Linear warmup to the full rate over `warm` batches: batch b (0-based) trains at (b + 1) / warm. Then
// `after(progress, now, warm)` of the absolute batch count `now`.
template <class After>
LrSchedule stepped(Time warmup, After after) {
  return [warmup, after](const Progress& p) {
    const std::int64_t now = p.now.batch;
    const std::int64_t warm = warmup.value() == 0 ? 0 : p.to_batches(warmup);
    if (now < warm) return static_cast<double>(now + 1) / static_cast<double>(warm);
    return after(p, now, warm);
  };
}

// After warmup, `decay` of the fraction t in [0, 1] of the batches after warmup, from 1 down to `floor`.
template <class Decay>
LrSchedule schedule(Shape shape, Decay decay) {
  return stepped(shape.warmup, [shape, decay](const Progress& p, std::int64_t now, std::int64_t warm) {
    const std::int64_t total = p.to_batches(p.max_duration);
    if (total <= warm) return 1.0;
    const double t = std::min(1.0, static_cast<double>(now - warm) / static_cast<double>(total - warm));
    return shape.floor + (1.0 - shape.floor) * decay(t);
  });
}

Time read_warmup(const PluginConfig& c) { return read_shape(c, false).warmup; }

const std::vector<TimeUnit>& run_units() {
  static const std::vector<TimeUnit> units{TimeUnit::batch, TimeUnit::epoch, TimeUnit::duration};
  return units;
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

LrSchedule make_polynomial(const PluginConfig& c) {
  const Shape shape = read_shape(c, true);
  const double power = c.get_number_or("power", 2.0, Range::above(0));
  return schedule(shape, [power](double t) { return std::pow(1.0 - t, power); });
}

LrSchedule make_step(const PluginConfig& c) {
  const Time warmup = read_warmup(c);
  const Time size = c.get_time("step_size", run_units());
  if (size.value() == 0) c.refuse("step_size", "a time above 0 (\"30ep\", \"1000ba\")");
  const double gamma = c.get_number_or("gamma", 0.1, Range::above(0));
  return stepped(warmup, [size, gamma](const Progress& p, std::int64_t now, std::int64_t) {
    const std::int64_t every = std::max<std::int64_t>(1, p.to_batches(size));
    return std::pow(gamma, static_cast<double>(now / every));
  });
}

LrSchedule make_multistep(const PluginConfig& c) {
  const Time warmup = read_warmup(c);
  std::vector<Time> milestones;
  for (const std::string& text : c.get<std::vector<std::string>>("milestones")) {
    Time t;
    try {
      t = Time::parse(text);
    } catch (const TimeError& e) {
      c.fail("milestones", e.what());
    }
    if (std::find(run_units().begin(), run_units().end(), t.unit()) == run_units().end())
      c.fail("milestones", "\"" + text + "\" is in " + std::string(unit_suffix(t.unit())) +
                               "; milestones are in ba, ep or dur");
    milestones.push_back(t);
  }
  if (milestones.empty()) c.refuse("milestones", "at least one time ([\"30ep\", \"60ep\"])");
  const double gamma = c.get_number_or("gamma", 0.1, Range::above(0));
  return stepped(warmup, [milestones, gamma](const Progress& p, std::int64_t now, std::int64_t) {
    int reached = 0;
    for (const Time& m : milestones) reached += now >= p.to_batches(m) ? 1 : 0;
    return std::pow(gamma, reached);
  });
}

LrSchedule make_exponential(const PluginConfig& c) {
  const Time warmup = read_warmup(c);
  const double gamma = c.get_number("gamma", Range::above(0));
  const Time period = c.get_time_or("decay_period", Time(1, TimeUnit::epoch), run_units());
  if (period.value() == 0) c.refuse("decay_period", "a time above 0 (\"1ep\", \"100ba\")");
  return stepped(warmup, [gamma, period](const Progress& p, std::int64_t now, std::int64_t) {
    const double every = static_cast<double>(std::max<std::int64_t>(1, p.to_batches(period)));
    return std::pow(gamma, static_cast<double>(now) / every);
  });
}

LrSchedule make_cosine_restarts(const PluginConfig& c) {
  const Shape shape = read_shape(c, true);
  const Time first = c.get_time("t_0", run_units());
  if (first.value() == 0) c.refuse("t_0", "a time above 0 (\"10ep\", \"500ba\")");
  const double growth = c.get_number_or("t_mult", 1.0, Range::at_least(1));
  return stepped(shape.warmup, [shape, first, growth](const Progress& p, std::int64_t now, std::int64_t warm) {
    double since = static_cast<double>(now - warm);
    double period = static_cast<double>(std::max<std::int64_t>(1, p.to_batches(first)));
    while (since >= period) {  // the period holding `since`: each t_mult times the one before
      since -= period;
      period *= growth;
    }
    return shape.floor + (1.0 - shape.floor) * 0.5 * (1.0 + std::cos(M_PI * since / period));
  });
}

}  // namespace

void register_builtin_schedulers(Components& components) {
  components.schedulers.add("constant", "the optimizer's lr after a linear warmup (warmup)", &make_constant);
  components.schedulers.add("cosine", "linear warmup, then a cosine decay to lr * min_lr_ratio at the run's end",
                            &make_cosine);
  components.schedulers.add("linear", "linear warmup, then a linear decay to lr * min_lr_ratio at the run's end",
                            &make_linear);
  components.schedulers.add("polynomial",
                            "linear warmup, then a decay to lr * min_lr_ratio at the run's end as (1 - t)^power",
                            &make_polynomial);
  components.schedulers.add("step", "linear warmup, then lr * gamma^k after k periods of step_size", &make_step);
  components.schedulers.add("multistep", "linear warmup, then lr * gamma^k after k of the milestones",
                            &make_multistep);
  components.schedulers.add("exponential", "linear warmup, then lr * gamma^(t / decay_period), continuously",
                            &make_exponential);
  components.schedulers.add("cosine_restarts",
                            "linear warmup, then cosine decays to lr * min_lr_ratio over periods t_0, t_0 * t_mult, "
                            "..., each restarting at lr",
                            &make_cosine_restarts);
}

}  // namespace baton
