#include "baton_test.h"

#include <ATen/ops/ones.h>

#include <string>
#include <vector>

#include "baton/components.h"
#include "components/build.h"
#include "config/config.h"
#include "error_text.h"

using namespace baton;

namespace {

RunConfig parse(const std::string& text) { return parse_config(text, "cfg.toml"); }

std::vector<at::Tensor> one_parameter() { return {at::ones({3}).requires_grad_(true)}; }

// The error building the optimizer of `text` gives.
std::string optimizer_error(const std::string& text) {
  const RunConfig c = parse(text);
  return test::error_text<ConfigError>(
      [&] { build_component(components().optimizers, c.optimizer, "optimizer", one_parameter()); });
}

std::string model_error(const std::string& text) {
  const RunConfig c = parse(text);
  DataSpec spec;
  spec.input_shape = {1, 28, 28};
  spec.num_classes = 10;
  return test::error_text<ConfigError>([&] { build_component(components().models, c.model, "model", spec); });
}

}  // namespace

TEST_SUITE("components") {
  TEST_CASE("the built-ins are registered under their names") {
    const Components& c = components();
    CHECK(c.models.names() == std::vector<std::string>{"convnet", "mlp", "torchscript"});
    CHECK(c.datasets.find("fashion-mnist") != nullptr);
    CHECK(c.datasets.find("synthetic") != nullptr);
    CHECK(c.optimizers.names() == std::vector<std::string>{"adam", "adamw", "sgd"});
    CHECK(c.schedulers.names() == std::vector<std::string>{"constant", "cosine", "cosine_restarts", "exponential",
                                                           "linear", "multistep", "polynomial", "step"});
    CHECK(c.losses.find("cross_entropy") != nullptr);
    CHECK(c.metrics.find("accuracy") != nullptr);
    for (const auto* entry : c.models.entries()) {
      CHECK(entry->origin.library == "built-in");
      CHECK_FALSE(entry->description.empty());
    }
  }

  TEST_CASE("a registration is stamped with its origin; a second one of the same name is refused, naming both") {
    Registry<int> registry("widget");
    {
      ComponentOriginScope scope(ComponentOrigin{"/lib/libfirst.so", "1.0", nullptr});
      registry.add("gear", "a gear", 1);
    }
    CHECK(registry.find("gear")->origin.library == "/lib/libfirst.so");
    CHECK(ComponentOrigin::current().library == "built-in");  // the scope restored it
    ComponentOriginScope scope(ComponentOrigin{"/lib/libsecond.so", "2.0", nullptr});
    CHECK(test::error_text([&] { registry.add("gear", "another gear", 2); }) ==
          "widget 'gear' from /lib/libsecond.so is already registered by /lib/libfirst.so");
    CHECK(registry.find("gear")->factory == 1);
  }

  TEST_CASE("an unknown name is an error at <section>.name listing what is registered") {
    const RunConfig c = parse("[model]\nname = \"resnet\"\n");
    const std::string error = test::error_text<ConfigError>([&] {
      DataSpec spec;
      build_component(components().models, c.model, "model", spec);
    });
    CHECK(error.rfind("cfg.toml:2:8: model.name: unknown model 'resnet'; registered: convnet, mlp", 0) == 0);
  }

  TEST_CASE("a component's keys are checked where the component reads them, with file, line and key") {
    CHECK(optimizer_error("[optimizer]\nlr = 0\n") == "cfg.toml:2:6: optimizer.lr: expected a number > 0, got integer 0");
    CHECK(optimizer_error("[optimizer]\nmomentum = 1.0\n") ==
          "cfg.toml:2:12: optimizer.momentum: expected a number in [0, 1), got float 1.0");
    CHECK(optimizer_error("[optimizer]\nlr = \"0.1\"\n") ==
          "cfg.toml:2:6: optimizer.lr: expected a number, got string \"0.1\"");
    CHECK(optimizer_error("[optimizer]\nweight_decay = -0.5\n") ==
          "cfg.toml:2:16: optimizer.weight_decay: expected a number >= 0, got float -0.5");
    // Keys of another optimizer are not silently ignored.
    CHECK(optimizer_error("[optimizer]\nname = \"adam\"\nmomentum = 0.9\n")
              .rfind("cfg.toml:3:1: optimizer.momentum: unknown key 'momentum' for optimizer 'adam'; it reads ", 0) ==
          0);
    CHECK(model_error("[model]\nwidths = [32, 0]\n") ==
          "cfg.toml:2:10: model.widths: expected every width >= 1, got 0 at index 1");
    CHECK(model_error("[model]\nwidths = []\n") ==
          "cfg.toml:2:10: model.widths: expected at least one width for convnet, got []");
    CHECK(model_error("[model]\nwidths = [32, \"64\"]\n") ==
          "cfg.toml:2:15: model.widths[1]: expected an integer, got string \"64\"");
  }

  TEST_CASE("the model takes its shape from the data; a convnet refuses inputs that are not images") {
    const RunConfig c = parse("[model]\nname = \"mlp\"\nwidths = [4]\n");
    DataSpec table;
    table.input_shape = {13};
    table.target_shape = {};
    auto mlp = build_component(components().models, c.model, "model", table);
    const auto out = mlp.forward(at::ones({2, 13}));
    CHECK(out.sizes().vec() == std::vector<std::int64_t>{2, 1});  // one regressed value
    const RunConfig conv = parse("[model]\nname = \"convnet\"\n");
    const std::string error =
        test::error_text<ConfigError>([&] { build_component(components().models, conv.model, "model", table); });
    CHECK(error.find("model.name: model 'convnet': needs image inputs") != std::string::npos);
    CHECK(error.find("13 inputs, 1 regression target") != std::string::npos);
  }

  TEST_CASE("[data]: the dataset's own keys, the renamed key, and keys another dataset would read") {
    CHECK(test::error_text<ConfigError>([] { parse("[data]\ndataset = \"mnist\"\n"); })
              .rfind("cfg.toml:2:11: data.dataset: the dataset is chosen with [data] name", 0) == 0);
    const RunConfig c = parse("[data]\nname = \"synthetic\"\ntrain_size = 8\neval_size = 4\npath = \"/x\"\n");
    DatasetContext context;
    const std::string error = test::error_text<ConfigError>(
        [&] { build_component(components().datasets, c.data, "data", context); });
    CHECK(error.rfind("cfg.toml:5:1: data.path: unknown key 'path' for dataset 'synthetic'", 0) == 0);
    const RunConfig ok = parse("[data]\nname = \"synthetic\"\ntrain_size = 8\neval_size = 4\nbatch_size = 2\n");
    const DatasetSplits splits = build_component(components().datasets, ok.data, "data", context);
    CHECK(splits.train->size() == 8);
    CHECK(splits.eval->size() == 4);
    CHECK(ok.settings.batch_size == 2);
    const RunConfig missing = parse("[data]\nname = \"idx\"\npath = \"no/such\"\n");
    CHECK(test::error_text<ConfigError>([&] {
            build_component(components().datasets, missing.data, "data", context);
          }).rfind("cfg.toml:3:8: data.path: no such folder: 'no/such'", 0) == 0);
  }
}
