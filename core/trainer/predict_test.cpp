// Trainer::predict: the predict events in Composer's order with the batch and its outputs on State, outputs equal
// to the model's own forward pass, and predictions their argmax.
#include "baton_test.h"

#include <string>
#include <vector>

#include <ATen/ops/allclose.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/equal.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "small_trainer.h"

using baton::Event;

namespace {

// Records each predict event with what State holds then: "<event> b<rows of batch> o<rows of outputs>".
struct PredictRecorder : baton::Callback {
  std::vector<std::string> seen;
  void note(const char* name, const baton::State& s) {
    seen.push_back(std::string(name) + " b" + std::to_string(s.batch.size()) +
                   " o" + std::to_string(s.outputs.defined() ? s.outputs.main().size(0) : 0));
  }
  void predict_start(baton::State& s, baton::Logger&) override { note("start", s); }
  void predict_batch_start(baton::State& s, baton::Logger&) override { note("batch_start", s); }
  void predict_before_forward(baton::State& s, baton::Logger&) override { note("before_forward", s); }
  void predict_after_forward(baton::State& s, baton::Logger&) override { note("after_forward", s); }
  void predict_batch_end(baton::State& s, baton::Logger&) override { note("batch_end", s); }
  void predict_end(baton::State& s, baton::Logger&) override { note("end", s); }
};

// Doubles the inputs before the forward pass: predict reads them back from State, as training does.
struct DoubleInputs : baton::Algorithm {
  bool match(Event e, const baton::State&) override { return e == Event::predict_before_forward; }
  void apply(Event, baton::State& s, baton::Logger&) override { s.batch.inputs() = s.batch.inputs() * 2; }
};

}  // namespace

TEST_CASE("predict fires the predict events per batch, with the batch and outputs on State in their window") {
  auto options = baton::test::quiet_options();
  options.eval_batch_size = 20;  // 50 eval samples: batches of 20, 20, 10
  auto trainer = baton::test::make_trainer(options, "mlp");
  auto recorder = std::make_shared<PredictRecorder>();
  trainer->add_plugin("recorder", recorder);
  auto result = trainer->predict();
  std::vector<std::string> expected{"start b0 o0"};
  for (int rows : {20, 20, 10})
    for (const char* e : {"batch_start", "before_forward", "after_forward", "batch_end"})
      expected.push_back(std::string(e) + " b" + std::to_string(rows) + " o" +
                         std::to_string(std::string(e) == "after_forward" || std::string(e) == "batch_end" ? rows : 0));
  expected.push_back("end b0 o0");
  CHECK(recorder->seen == expected);
  REQUIRE(result.outputs.defined());
  CHECK(result.outputs.main().size(0) == 50);
}

TEST_CASE("predict's outputs are the model's forward pass and its predictions their argmax") {
  auto trainer = baton::test::make_trainer(baton::test::quiet_options(), "mlp");
  auto result = trainer->predict();
  // The same model built independently (make_trainer seeds 5 and builds an mlp of 16), run on the whole set at
  // once: the mlp has no batch statistics, so batching does not change a row's outputs.
  at::manual_seed(5);
  baton::ModelSpec spec;
  spec.name = "mlp";
  spec.widths = {16};
  auto model = baton::make_model(spec);
  model.ptr()->eval();
  const baton::TensorDataset eval_set = baton::make_synthetic_dataset(50, 8);  // make_trainer's evaluation set
  REQUIRE(trainer->eval_set().size() == eval_set.size());
  at::Tensor direct;
  {
    c10::NoGradGuard no_grad;
    direct = model.forward(eval_set.inputs);
  }
  CHECK(at::allclose(result.outputs.main(), direct, 1e-5, 1e-6));
  REQUIRE(result.outputs.main().dim() == 2);
  CHECK(result.outputs.main().size(1) == trainer->eval_set().spec().num_classes);
  CHECK(at::equal(result.targets, eval_set.targets));
  CHECK(at::equal(result.predictions, at::argmax(result.outputs.main(), 1)));
  // Predicting again with doubled inputs changes the outputs: the inputs are read back from State.
  auto doubled = baton::test::make_trainer(baton::test::quiet_options(), "mlp");
  doubled->add_plugin("double", std::make_shared<DoubleInputs>());
  auto twice = doubled->predict();
  CHECK_FALSE(at::allclose(twice.outputs.main(), result.outputs.main()));
  // The same trainer predicting on a dataset made of the doubled inputs gives exactly those outputs.
  baton::TensorDataset doubled_set = eval_set;
  doubled_set.inputs = doubled_set.inputs * 2;
  auto again = baton::test::make_trainer(baton::test::quiet_options(), "mlp");
  auto on_set = again->predict(doubled_set);
  CHECK(at::allclose(on_set.outputs.main(), twice.outputs.main(), 1e-6, 1e-6));
}
