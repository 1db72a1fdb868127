#pragma once
// The small in-process trainer several test suites train with: a convnet (BatchNorm buffers included) on 96
// synthetic samples, 3 batches of 32 per epoch, quiet, 2 epochs, evaluated and saved every epoch. Include after
// "baton_test.h"; the test links the trainer, data and models components (or libbaton).
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <ATen/ops/equal.h>
#include <torch/optim/sgd.h>

#include "baton/trainer.h"
#include "baton/builtin_datasets.h"
#include "baton/models.h"
#include "tensor_values.h"
#include "test_device.h"

namespace baton::test {

inline TrainerOptions quiet_options(const std::string& run_dir = "") {
  TrainerOptions o;
  o.batch_size = 32;
  o.eval_batch_size = 50;
  o.max_duration = Time(2, TimeUnit::epoch);
  o.eval_interval = Time(1, TimeUnit::epoch);
  o.save_interval = Time(1, TimeUnit::epoch);
  o.quiet = true;
  o.progress = false;
  o.run_dir = run_dir;
  o.seed = 11;
  // fp32 whatever the CPU: the tests' expected values are float32 ones ("auto" would pick amp_bf16 on a CPU that
  // computes bfloat16 natively). precision_test checks "auto" itself.
  o.precision = Precision::fp32;
  return o;
}

/// `model` "mlp" (one hidden layer of 16, no batch statistics: a batch's outputs depend only on its own rows)
/// instead of the convnet.
/// The same model and optimizer on datasets of the caller's (which should hold 1x28x28 images in 10 classes).
inline std::unique_ptr<Trainer> make_trainer(TrainerOptions options, std::shared_ptr<const Dataset> train,
                                             std::shared_ptr<const Dataset> eval,
                                             const std::string& model_name = "convnet") {
  at::manual_seed(5);
  ModelSpec spec;
  spec.name = model_name;
  spec.widths = model_name == "mlp" ? std::vector<std::int64_t>{16} : std::vector<std::int64_t>{4, 8};
  auto model = make_model(spec);
  auto optimizer =
      std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  return std::make_unique<Trainer>(model, optimizer, std::move(train), std::move(eval), std::move(options));
}

inline std::unique_ptr<Trainer> make_trainer(TrainerOptions options, const std::string& model_name = "convnet") {
  return make_trainer(std::move(options), std::make_shared<TensorDataset>(make_synthetic_dataset(96, 7)),
                      std::make_shared<TensorDataset>(make_synthetic_dataset(50, 8)), model_name);
}

}  // namespace baton::test
