#include "baton_test.h"

#include <ATen/ops/ones.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <vector>

#include "baton/components.h"
#include "components/builtins.h"
#include "error_text.h"

using namespace baton;

namespace {

Components registered() {
  Components c;
  register_builtin_optimizers(c);
  register_builtin_schedulers(c);
  return c;
}

LrSchedule schedule(const char* name, const char* toml) {
  static const Components c = registered();
  const PluginConfig config = PluginConfig::from_toml(toml, name);
  LrSchedule made = c.schedulers.find(name)->factory(config);
  config.reject_unread();
  return made;
}

// Progress of a 10-batch run with 5 batches per epoch.
Progress run_of_10() {
  Progress p;
  p.max_duration = Time(10, TimeUnit::batch);
  p.batches_per_epoch = 5;
  p.samples_per_epoch = 160;
  return p;
}

double at_batch(const LrSchedule& s, std::int64_t b) {
  Progress p = run_of_10();
  p.now.batch = b;
  return s(p);
}

std::vector<at::Tensor> one_parameter() { return {at::ones({3}).requires_grad_(true)}; }

}  // namespace

TEST_SUITE("optim") {
  TEST_CASE("cosine schedule with linear warmup, checked against hand-computed values") {
    const LrSchedule s = schedule("cosine", "warmup = \"2ba\"");
    REQUIRE(s);
    CHECK(at_batch(s, 0) == doctest::Approx(0.5));                            // (0 + 1) / 2
    CHECK(at_batch(s, 1) == doctest::Approx(1.0));
    CHECK(at_batch(s, 2) == doctest::Approx(1.0));                            // cos(0)
    CHECK(at_batch(s, 6) == doctest::Approx(0.5));                            // halfway: (1 + cos(pi/2)) / 2
    CHECK(at_batch(s, 4) == doctest::Approx(0.5 * (1 + std::cos(M_PI / 4))));  // a quarter of the way
  }

  TEST_CASE("cosine and linear decay to lr * min_lr_ratio") {
    const LrSchedule cosine = schedule("cosine", "min_lr_ratio = 0.1");
    CHECK(at_batch(cosine, 0) == doctest::Approx(1.0));
    CHECK(at_batch(cosine, 5) == doctest::Approx(0.1 + 0.9 * 0.5));  // halfway
    CHECK(at_batch(cosine, 10) == doctest::Approx(0.1));
    const LrSchedule linear = schedule("linear", "warmup = \"0.2dur\"\nmin_lr_ratio = 0.2");
    CHECK(at_batch(linear, 0) == doctest::Approx(0.5));  // warmup of 2 batches
    CHECK(at_batch(linear, 2) == doctest::Approx(1.0));
    CHECK(at_batch(linear, 6) == doctest::Approx(0.2 + 0.8 * 0.5));  // 4 of 8 batches after warmup
    CHECK(at_batch(linear, 10) == doctest::Approx(0.2));
  }

  TEST_CASE("constant: no schedule without warmup, a ramp with it") {
    CHECK_FALSE(schedule("constant", ""));
    const LrSchedule warm = schedule("constant", "warmup = \"1ep\"");
    CHECK(at_batch(warm, 0) == doctest::Approx(0.2));  // 1 of 5 batches
    CHECK(at_batch(warm, 7) == doctest::Approx(1.0));
  }

  TEST_CASE("Composer's other schedules, against their closed forms at every batch of a 20-batch run") {
    // 20 batches, 5 an epoch. Warmup: batch b < w trains at (b + 1) / w.
    const auto run = [](const LrSchedule& s, std::int64_t b) {
      Progress p;
      p.max_duration = Time(20, TimeUnit::batch);
      p.batches_per_epoch = 5;
      p.samples_per_epoch = 160;
      p.now.batch = b;
      return s(p);
    };
    const LrSchedule polynomial = schedule("polynomial", "warmup = \"2ba\"\npower = 2\nmin_lr_ratio = 0.1");
    const LrSchedule step = schedule("step", "step_size = \"1ep\"\ngamma = 0.5");
    const LrSchedule multistep = schedule("multistep", "milestones = [\"1ep\", \"12ba\", \"0.9dur\"]\ngamma = 0.1");
    const LrSchedule exponential = schedule("exponential", "warmup = \"1ba\"\ngamma = 0.5\ndecay_period = \"4ba\"");
    const LrSchedule restarts = schedule("cosine_restarts", "warmup = \"2ba\"\nt_0 = \"4ba\"\nt_mult = 2");
    for (std::int64_t b = 0; b < 20; ++b) {
      CAPTURE(b);
      const double bd = static_cast<double>(b);
      // polynomial: after 2 warmup batches, tau = (b - 2) / 18 of the rest.
      const double tau = (bd - 2) / 18;
      CHECK(run(polynomial, b) == doctest::Approx(b < 2 ? (bd + 1) / 2 : 0.1 + 0.9 * (1 - tau) * (1 - tau)));
      // step: halved every 5 batches.
      CHECK(run(step, b) == doctest::Approx(std::pow(0.5, static_cast<double>(b / 5))));
      // multistep: milestones at batches 5, 12 and 18 (0.9 of 20).
      const int reached = (b >= 5) + (b >= 12) + (b >= 18);
      CHECK(run(multistep, b) == doctest::Approx(std::pow(0.1, reached)));
      // exponential: one warmup batch at 1 / 1, then 0.5^(b / 4).
      CHECK(run(exponential, b) == doctest::Approx(b < 1 ? 1.0 : std::pow(0.5, bd / 4)));
      // cosine with warm restarts after 2 warmup batches: periods of 4, 8 and 16 batches from batch 2, so
      // [2, 6), [6, 14), [14, 30).
      double expected = (bd + 1) / 2;
      if (b >= 2 && b < 6) expected = 0.5 * (1 + std::cos(M_PI * (bd - 2) / 4));
      if (b >= 6 && b < 14) expected = 0.5 * (1 + std::cos(M_PI * (bd - 6) / 8));
      if (b >= 14) expected = 0.5 * (1 + std::cos(M_PI * (bd - 14) / 16));
      CHECK(run(restarts, b) == doctest::Approx(expected));
    }
    // Hand-computed points: a restart is back at the full rate, halfway through a period at half of it.
    CHECK(run(restarts, 6) == doctest::Approx(1.0));
    CHECK(run(restarts, 10) == doctest::Approx(0.5));
    CHECK(run(multistep, 11) == doctest::Approx(0.1));
    CHECK(run(multistep, 12) == doctest::Approx(0.01));
  }

  TEST_CASE("the other schedules' keys are checked, naming the key") {
    const auto missing = test::error_text<ConfigError>([] { schedule("step", "gamma = 0.5"); });
    CHECK(missing.find("step_size") != std::string::npos);
    const auto zero = test::error_text<ConfigError>([] { schedule("step", "step_size = \"0ba\""); });
    CHECK(zero.find("expected a time above 0") != std::string::npos);
    const auto samples = test::error_text<ConfigError>([] { schedule("multistep", "milestones = [\"5ba\", \"3sp\"]"); });
    CHECK(samples.find("\"3sp\" is in sp; milestones are in ba, ep or dur") != std::string::npos);
    const auto bad = test::error_text<ConfigError>([] { schedule("multistep", "milestones = [\"soon\"]"); });
    CHECK(bad.find("plugins.multistep.milestones") != std::string::npos);
    const auto none = test::error_text<ConfigError>([] { schedule("multistep", "milestones = []"); });
    CHECK(none.find("at least one time") != std::string::npos);
    const auto gamma = test::error_text<ConfigError>([] { schedule("exponential", "gamma = 0"); });
    CHECK(gamma.find("plugins.exponential.gamma") != std::string::npos);
    const auto shrink = test::error_text<ConfigError>([] { schedule("cosine_restarts", "t_0 = \"2ep\"\nt_mult = 0.5"); });
    CHECK(shrink.find("plugins.cosine_restarts.t_mult") != std::string::npos);
    const auto unread = test::error_text<ConfigError>([] { schedule("step", "step_size = \"1ep\"\npower = 2"); });
    CHECK(unread.find("unknown key 'power'") != std::string::npos);
  }

  TEST_CASE("schedule keys are checked") {
    const auto unit = test::error_text<ConfigError>([] { schedule("cosine", "warmup = \"3sp\""); });
    CHECK(unit.find("plugins.cosine.warmup") != std::string::npos);
    const auto ratio = test::error_text<ConfigError>([] { schedule("cosine", "min_lr_ratio = 1.5"); });
    CHECK(ratio.find("expected a number in [0, 1]") != std::string::npos);
    const auto unread = test::error_text<ConfigError>([] { schedule("constant", "min_lr_ratio = 0.5"); });
    CHECK(unread.find("unknown key 'min_lr_ratio'") != std::string::npos);
  }

  TEST_CASE("optimizers take their keys, with PyTorch's defaults where none is given") {
    const Components c = registered();
    const PluginConfig sgd_config =
        PluginConfig::from_toml("lr = 0.1\nmomentum = 0.5\nnesterov = true\nweight_decay = 1e-4", "sgd");
    auto sgd = c.optimizers.find("sgd")->factory(sgd_config, one_parameter());
    sgd_config.reject_unread();
    const auto& sgd_options = static_cast<const torch::optim::SGDOptions&>(sgd->param_groups()[0].options());
    CHECK(sgd_options.lr() == 0.1);
    CHECK(sgd_options.momentum() == 0.5);
    CHECK(sgd_options.nesterov());
    CHECK(sgd_options.weight_decay() == 1e-4);

    auto adamw = c.optimizers.find("adamw")->factory(PluginConfig::from_toml("beta2 = 0.95", "adamw"), one_parameter());
    REQUIRE(dynamic_cast<torch::optim::AdamW*>(adamw.get()) != nullptr);
    const auto& adamw_options = static_cast<const torch::optim::AdamWOptions&>(adamw->param_groups()[0].options());
    CHECK(adamw_options.lr() == 1e-3);
    CHECK(std::get<0>(adamw_options.betas()) == 0.9);
    CHECK(std::get<1>(adamw_options.betas()) == 0.95);
    CHECK(adamw_options.weight_decay() == 0.01);
  }

  TEST_CASE("optimizer values out of range are errors at the key") {
    const Components c = registered();
    const auto lr = test::error_text<ConfigError>(
        [&] { c.optimizers.find("adam")->factory(PluginConfig::from_toml("lr = 0", "adam"), one_parameter()); });
    CHECK(lr.find("plugins.adam.lr: expected a number > 0, got integer 0") != std::string::npos);
    const auto momentum = test::error_text<ConfigError>(
        [&] { c.optimizers.find("sgd")->factory(PluginConfig::from_toml("momentum = 1", "sgd"), one_parameter()); });
    CHECK(momentum.find("expected a number in [0, 1)") != std::string::npos);
    const auto nesterov = test::error_text<ConfigError>([&] {
      c.optimizers.find("sgd")->factory(PluginConfig::from_toml("momentum = 0\nnesterov = true", "sgd"),
                                         one_parameter());
    });
    CHECK(nesterov.find("nesterov") != std::string::npos);
  }
}
