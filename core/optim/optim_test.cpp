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
