#pragma once
// The small in-process trainer several test suites train with: a convnet (BatchNorm buffers included) on 96
// synthetic samples, 3 batches of 32 per epoch, quiet, 2 epochs, evaluated and saved every epoch. Include after
// "baton_test.h"; the test links the trainer, data and models components (or libbaton).
#include <memory>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <torch/optim/sgd.h>

#include "baton/trainer.h"
#include "baton/builtin_datasets.h"
#include "baton/models.h"

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
  return o;
}

/// `model` "mlp" (one hidden layer of 16, no batch statistics: a batch's outputs depend only on its own rows)
/// instead of the convnet.
inline std::unique_ptr<Trainer> make_trainer(TrainerOptions options, const std::string& model_name = "convnet") {
  at::manual_seed(5);
  ModelSpec spec;
  spec.name = model_name;
  spec.widths = model_name == "mlp" ? std::vector<std::int64_t>{16} : std::vector<std::int64_t>{4, 8};
  auto model = make_model(spec);
  auto optimizer =
      std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  return std::make_unique<Trainer>(model, optimizer, make_synthetic_dataset(96, 7), make_synthetic_dataset(50, 8),
                                   std::move(options));
}

}  // namespace baton::test
