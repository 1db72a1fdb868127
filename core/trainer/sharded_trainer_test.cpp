// The Trainer under sharding zero1 / zero2 / zero3 in one process (the sharded step without collectives): the optimizer
// built by TrainerOptions::optimizer_factory over the rank's shard trains as the unsharded run does, its checkpoints
// (shard files) resume bitwise and load for evaluation, and what a sharded run cannot do yet is refused with its
// reason. Two ranks are tested end to end in tests/distributed_test.cpp.
#include "baton_test.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/declarations.h"
#include "baton/error.h"
#include "baton/trainer.h"
#include "baton/builtin_datasets.h"
#include "baton/models.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/row_shards.h"
#include "error_text.h"
#include "small_trainer.h"

using baton::Sharding;
using baton::Time;
using baton::TimeUnit;
using baton::test::quiet_options;

namespace {

std::shared_ptr<const baton::Dataset> train_data() {
  return std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(96, 7));
}
std::shared_ptr<const baton::Dataset> eval_data() {
  return std::make_shared<baton::TensorDataset>(baton::make_synthetic_dataset(50, 8));
}

baton::Model convnet() {
  at::manual_seed(5);
  baton::ModelSpec spec;
  spec.name = "convnet";
  spec.widths = {4, 8};
  return baton::make_model(spec);
}

baton::TrainerOptions options_for(Sharding sharding) {
  baton::TrainerOptions o = quiet_options();
  o.save_interval = Time(0, TimeUnit::epoch);
  o.sharding = sharding;
  return o;
}

std::shared_ptr<torch::optim::Optimizer> adam(const std::vector<at::Tensor>& parameters) {
  return std::make_shared<torch::optim::Adam>(parameters, torch::optim::AdamOptions(0.01).weight_decay(0.01));
}
std::shared_ptr<torch::optim::Optimizer> sgd(const std::vector<at::Tensor>& parameters) {
  return std::make_shared<torch::optim::SGD>(parameters, torch::optim::SGDOptions(0.05).momentum(0.9));
}

// The model's parameters and buffers after a 2-epoch run with the optimizer `factory` builds.
baton::test::Weights trained(Sharding sharding, baton::OptimizerBuilder factory, std::int64_t microbatch = 0,
                             baton::ParamGroupRules groups = {}) {
  baton::TrainerOptions o = options_for(sharding);
  o.optimizer_factory = std::move(factory);
  o.microbatch_size = microbatch;
  o.param_groups = std::move(groups);
  baton::Trainer trainer(convnet(), nullptr, train_data(), eval_data(), o);
  trainer.fit();
  return baton::test::copy_state(trainer.model());
}

// `epochs` epochs with Adam in the run folder <dir>/<name>, saving each epoch; resumed (--resume auto) when `resume`.
baton::test::Weights run_saving(const std::filesystem::path& dir, const std::string& name, Sharding sharding,
                                int epochs, bool resume, baton::ParamGroupRules groups = {}) {
  baton::TrainerOptions o = options_for(sharding);
  o.param_groups = std::move(groups);
  o.run_dir = (dir / name).string();
  o.save_interval = Time(1, TimeUnit::epoch);
  o.max_duration = Time(epochs, TimeUnit::epoch);
  o.optimizer_factory = adam;
  if (resume) o.resume = "auto";
  baton::Trainer trainer(convnet(), nullptr, train_data(), eval_data(), o);
  trainer.fit();
  return baton::test::copy_state(trainer.model());
}

// The largest relative difference between two models' tensors: per tensor max|a - b| / max|b|. The flat shard and
// the per-tensor step run the same element-wise arithmetic, but a vectorised kernel may round an element at another
// position of its vector differently (a fused multiply-add), so equality is asked to 1e-6, not bit for bit.
double max_relative_difference(const baton::test::Weights& a, const baton::test::Weights& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& [name, tensor] : b) {
    REQUIRE(a.count(name) == 1);
    const double scale = tensor.abs().max().item<double>();
    const double difference = a.at(name).sub(tensor).abs().max().item<double>();
    worst = std::max(worst, scale > 0 ? difference / scale : difference);
  }
  return worst;
}

// A plugin that says it reads the model's gradients after the reduce.
struct GradientReader : baton::Callback {
  void declare(baton::Declarations& run) const override { run.replicated_only("reads the model's gradients"); }
};

}  // namespace

TEST_SUITE("trainer") {
  TEST_CASE("issue 38: zero1, zero2 and zero3 in one process train as sharding none, with SGD momentum and Adam") {
    const baton::test::Weights initial = baton::test::copy_state(*convnet().ptr());
    for (const auto& entry : std::vector<std::pair<std::string, baton::OptimizerBuilder>>{{"sgd", sgd}, {"adam", adam}}) {
      const std::string name = entry.first;
      const baton::OptimizerBuilder factory = entry.second;
      const baton::test::Weights reference = trained(Sharding::none, factory);
      CHECK_FALSE(baton::test::bitwise_equal(reference, initial));  // it trained
      for (Sharding mode : {Sharding::zero1, Sharding::zero2, Sharding::zero3}) {
        CAPTURE(name);
        const std::string mode_name = baton::sharding_name(mode);
        CAPTURE(mode_name);
        const double relative = max_relative_difference(trained(mode, factory), reference);
        MESSAGE(name << " " << mode_name << ": max relative difference to sharding none = " << relative);
        CHECK(relative <= 1e-6);
      }
    }
    // Microbatches accumulate in the model's .grad and are reduced once, after the last one (zero2 then releases it);
    // zero3 reduces each unit's gradients in each microbatch's backward, adding them into the shard's.
    const baton::test::Weights micro = trained(Sharding::none, sgd, 8);
    CHECK(max_relative_difference(trained(Sharding::zero2, sgd, 8), micro) <= 1e-6);
    CHECK(max_relative_difference(trained(Sharding::zero3, sgd, 8), micro) <= 1e-6);
  }

  TEST_CASE("issue 41: param groups (no weight decay on biases and norms, an lr multiplier) shard as they train") {
    baton::ParamGroupRules groups;
    groups.weight_decay_exclude = {"bias", "norm"};
    groups.lr_scale = {{"classifier.*", 3.0}};
    const baton::OptimizerBuilder adamw = [](const std::vector<at::Tensor>& parameters) {
      return std::make_shared<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(0.01).weight_decay(0.5));
    };
    const baton::test::Weights reference = trained(Sharding::none, adamw, 0, groups);
    // The groups change the training (or this test could not tell them applied).
    CHECK(max_relative_difference(trained(Sharding::none, adamw), reference) > 1e-3);
    for (Sharding mode : {Sharding::zero1, Sharding::zero2, Sharding::zero3}) {
      const std::string mode_name = baton::sharding_name(mode);
      CAPTURE(mode_name);
      CHECK(max_relative_difference(trained(mode, adamw, 0, groups), reference) <= 1e-6);
    }
    // The optimizer state (a rank's file, or the unsharded section) keeps its groups; a resume continues them
    // bitwise.
    const auto dir = baton::test::scratch_dir("sharded-param-groups");
    for (Sharding mode : {Sharding::none, Sharding::zero2}) {
      const std::string name = baton::sharding_name(mode);
      const baton::test::Weights straight = run_saving(dir, name + "-straight", mode, 4, false, groups);
      run_saving(dir, name + "-resumed", mode, 2, false, groups);
      CHECK(baton::test::bitwise_equal(run_saving(dir, name + "-resumed", mode, 4, true, groups), straight));
    }
    // Another grouping than the checkpoint's is refused, not resumed into the wrong groups.
    baton::ParamGroupRules other;
    other.weight_decay_exclude = {"bias"};
    CHECK_THROWS_WITH_AS(run_saving(dir, "zero2-resumed", Sharding::zero2, 5, true, other),
                         doctest::Contains("the optimizer state has 4 param groups, this run's optimizer 2"),
                         baton::Error);
  }

  TEST_CASE("issue 38: what a sharded run refuses, with the reason") {
    const auto refused = [](baton::TrainerOptions o, std::shared_ptr<torch::optim::Optimizer> optimizer,
                            baton::Model model) -> std::string {
      try {
        baton::Trainer trainer(std::move(model), std::move(optimizer), train_data(), eval_data(), std::move(o));
      } catch (const std::exception& e) {
        return e.what();
      }
      return "";
    };
    baton::Model model = convnet();
    // A ready-made optimizer steps the model's parameters, not the shard.
    const std::string ready = refused(options_for(Sharding::zero1), sgd(model.ptr()->parameters()), model);
    CHECK(ready.rfind("trainer: sharding \"zero1\" steps each rank's shard of the parameters", 0) == 0);
    CHECK(ready.find("pass TrainerOptions::optimizer_factory") != std::string::npos);
    // Both ways at once is ambiguous, sharded or not.
    baton::TrainerOptions both = options_for(Sharding::none);
    both.optimizer_factory = sgd;
    CHECK(refused(both, sgd(model.ptr()->parameters()), model) ==
          "the trainer got an optimizer and TrainerOptions::optimizer_factory: pass one of them");
    // zero3's units name sub-modules; zero1 and zero2 take none.
    baton::TrainerOptions zero3 = options_for(Sharding::zero3);
    zero3.optimizer_factory = sgd;
    zero3.units = {"features.0", "classifer.0"};
    CHECK(refused(zero3, nullptr, model) ==
          "trainer: sharding \"zero3\": unit 'classifer.0' is no sub-module of the model (modules with parameters: "
          "features.0, features.1, features.4, features.5, classifier.0, classifier.2)");
    zero3.units = {"features.2"};  // a ReLU: nothing to shard
    CHECK(baton::test::contains(refused(zero3, nullptr, model), "unit 'features.2' holds no parameter that trains"));
    baton::TrainerOptions zero2_units = options_for(Sharding::zero2);
    zero2_units.optimizer_factory = sgd;
    zero2_units.units = {"features.0"};
    CHECK(baton::test::contains(refused(zero2_units, nullptr, model), "units are gathered one at a time under zero3"));
    // A plugin that needs the whole gradients is refused as it is added (baton check adds plugins too).
    baton::TrainerOptions plugin_run = options_for(Sharding::zero2);
    plugin_run.optimizer_factory = sgd;
    baton::Trainer trainer(convnet(), nullptr, train_data(), eval_data(), plugin_run);
    CHECK_THROWS_WITH_AS(trainer.add_plugin("grads", std::make_shared<GradientReader>()),
                         "plugin 'grads' does not work under distributed.sharding = \"zero2\": it reads the model's "
                         "gradients, while the optimizer steps each rank's shard of the averaged gradients (use "
                         "sharding = \"none\")",
                         baton::PluginError);
    baton::Trainer unsharded(convnet(), nullptr, train_data(), eval_data(), [] {
      baton::TrainerOptions o = options_for(Sharding::none);
      o.optimizer_factory = sgd;
      return o;
    }());
    CHECK_NOTHROW(unsharded.add_plugin("grads", std::make_shared<GradientReader>()));
  }

  TEST_CASE("issue 38: a sharded run's checkpoints hold shard files, resume bitwise and load for evaluation") {
    const auto dir = baton::test::scratch_dir("sharded-checkpoints");
    const baton::test::Weights straight = run_saving(dir, "straight", Sharding::zero2, 4, false);
    run_saving(dir, "resumed", Sharding::zero2, 2, false);
    CHECK(baton::test::bitwise_equal(run_saving(dir, "resumed", Sharding::zero2, 4, true), straight));

    // The checkpoint: the sharded parameters and the optimizer state in the rank's files of model/ and optimizer/,
    // not in state.safetensors.
    const std::string ep2 = (dir / "resumed" / "checkpoints" / "ep2").string();
    const baton::CheckpointData data = baton::load_checkpoint(ep2);
    std::vector<std::string> listed;
    for (const auto& file : data.listed) listed.push_back(file.name);
    const std::string model_file = "model/shard-00001-model-00001-of-00001.safetensors";
    const std::string optimizer_file = "optimizer/shard-00001-model-00001-of-00001.safetensors";
    CHECK(listed == std::vector<std::string>{"state.safetensors", model_file, optimizer_file});
    CHECK(data.files.empty());
    CHECK(data.section("optimizer") == nullptr);
    const baton::Model model = convnet();
    for (const auto& item : model.ptr()->named_parameters()) CHECK_FALSE(data.section("model")->has_tensor(item.key()));
    const baton::RowShardReader model_rows({{ep2 + "/" + model_file, {}, {}, {}}}, "test");
    const baton::RowShardReader optimizer_rows({{ep2 + "/" + optimizer_file, {}, {}, {}}}, "test");
    CHECK(model_rows.has("features.0.weight"));
    CHECK(optimizer_rows.has("features.0.weight/exp_avg"));

    // An unsharded run evaluates it (the weights assembled from the shard files) as the sharded run itself does.
    const auto evaluate = [&](Sharding sharding, const std::string& checkpoint) {
      baton::TrainerOptions o = options_for(sharding);
      o.optimizer_factory = adam;
      baton::Trainer trainer(convnet(), nullptr, train_data(), eval_data(), o);
      return trainer.evaluate_standalone(checkpoint).front().loss;
    };
    const double loss = evaluate(Sharding::none, ep2);
    CHECK(loss == evaluate(Sharding::zero2, ep2));
    CHECK(loss != evaluate(Sharding::none, ""));  // the checkpoint's weights, not the initial ones

    // An unsharded run resumes it, the optimizer state put together from the shard files: it ends where the
    // sharded run does (to the rounding by which sharded and unsharded steps differ).
    baton::TrainerOptions unsharded = options_for(Sharding::none);
    unsharded.optimizer_factory = adam;
    unsharded.run_dir = (dir / "unsharded").string();
    unsharded.resume = ep2;
    unsharded.max_duration = Time(4, TimeUnit::epoch);
    baton::Trainer trainer(convnet(), nullptr, train_data(), eval_data(), unsharded);
    trainer.fit();
    CHECK(max_relative_difference(baton::test::copy_state(trainer.model()), straight) <= 1e-6);

    // zero3: the same shard files; a resumed run ends bitwise where the straight one does, and the model is whole
    // after fit (its parameters gathered back), so the weights compared are the model's own.
    const baton::test::Weights straight3 = run_saving(dir, "straight3", Sharding::zero3, 4, false);
    CHECK(max_relative_difference(straight3, straight) <= 1e-6);
    run_saving(dir, "resumed3", Sharding::zero3, 2, false);
    CHECK(baton::test::bitwise_equal(run_saving(dir, "resumed3", Sharding::zero3, 4, true), straight3));
    // A zero2 checkpoint resumes under zero3 (the same layout over the same ranks).
    CHECK(baton::test::bitwise_equal(run_saving(dir, "resumed", Sharding::zero3, 4, true), straight));
  }

  TEST_CASE("issue 39: damaged shard files are errors naming the file; --resume auto falls back to the checkpoint before") {
    namespace fs = std::filesystem;
    const auto dir = baton::test::scratch_dir("sharded-damaged");
    run_saving(dir, "pristine", Sharding::zero2, 2, false);
    const std::string model_file = "model/shard-00001-model-00001-of-00001.safetensors";
    const std::string optimizer_file = "optimizer/shard-00001-model-00001-of-00001.safetensors";
    const auto flip = [](const fs::path& file, std::uint64_t at, char mask) {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(static_cast<std::streamoff>(at));
      const char c = static_cast<char>(f.get());
      f.seekp(static_cast<std::streamoff>(at));
      f.put(static_cast<char>(c ^ mask));
    };
    // The first offset in the header: "saved_offsets\":[0 becomes [1, still a well-formed header.
    const auto first_offset = [](const fs::path& file) {
      const std::string bytes = baton::test::read_bytes(file);
      return static_cast<std::uint64_t>(bytes.find('[', bytes.find("saved_offsets")) + 1);
    };
    struct Damage {
      std::string name;
      std::function<void(const fs::path& ep2)> apply;
      std::string message;  // what the error says after the file's name
    };
    const std::vector<Damage> damages = {
        {"a flipped byte in the optimizer state",
         [&](const fs::path& ep2) { flip(ep2 / optimizer_file, fs::file_size(ep2 / optimizer_file) - 5, 0x10); },
         "do not match their crc32 (file corrupted)"},
        {"an offset changed in a model file's header",
         [&](const fs::path& ep2) { flip(ep2 / model_file, first_offset(ep2 / model_file), 0x01); },
         "the header's crc32 does not match meta.json's (file corrupted)"},
        {"a truncated model file",
         [&](const fs::path& ep2) { fs::resize_file(ep2 / model_file, fs::file_size(ep2 / model_file) - 100); },
         "meta.json says"},
        {"a rank's file missing", [&](const fs::path& ep2) { fs::remove(ep2 / model_file); }, "missing"},
        {"meta.json naming a file that is not there",
         [&](const fs::path& ep2) {
           std::string meta = baton::test::read_bytes(ep2 / "meta.json");
           const std::string entry = "\"" + model_file + "\": {";
           const std::size_t at = meta.find(entry);
           REQUIRE(at != std::string::npos);
           meta.insert(at, "\"model/shard-00002-model-00001-of-00001.safetensors\": {\"bytes\": 64, \"crc32\": 1},\n");
           baton::test::write_bytes(ep2 / "meta.json", meta);
         },
         "model/shard-00002-model-00001-of-00001.safetensors: missing"},
    };
    for (const Damage& damage : damages) {
      CAPTURE(damage.name);
      const fs::path run = dir / ("damaged-" + std::to_string(&damage - damages.data()));
      fs::remove_all(run);
      fs::copy(dir / "pristine", run, fs::copy_options::recursive);
      const fs::path ep2 = run / "checkpoints" / "ep2";
      damage.apply(ep2);
      // Named explicitly: an error naming the checkpoint and the file.
      baton::TrainerOptions o = options_for(Sharding::zero2);
      o.optimizer_factory = adam;
      o.run_dir = run.string();
      o.save_interval = Time(1, TimeUnit::epoch);
      o.max_duration = Time(3, TimeUnit::epoch);
      o.resume = ep2.string();
      const std::string error = baton::test::error_text<baton::CheckpointError>([&] {
        baton::Trainer trainer(convnet(), nullptr, train_data(), eval_data(), o);
        trainer.fit();
      });
      MESSAGE(damage.name << ": " << error);
      CHECK(baton::test::contains(error, "checkpoint " + ep2.string()));
      CHECK(baton::test::contains(error, "shard-0000"));
      CHECK(baton::test::contains(error, damage.message));
      // --resume auto: skipped with that warning, and the run continues from ep1.
      o.resume = "auto";
      baton::Trainer trainer(convnet(), nullptr, train_data(), eval_data(), o);
      const baton::FitResult result = trainer.fit();
      CHECK(result.end.epoch == 3);
      bool warned = false;
      for (const auto& w : trainer.warnings())
        warned = warned || (baton::test::contains(w, "skipping corrupt checkpoint: checkpoint " + ep2.string()) &&
                            baton::test::contains(w, damage.message));
      CHECK(warned);
    }
    // A model of other shapes: refused naming the tensor and both shapes.
    baton::TrainerOptions o = options_for(Sharding::zero2);
    o.optimizer_factory = adam;
    o.resume = (dir / "pristine" / "checkpoints" / "ep2").string();
    o.max_duration = Time(3, TimeUnit::epoch);
    at::manual_seed(5);
    baton::ModelSpec wider;
    wider.name = "convnet";
    wider.widths = {4, 16};
    const std::string error = baton::test::error_text<baton::CheckpointError>([&] {
      baton::Trainer trainer(baton::make_model(wider), nullptr, train_data(), eval_data(), o);
      trainer.fit();
    });
    MESSAGE(error);
    CHECK(baton::test::contains(error, "in the checkpoint, but parameter"));
  }

  TEST_CASE("issue 38: a sharded run resumes an unsharded run's checkpoint, taking its rows of the optimizer state") {
    const auto dir = baton::test::scratch_dir("sharded-from-unsharded");
    const baton::test::Weights straight = run_saving(dir, "straight", Sharding::none, 4, false);
    run_saving(dir, "switched", Sharding::none, 2, false);
    const baton::test::Weights switched = run_saving(dir, "switched", Sharding::zero1, 4, true);
    const double relative = max_relative_difference(switched, straight);
    MESSAGE("2 epochs unsharded, then 2 under zero1: max relative difference to 4 unsharded = " << relative);
    CHECK(relative <= 1e-6);
  }
}
