#include "baton_test.h"

#include <filesystem>
#include <memory>
#include <string>

#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <torch/nn/module.h>

#include "baton/safetensors.h"
#include "baton/trainer.h"
#include "small_trainer.h"
#include "trainer/weights_init.h"

namespace fs = std::filesystem;
using baton::Time;
using baton::TimeUnit;
using baton::WeightsInit;

namespace weights_init_test {

// The message init_weights throws, or "" when it loads.
std::string init_error(torch::nn::Module& module, const WeightsInit& init) {
  try {
    baton::init_weights(module, init);
  } catch (const baton::Error& e) {
    return e.what();
  }
  return "";
}

// The small trainer's model (a convnet) and a file holding a value per tensor: i + 1 for the i-th, so a test knows
// which tensor landed where.
struct Fixture {
  std::unique_ptr<baton::Trainer> trainer = baton::test::make_trainer(baton::test::quiet_options());
  torch::nn::Module& module = *trainer->state().facts.model();
  baton::NamedTensors model = baton::named_model_tensors(module);

  baton::NamedTensors values(const std::string& prefix = "") const {
    baton::NamedTensors out;
    for (std::size_t i = 0; i < model.size(); ++i)
      out.emplace_back(prefix + model[i].first,
                       at::full(model[i].second.sizes(), static_cast<double>(i + 1), model[i].second.options()));
    return out;
  }
};

TEST_SUITE("weights_init") {
  TEST_CASE("a safetensors file of the model's names fills every parameter and buffer in place") {
    Fixture f;
    const auto dir = baton::test::scratch_dir("init-file");
    const std::string file = (dir / "weights.safetensors").string();
    baton::write_safetensors(file, f.values());
    const at::Tensor first = f.model[0].second;  // the module's own tensor: loaded in place, not replaced
    WeightsInit init;
    init.path = file;
    const auto report = baton::init_weights(f.module, init);
    CHECK(report.loaded == f.model.size());
    CHECK(report.kept.empty());
    CHECK(report.unused.empty());
    const auto after = baton::named_model_tensors(f.module);
    for (std::size_t i = 0; i < after.size(); ++i)
      CHECK(at::equal(after[i].second, at::full(after[i].second.sizes(), static_cast<double>(i + 1),
                                               after[i].second.options())));
    CHECK(after[0].second.data_ptr() == first.data_ptr());
    CHECK(after[0].second.requires_grad());  // still a parameter
  }

  TEST_CASE("ignore leaves matching tensors as initialised; strict lists every mismatch with the name meant") {
    Fixture f;
    const auto dir = baton::test::scratch_dir("init-mismatch");
    // A head of another size (a new task's classes): refused, named with both shapes, until ignored.
    auto values = f.values();
    std::string classifier_weight;
    for (auto& [name, t] : values)
      if (name.rfind("classifier", 0) == 0 && name.find("weight") != std::string::npos) {
        classifier_weight = name;
        t = at::full({3, t.size(1)}, 7.0);
      }
    REQUIRE_FALSE(classifier_weight.empty());
    const std::string file = (dir / "other_head.safetensors").string();
    baton::write_safetensors(file, values);
    WeightsInit init;
    init.path = file;
    const std::string shape_error = init_error(f.module, init);
    CHECK(shape_error.find("model.init: the model does not match") != std::string::npos);
    CHECK(shape_error.find("shapes differ: ") != std::string::npos);
    CHECK(shape_error.find(classifier_weight + " [3, ") != std::string::npos);
    CHECK(shape_error.find("] in the source, [10, ") != std::string::npos);
    CHECK(shape_error.find("] in the model") != std::string::npos);
    CHECK(shape_error.find("model.ignore") != std::string::npos);
    // Nothing was loaded by the failed attempt.
    CHECK_FALSE(at::equal(f.model[0].second, at::full(f.model[0].second.sizes(), 1.0)));

    const at::Tensor before = f.module.named_parameters()[classifier_weight].clone();
    init.ignore = {"classifier.*"};
    const auto report = baton::init_weights(f.module, init);
    CHECK(at::equal(f.module.named_parameters()[classifier_weight], before));  // as initialised
    CHECK(at::equal(f.model[0].second, at::full(f.model[0].second.sizes(), 1.0)));
    CHECK(report.kept.size() == report.unused.size());
    CHECK(report.loaded + report.kept.size() == f.model.size());
    CHECK(report.summary().find("model.init: " + std::to_string(report.loaded) + " tensors from \"" + file + "\"; " +
                                std::to_string(report.kept.size()) + " kept as initialised (classifier.") == 0);

    // A Python wrapper's prefix (DDP's "module."): every name missing, each with the one meant.
    const std::string wrapped = (dir / "wrapped.safetensors").string();
    baton::write_safetensors(wrapped, f.values("module."));
    WeightsInit w;
    w.path = wrapped;
    const std::string names = init_error(f.module, w);
    CHECK(names.find("model tensors not in the source: " + f.model[0].first + " (did you mean module." +
                     f.model[0].first + "?)") != std::string::npos);
    CHECK(names.find("source tensors the model does not have: module." + f.model[0].first) != std::string::npos);
    CHECK(names.find(" more") != std::string::npos);  // long lists are cut
    // strict = false loads the names both have: none here, nothing refused.
    w.strict = false;
    CHECK(baton::init_weights(f.module, w).loaded == 0);
  }

  TEST_CASE("a path that is nothing, a folder of neither kind, and weights asked of a file are refused clearly") {
    Fixture f;
    WeightsInit init;
    init.path = "no/such/weights.safetensors";
    CHECK(init_error(f.module, init).find("model.init: cannot read \"no/such/weights.safetensors\": No such file") !=
          std::string::npos);
    const auto dir = baton::test::scratch_dir("init-empty-folder");
    init.path = dir.string();
    CHECK(init_error(f.module, init).find("is neither a checkpoint (no meta.json) nor a run folder") !=
          std::string::npos);
    const std::string file = (dir / "w.safetensors").string();
    baton::write_safetensors(file, f.values());
    init.path = file;
    init.weights = "ema";
    CHECK(init_error(f.module, init).find("model.init_weights = \"ema\" chooses among") != std::string::npos);
  }

  // A plugin that writes an "EMA" of its own into every checkpoint and the run folder: every tensor 0.5.
  struct HalfEma : baton::Callback {
    baton::StateDict halves(baton::State& s) {
      baton::StateDict d;
      for (const auto& [name, t] : baton::named_model_tensors(*s.facts.model()))
        d.set_tensor(name, at::full(t.sizes(), 0.5, t.options()));
      return d;
    }
    void epoch_checkpoint(baton::State& s, baton::Logger&) override {
      if (s.checkpoint) s.checkpoint->add_tensors_file("ema.safetensors", halves(s));
    }
  };

  TEST_CASE("fine-tuning from a run: a checkpoint's raw or EMA weights, a run folder's export; the fresh run "
            "starts at the source's accuracy") {
    const auto dir = baton::test::scratch_dir("init-source-run");
    auto options = baton::test::quiet_options(dir.string());
    auto source = baton::test::make_trainer(options);
    source->add_plugin("half_ema", std::make_shared<HalfEma>());
    const auto trained = source->fit();
    REQUIRE_FALSE(trained.evals.empty());
    const double accuracy = trained.evals.back().metrics.at("eval/accuracy");
    const auto exported = baton::read_safetensors((dir / "model.safetensors").string()).tensors;

    // A new run from the run folder (its model.safetensors): evaluated before any step, it scores what the source
    // scored at its end, on the same evaluation set; its model holds the exported values.
    auto fine = baton::test::quiet_options();
    fine.init.path = dir.string();
    auto tuned = baton::test::make_trainer(fine);
    const auto results = tuned->evaluate_standalone();
    CHECK(results[0].metric("accuracy") == doctest::Approx(accuracy).epsilon(1e-12));
    const auto loaded = baton::named_model_tensors(*tuned->state().facts.model());
    REQUIRE(loaded.size() == exported.size());
    for (std::size_t i = 0; i < loaded.size(); ++i) CHECK(at::equal(loaded[i].second, exported[i].second));

    // The last checkpoint: "raw" is the trained weights, "auto" and "ema" its ema.safetensors.
    const std::string checkpoint = (dir / "checkpoints" / "ep2").string();
    REQUIRE(fs::exists(fs::path(checkpoint) / "meta.json"));
    for (const char* which : {"raw", "auto", "ema"}) {
      CAPTURE(which);
      auto o = baton::test::quiet_options();
      o.init.path = checkpoint;
      o.init.weights = which;
      auto t = baton::test::make_trainer(o);
      t->check();
      const auto w = baton::named_model_tensors(*t->state().facts.model());
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (std::string(which) == "raw")
          CHECK(at::equal(w[i].second, exported[i].second));
        else
          CHECK(at::equal(w[i].second, at::full(w[i].second.sizes(), 0.5, w[i].second.options())));
      }
    }
    // A checkpoint without EMA weights, asked for them.
    const auto plain = baton::test::scratch_dir("init-plain-run");
    baton::test::make_trainer(baton::test::quiet_options(plain.string()))->fit();
    auto o = baton::test::quiet_options();
    o.init.path = (plain / "checkpoints" / "ep2").string();
    o.init.weights = "ema";
    std::string message;
    try {
      baton::test::make_trainer(o)->check();
    } catch (const baton::Error& e) {
      message = e.what();
    }
    CHECK(message.find("holds no EMA weights (ema.safetensors; the run had no ema plugin)") != std::string::npos);
  }

  TEST_CASE("a resumed run takes its weights from the checkpoint, not from init") {
    const auto dir = baton::test::scratch_dir("init-resume");
    auto options = baton::test::quiet_options(dir.string());
    options.max_duration = Time(1, TimeUnit::epoch);
    baton::test::make_trainer(options)->fit();
    auto more = options;
    more.max_duration = Time(2, TimeUnit::epoch);
    more.resume = "auto";
    more.init.path = "gone.safetensors";  // never read: the resume finds ep1
    const auto result = baton::test::make_trainer(more)->fit();
    CHECK(result.end.epoch == 2);
  }
}

}  // namespace weights_init_test
