// Unit test of grad_clip, as a plugin author would write one: the plugin's source is compiled into this program,
// and the plugin is created through its own entry point and factory, so the test covers what the loader uses.
//
// LibTorch's headers bring c10's glog CHECK macros, which clash with doctest's: include c10's logging header first,
// drop its macros, then include doctest (c10's include guard keeps them from coming back).
#include <c10/util/Logging.h>
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <torch/nn/module.h>

#include "baton/plugin.h"

// Defined by BATON_PLUGIN in grad_clip.cpp.
extern "C" const baton_plugin_info* baton_plugin_entry();

namespace {

struct RecordingLogger final : baton::Logger {
  std::vector<std::pair<std::string, double>> metrics;
  void log_metric(std::string_view name, double value) override { metrics.emplace_back(name, value); }
  void info(std::string_view) override {}
  void warn(std::string_view) override {}
};

// Two parameters whose gradients are set by hand: weight [3, 4] (norm 5) and bias [12] (norm 12), so the global
// norm is sqrt(25 + 144) = 13.
struct TwoParameters : torch::nn::Module {
  at::Tensor weight = register_parameter("weight", at::full({2}, 0.0, at::kDouble));
  at::Tensor bias = register_parameter("bias", at::full({1}, 0.0, at::kDouble));
  void set_grads(std::vector<double> w, std::vector<double> b) {
    weight.mutable_grad() = at::tensor(w);
    bias.mutable_grad() = at::tensor(b);
  }
};

std::unique_ptr<baton::Algorithm> make_grad_clip(const std::string& toml) {
  baton::PluginConfig config = baton::PluginConfig::from_toml(toml, "grad_clip", "test.toml");
  std::unique_ptr<baton::Plugin> plugin(baton_plugin_entry()->create(config));
  config.reject_unread();  // as the loader does after creating a plugin
  auto* algorithm = dynamic_cast<baton::Algorithm*>(plugin.get());
  REQUIRE(algorithm != nullptr);
  plugin.release();
  return std::unique_ptr<baton::Algorithm>(algorithm);
}

// Runs the handler the plugin subscribed to after_train_batch, as the engine would: the only one it registers.
void clip_step(baton::Algorithm& clip, baton::State& state, baton::Logger& logger) {
  baton::Subscriptions events;
  clip.subscribe(events);
  REQUIRE(events.entries().size() == 1);
  REQUIRE(events.entries().front().event == "after_train_batch");
  events.entries().front().handler(state, logger);
}

}  // namespace

TEST_CASE("the entry point describes an algorithm built for this SDK") {
  const baton_plugin_info* info = baton_plugin_entry();
  CHECK(std::string(info->name) == "grad_clip");
  CHECK(info->kind == BATON_PLUGIN_ALGORITHM);
  CHECK(info->abi_version == BATON_PLUGIN_ABI_VERSION);
  CHECK(info->struct_size == sizeof(baton_plugin_info));
}

TEST_CASE("a norm above max_norm is scaled down to max_norm; one at or below it is left alone") {
  auto clip = make_grad_clip("max_norm = 6.5");
  TwoParameters model;
  baton::State state;
  state.facts.set_model(&model);
  RecordingLogger logger;
  baton::Declarations declared;
  clip->declare(declared);
  CHECK(declared.metrics() == std::vector<std::string>{"grad_clip/clipped"});

  model.set_grads({3, 4}, {12});  // norm 13 > 6.5: every gradient is halved
  clip_step(*clip, state, logger);
  CHECK(model.weight.grad()[0].item<double>() == doctest::Approx(1.5));
  CHECK(model.weight.grad()[1].item<double>() == doctest::Approx(2.0));
  CHECK(model.bias.grad()[0].item<double>() == doctest::Approx(6.0));

  model.set_grads({0.6, 0.8}, {0});  // norm 1: untouched
  clip_step(*clip, state, logger);
  CHECK(model.weight.grad()[0].item<double>() == doctest::Approx(0.6));

  REQUIRE(logger.metrics.size() == 2);
  CHECK(logger.metrics[0] == std::make_pair(std::string("grad_clip/clipped"), 1.0));  // 1 of 1
  CHECK(logger.metrics[1] == std::make_pair(std::string("grad_clip/clipped"), 0.5));  // 1 of 2
}

TEST_CASE("the counts survive a checkpoint") {
  auto first = make_grad_clip("max_norm = 1");
  TwoParameters model;
  baton::State state;
  state.facts.set_model(&model);
  RecordingLogger logger;
  model.set_grads({3, 4}, {12});
  clip_step(*first, state, logger);
  baton::StateDict saved;
  first->state_dict(saved);

  auto second = make_grad_clip("max_norm = 100");
  second->load_state_dict(saved);
  model.set_grads({3, 4}, {12});  // 13 <= 100: not clipped, so 1 of 2
  clip_step(*second, state, logger);
  CHECK(logger.metrics.back().second == 0.5);
}

TEST_CASE("max_norm is required and must be positive; errors name the key and the file") {
  CHECK_THROWS_WITH_AS(make_grad_clip(""), doctest::Contains("plugins.grad_clip.max_norm"), baton::ConfigError);
  CHECK_THROWS_WITH_AS(make_grad_clip("max_norm = 0"), doctest::Contains("expected a number > 0"), baton::ConfigError);
  CHECK_THROWS_WITH_AS(make_grad_clip("max_norm = 0"), doctest::Contains("got integer 0"), baton::ConfigError);
  CHECK_THROWS_WITH_AS(make_grad_clip("max_norm = -2.5"), doctest::Contains("test.toml:1:"), baton::ConfigError);
  CHECK_THROWS_WITH_AS(make_grad_clip("max_norm = \"big\""), doctest::Contains("expected a number"), baton::ConfigError);
  CHECK_THROWS_WITH_AS(make_grad_clip("max_norm = 1\nmax_nrom = 2"), doctest::Contains("unknown key 'max_nrom'"),
                       baton::ConfigError);
}
