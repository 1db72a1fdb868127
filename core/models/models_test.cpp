#include "baton_test.h"

#include <ATen/Context.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/batch_norm.h>
#include <ATen/ops/conv2d.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/max_pool2d.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>

#include <map>
#include <string>

#include "baton/error.h"
#include "baton/models.h"

using namespace baton;

namespace {

ModelSpec spec_named(const std::string& name, std::vector<std::int64_t> widths = {}) {
  ModelSpec spec;
  spec.name = name;
  spec.widths = std::move(widths);
  return spec;
}

std::int64_t parameter_count(const torch::nn::AnyModule& model) {
  std::int64_t count = 0;
  for (const auto& p : model.ptr()->parameters()) count += p.numel();
  return count;
}

std::map<std::string, std::vector<std::int64_t>> parameter_shapes(const torch::nn::AnyModule& model) {
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& item : model.ptr()->named_parameters()) shapes[item.key()] = item.value().sizes().vec();
  return shapes;
}

}  // namespace

TEST_SUITE("models") {
  TEST_CASE("both models map [N,1,28,28] to [N,10]") {
    for (const auto& name : {"mlp", "convnet"}) {
      CAPTURE(name);
      auto model = make_model(spec_named(name));
      const at::Tensor out = model.forward(at::zeros({3, 1, 28, 28}));
      CHECK(out.sizes().vec() == std::vector<std::int64_t>{3, 10});
    }
  }

  TEST_CASE("an mlp of 256-128 has the hand-computed parameter count and readable names; without widths it is linear") {
    CHECK(parameter_count(make_model(spec_named("mlp"))) == 784 * 10 + 10);
    auto model = make_model(spec_named("mlp", {256, 128}));
    CHECK(parameter_count(model) == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    const auto shapes = parameter_shapes(model);
    CHECK(shapes.size() == 6);
    CHECK(shapes.at("layers.0.weight") == std::vector<std::int64_t>{256, 784});
    CHECK(shapes.at("layers.2.weight") == std::vector<std::int64_t>{128, 256});
    CHECK(shapes.at("layers.4.bias") == std::vector<std::int64_t>{10});
  }

  TEST_CASE("widths are honoured") {
    auto mlp = make_model(spec_named("mlp", {64}));
    CHECK(parameter_count(mlp) == 784 * 64 + 64 + 64 * 10 + 10);

    auto conv = make_model(spec_named("convnet", {8, 16, 4}));
    const auto shapes = parameter_shapes(conv);
    CHECK(shapes.at("features.0.weight") == std::vector<std::int64_t>{8, 1, 3, 3});
    CHECK(shapes.at("features.4.weight") == std::vector<std::int64_t>{16, 8, 3, 3});
    CHECK(shapes.at("features.8.weight") == std::vector<std::int64_t>{4, 16, 3, 3});
    CHECK(shapes.count("features.0.bias") == 0);  // convolutions have no bias
    // 28 -> 14 -> 7 -> 3 after three poolings: 4 channels of 3x3 feed the classifier.
    CHECK(shapes.at("classifier.0.weight") == std::vector<std::int64_t>{128, 4 * 3 * 3});
    CHECK(shapes.at("classifier.2.weight") == std::vector<std::int64_t>{10, 128});
    CHECK(conv.forward(at::zeros({2, 1, 28, 28})).sizes().vec() == std::vector<std::int64_t>{2, 10});
  }

  TEST_CASE("dropout: the same parameter names; identity in evaluation, zeroes a share of the hidden units in training") {
    for (const auto& name : {"mlp", "convnet"}) {
      CAPTURE(name);
      at::manual_seed(7);
      auto plain = make_model(spec_named(name, {16, 8}));
      at::manual_seed(7);
      ModelSpec spec = spec_named(name, {16, 8});
      spec.dropout = 0.5;
      auto dropped = make_model(spec);
      CHECK(parameter_shapes(plain) == parameter_shapes(dropped));
      const at::Tensor x = at::randn({4, 1, 28, 28});
      plain.ptr()->eval();
      dropped.ptr()->eval();
      CHECK(at::equal(plain.forward(x), dropped.forward(x)));
      dropped.ptr()->train();
      plain.ptr()->train();
      // With half the hidden units of each row dropped (and the rest doubled) the outputs differ.
      CHECK_FALSE(at::allclose(plain.forward(x), dropped.forward(x)));
    }
    ModelSpec bad = spec_named("mlp");
    bad.dropout = 1.0;
    CHECK_THROWS_AS(make_model(bad), Error);
  }

  TEST_CASE("the convnet's BatchNorm statistics are buffers") {
    auto model = make_model(spec_named("convnet"));
    const auto buffers = model.ptr()->named_buffers();
    for (const auto* layer : {"features.1", "features.5"}) {
      CAPTURE(layer);
      const std::string prefix = layer;
      REQUIRE(buffers.contains(prefix + ".running_mean"));
      REQUIRE(buffers.contains(prefix + ".running_var"));
      REQUIRE(buffers.contains(prefix + ".num_batches_tracked"));
      CHECK((buffers[prefix + ".num_batches_tracked"].scalar_type() == at::kLong));
    }
    CHECK(buffers["features.5.running_mean"].size(0) == 64);
    // Default widths {32, 64}: 28 -> 14 -> 7, so 64 * 7 * 7 inputs to the first classifier layer.
    CHECK(parameter_shapes(model).at("classifier.0.weight") == std::vector<std::int64_t>{128, 64 * 7 * 7});
  }

  TEST_CASE("a convnet with global_pool averages each channel: any image size fits, as the operators compute it") {
    ModelSpec spec = spec_named("convnet", {8});
    spec.global_pool = true;
    auto model = make_model(spec);
    // One block of 8 channels: the first classifier layer takes the 8 channel means, whatever the image size.
    CHECK(parameter_shapes(model).at("classifier.0.weight") == std::vector<std::int64_t>{128, 8});
    model.ptr()->eval();
    const auto p = model.ptr()->named_parameters();
    const auto b = model.ptr()->named_buffers();
    for (std::int64_t side : {28, 16, 9}) {
      CAPTURE(side);
      at::manual_seed(side);
      const at::Tensor x = at::randn({3, 1, side, side});
      const at::Tensor got = model.forward(x);
      // The same computation from the operators: conv, batch norm with its running statistics, ReLU, 2x2 max
      // pooling, the mean over height and width, then Linear, ReLU, Linear.
      at::Tensor h = at::conv2d(x, p["features.0.weight"], {}, 1, 1);
      h = at::batch_norm(h, p["features.1.weight"], p["features.1.bias"], b["features.1.running_mean"],
                         b["features.1.running_var"], false, 0.1, 1e-5, false);
      h = at::max_pool2d(at::relu(h), {2, 2});
      h = h.mean({2, 3});
      h = at::relu(at::linear(h, p["classifier.0.weight"], p["classifier.0.bias"]));
      const at::Tensor expected = at::linear(h, p["classifier.2.weight"], p["classifier.2.bias"]);
      REQUIRE(got.sizes() == expected.sizes());
      CHECK(at::allclose(got, expected, 1e-5, 1e-6));
    }
    // Without it, a size other than the data's does not fit the classifier.
    auto flat = make_model(spec_named("convnet", {8}));
    CHECK_THROWS(flat.forward(at::randn({3, 1, 16, 16})));
  }

  TEST_CASE("the global seed decides the weights") {
    for (const auto& name : {"mlp", "convnet"}) {
      CAPTURE(name);
      at::manual_seed(123);
      auto a = make_model(spec_named(name));
      at::manual_seed(123);
      auto b = make_model(spec_named(name));
      at::manual_seed(124);
      auto c = make_model(spec_named(name));
      const auto pa = a.ptr()->parameters(), pb = b.ptr()->parameters(), pc = c.ptr()->parameters();
      REQUIRE(pa.size() == pb.size());
      bool all_equal = true, any_differs = false;
      for (std::size_t i = 0; i < pa.size(); ++i) {
        all_equal = all_equal && at::equal(pa[i], pb[i]);
        any_differs = any_differs || !at::equal(pa[i], pc[i]);
      }
      CHECK(all_equal);
      CHECK(any_differs);
    }
  }

  TEST_CASE("bad model specs are errors naming the model") {
    try {
      make_model(spec_named("resnet"));
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("resnet") != std::string::npos);
    }
    CHECK_THROWS_AS(make_model(spec_named("mlp", {0})), Error);
    CHECK_THROWS_AS(make_model(spec_named("convnet", {4, 4, 4, 4, 4, 4})), Error);  // 28 halves to 0
  }
}
