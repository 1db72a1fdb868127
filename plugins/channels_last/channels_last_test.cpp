// channels_last: the 4-D weights and the input batches are NHWC where the model uses them (training, evaluation,
// prediction), the run computes what the NCHW run computes (to float rounding: only the summation order of the
// convolutions may change), and checkpoints hold logical tensors, so they load across the two formats.
#include "baton_test.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <c10/core/MemoryFormat.h>
#include <torch/nn/module.h>

#include "algorithm_test_support.h"
#include "baton/safetensors.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace channels_last_test {

namespace {

using algorithm_test::load;

constexpr auto kChannelsLast = c10::MemoryFormat::ChannelsLast;

// Channels-last as the convolution kernels decide it: by the format the strides suggest. That also holds for the
// one-channel images and the first layer's weights, which are contiguous in both formats.
bool nhwc(const at::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(kChannelsLast) && t.suggest_memory_format() == kChannelsLast;
}

struct FormatProbe : baton::Callback {
  int train_batches = 0, eval_batches = 0, predict_batches = 0, bad = 0;
  void check_model(const baton::State& s) {
    for (const auto& p : s.facts.model()->parameters())
      if (p.dim() == 4 && !nhwc(p)) ++bad;
  }
  void check(const baton::State& s, int& count) {
    ++count;
    if (!nhwc(s.batch.inputs())) ++bad;
    check_model(s);
  }
  void before_forward(baton::State& s, baton::Logger&) override { check(s, train_batches); }
  void eval_before_forward(baton::State& s, baton::Logger&) override { check(s, eval_batches); }
  void predict_before_forward(baton::State& s, baton::Logger&) override { check(s, predict_batches); }
};

std::vector<at::Tensor> parameters_of(const baton::State* state) {
  std::vector<at::Tensor> out;
  for (const auto& p : state->facts.model()->parameters()) out.push_back(p.detach().contiguous().clone());
  return out;
}

// Keeps a pointer to State so the test can read the trained weights after fit().
struct StateKeeper : baton::Callback {
  const baton::State* state = nullptr;
  void fit_start(baton::State& s, baton::Logger&) override { state = &s; }
};

}  // namespace

TEST_CASE("channels_last takes only input_key") {
  CHECK(algorithm_test::contains(algorithm_test::config_error("fast = true\n",
                                                              "channels_last"),
                                 "fast"));
  CHECK(algorithm_test::contains(algorithm_test::config_error("input_key = 3\n", "channels_last"),
                                 "expected a batch field's name or a non-empty list of them"));
}

TEST_CASE("input_key names the fields converted: every 4-D floating one of them, nothing else") {
  auto plugin = load("input_key = [\"image\", \"mask\", \"cond\"]", "channels_last");
  auto& algorithm = dynamic_cast<baton::Algorithm&>(*plugin.plugin);
  baton::State state;
  algorithm_test::RecordingLogger logger;
  const at::Tensor image = at::randn({2, 3, 4, 4}), other = at::randn({2, 3, 4, 4});
  state.batch = baton::Batch{{"image", image},
                             {"mask", at::ones({2, 1, 4, 4}, at::kBool)},
                             {"cond", at::randn({2, 5})},
                             {"other", other}};
  baton::run_subscribed(algorithm, baton::Event::after_dataloader, state, logger);
  CHECK(state.batch["image"].is_contiguous(c10::MemoryFormat::ChannelsLast));
  CHECK_FALSE(state.batch["image"].is_contiguous());
  CHECK(state.batch["image"].equal(image));                   // the same values, in another order in memory
  CHECK(state.batch["mask"].is_contiguous());                 // not floating: left as it is
  CHECK(state.batch["other"].is_contiguous());                // not named: left as it is
  CHECK(state.batch["other"].data_ptr() == other.data_ptr());
}

TEST_CASE("weights and batches are NHWC where the model uses them, and the run computes what the NCHW run does") {
  auto plain = algorithm_test::make_trainer(algorithm_test::quiet_options(), "convnet");
  auto plain_keeper = std::make_shared<StateKeeper>();
  plain->add_plugin("keeper", plain_keeper);
  auto plain_result = plain->fit();

  auto nhwc_trainer = algorithm_test::make_trainer(algorithm_test::quiet_options(), "convnet");
  auto plugin = load("", "channels_last");
  nhwc_trainer->add_plugin("channels_last", plugin.plugin);
  auto probe = std::make_shared<FormatProbe>();
  nhwc_trainer->add_plugin("probe", probe);
  auto keeper = std::make_shared<StateKeeper>();
  nhwc_trainer->add_plugin("keeper", keeper);
  auto result = nhwc_trainer->fit();

  CHECK(probe->train_batches == 6);  // 2 epochs of 3 batches
  CHECK(probe->eval_batches == 2);   // 50 eval samples in one batch of 50, after each epoch
  CHECK(probe->bad == 0);
  REQUIRE(result.evals.size() == plain_result.evals.size());
  for (std::size_t i = 0; i < result.evals.size(); ++i)
    CHECK(result.evals[i].metrics.at("eval/loss") ==
          doctest::Approx(plain_result.evals[i].metrics.at("eval/loss")).epsilon(1e-4));
  auto a = parameters_of(plain_keeper->state);
  auto b = parameters_of(keeper->state);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(at::allclose(a[i], b[i], 1e-4, 1e-5));
}

TEST_CASE("a checkpoint written with channels_last loads without it, and one written without it loads with it") {
  const auto dir = baton::test::scratch_dir("channels_last_checkpoints");
  auto options = algorithm_test::quiet_options((dir / "nhwc").string());
  auto writer = algorithm_test::make_trainer(options, "convnet");
  writer->add_plugin("channels_last", load("", "channels_last").plugin);
  auto keeper = std::make_shared<StateKeeper>();
  writer->add_plugin("keeper", keeper);
  auto written = writer->fit();
  REQUIRE_FALSE(written.last_checkpoint.empty());

  // The exported model holds the logical NCHW tensors: equal, element for element, to the trained weights.
  std::map<std::string, at::Tensor> exported;
  for (auto& [name, t] : baton::read_safetensors((dir / "nhwc" / "model.safetensors").string()).tensors)
    exported[name] = t;
  int compared = 0;
  for (const auto& item : keeper->state->facts.model()->named_parameters()) {
    const at::Tensor& p = item.value();
    auto found = exported.find(item.key());
    REQUIRE(found != exported.end());
    CHECK(found->second.sizes() == p.sizes());
    CHECK(at::equal(found->second, p.detach().contiguous()));
    if (p.dim() == 4) ++compared;
  }
  CHECK(compared == 2);  // the convnet's two convolutions

  // Evaluated without the plugin, the checkpoint gives the loss the run itself measured at its end.
  auto reader = algorithm_test::make_trainer(algorithm_test::quiet_options(), "convnet");
  auto plain_eval = reader->evaluate_standalone(written.last_checkpoint);
  REQUIRE(plain_eval.size() == 1);
  CHECK(plain_eval[0].loss == doctest::Approx(written.evals.back().metrics.at("eval/loss")).epsilon(1e-4));

  // A checkpoint written without the plugin, evaluated with it: the same loss as its own run's.
  auto plain_options = algorithm_test::quiet_options((dir / "nchw").string());
  auto plain_writer = algorithm_test::make_trainer(plain_options, "convnet");
  auto plain_written = plain_writer->fit();
  auto nhwc_reader = algorithm_test::make_trainer(algorithm_test::quiet_options(), "convnet");
  nhwc_reader->add_plugin("channels_last", load("", "channels_last").plugin);
  auto probe = std::make_shared<FormatProbe>();
  nhwc_reader->add_plugin("probe", probe);
  auto nhwc_eval = nhwc_reader->evaluate_standalone(plain_written.last_checkpoint);
  REQUIRE(nhwc_eval.size() == 1);
  CHECK(probe->eval_batches == 1);
  CHECK(probe->bad == 0);
  CHECK(nhwc_eval[0].loss == doctest::Approx(plain_written.evals.back().metrics.at("eval/loss")).epsilon(1e-4));
}

}  // namespace channels_last_test
