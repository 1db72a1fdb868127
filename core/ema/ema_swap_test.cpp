#include "baton_test.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/optim/sgd.h>

#include "baton/ema.h"
#include "baton/error.h"
#include "ema/ema_kernel.h"
#include "ema/ema_test_support.h"
#include "error_text.h"

using baton::test::error_text;

using namespace baton::ema_test;

// The EMA in the model's place and in files: swap and its guard, copy_to, state_dict, introspection.
TEST_SUITE("ema") {
  TEST_CASE("swap exchanges in place and restores the raw weights bitwise (fp32, bf16 with fp32 EMA, cpu)") {
    struct Case {
      at::ScalarType dtype;
      bool float32;
      std::string device;
    };
    for (const Case& c : {Case{at::kFloat, false, ""}, Case{at::kBFloat16, true, ""}, Case{at::kFloat, false, "cpu"}}) {
      INFO("dtype " << c10::toString(c.dtype) << " float32 " << c.float32 << " device '" << c.device << "'");
      Net net(c.dtype);
      set_all(net, 0);
      baton::EmaOptions options;
      options.smoothing = 0.7;
      options.float32 = c.float32;
      options.device = c.device;
      baton::ExponentialMovingAverage ema(net, options);
      run_updates(ema, net, 3);
      CHECK(ema.device() == "cpu");
      const auto raw = snapshot(net);
      const at::Tensor expected_head = ema.get("head").clone();
      const auto* impl = net.head.unsafeGetTensorImpl();

      ema.swap(net);
      CHECK(ema.swapped());
      CHECK(net.head.unsafeGetTensorImpl() == impl);
      CHECK((net.head.scalar_type() == c.dtype));
      CHECK(bitwise_equal(net.head, expected_head.to(c.dtype)));
      CHECK(bitwise_equal(ema.get("head"), expected_head));  // still readable while swapped
      CHECK(net.num_batches_tracked.item<std::int64_t>() == 31);
      CHECK(contains(error_text([&] { ema.update(net); }), "swap"));
      CHECK(contains(error_text([&] { ema.copy_to(net); }), "swap"));
      CHECK(contains(error_text([&] { ema.reset(net); }), "swap"));
      CHECK(contains(error_text([&] { ema.to("cpu"); }), "swap"));
      CHECK(contains(error_text([&] { ema.load_state_dict(ema.state_dict()); }), "swap"));

      ema.swap(net);
      CHECK_FALSE(ema.swapped());
      CHECK(same_as(net, raw));
      CHECK(net.head.requires_grad());
      CHECK(bitwise_equal(ema.get("head"), expected_head));
      ema.update(net);  // usable again after swapping back
    }
  }

  TEST_CASE("a tensor kept under two names (tied weights) swaps in and back correctly") {
    struct Tied : torch::nn::Module {
      Tied() {
        at::Tensor shared = at::zeros({6});
        a = register_parameter("a", shared);
        b = register_parameter("b", shared);
      }
      at::Tensor a, b;
    } net;
    REQUIRE(net.a.unsafeGetTensorImpl() == net.b.unsafeGetTensorImpl());
    set_weights(net.a, 0);
    baton::EmaOptions options;
    options.smoothing = 0.5;
    baton::ExponentialMovingAverage ema(net, options);
    set_weights(net.a, 1);
    ema.update(net);
    const auto raw = snapshot(net);
    const at::Tensor average = ema.get("a").clone();
    ema.swap(net);
    CHECK(bitwise_equal(net.a, average));
    ema.swap(net);
    CHECK(same_as(net, raw));
    CHECK(bitwise_equal(ema.get("a"), average));
    CHECK(bitwise_equal(ema.get("b"), average));
  }

  TEST_CASE("copy_to writes the EMA into a model, converted to the model's dtype") {
    Net net(at::kBFloat16);
    set_all(net, 0);
    baton::EmaOptions options;
    options.smoothing = 0.9;
    options.float32 = true;
    baton::ExponentialMovingAverage ema(net, options);
    run_updates(ema, net, 3);
    Net target(at::kBFloat16);
    ema.copy_to(target);
    CHECK(bitwise_equal(target.block->weight, ema.get("block.weight").to(at::kBFloat16)));
    CHECK(bitwise_equal(target.running_mean, ema.get("running_mean").to(at::kBFloat16)));
    CHECK(target.num_batches_tracked.item<std::int64_t>() == 31);
    CHECK_FALSE(bitwise_equal(target.head, net.head));
  }

  TEST_CASE("EmaSwapGuard restores the raw weights when the scope ends by an exception") {
    Net net;
    set_all(net, 0);
    baton::ExponentialMovingAverage ema(net);
    run_updates(ema, net, 2);
    const auto raw = snapshot(net);
    const at::Tensor ema_head = ema.get("head").clone();
    try {
      baton::EmaSwapGuard guard(ema, net);
      CHECK(ema.swapped());
      CHECK(bitwise_equal(net.head, ema_head));
      throw std::runtime_error("evaluation failed");
    } catch (const std::runtime_error&) {
    }
    CHECK_FALSE(ema.swapped());
    CHECK(same_as(net, raw));
  }

  TEST_CASE("EmaSwapGuard evaluates in eval mode by default, so a forward leaves the EMA's statistics (issue 24 §21)") {
    // A BatchNorm over 2 features; the batch [[0, 2], [2, 4]] has means [1, 3]: a train-mode forward moves the
    // running mean from 0 to momentum 0.1 * [1, 3] = [0.1, 0.3] and counts one batch.
    auto net = std::make_shared<torch::nn::BatchNorm1dImpl>(2);
    baton::ExponentialMovingAverage ema(*net);
    at::Tensor batch = at::zeros({2, 2});
    batch[0][1] = 2;
    batch[1][0] = 2;
    batch[1][1] = 4;
    net->train();
    {
      baton::EmaSwapGuard guard(ema, *net);
      CHECK_FALSE(net->is_training());
      net->forward(batch);
    }
    CHECK(net->is_training());  // the mode it found, back
    CHECK(values(ema.get("running_mean")) == std::vector<double>{0, 0});
    CHECK(ema.get("num_batches_tracked").item<std::int64_t>() == 0);
    // Asked to keep the mode, the forward writes into the EMA, as documented.
    {
      baton::EmaSwapGuard guard(ema, *net, baton::EmaGuardMode::keep);
      CHECK(net->is_training());
      net->forward(batch);
    }
    const auto mean = values(ema.get("running_mean"));
    CHECK(mean[0] == doctest::Approx(0.1));
    CHECK(mean[1] == doctest::Approx(0.3));
    CHECK(ema.get("num_batches_tracked").item<std::int64_t>() == 1);
    CHECK(values(net->running_mean) == std::vector<double>{0, 0});  // the raw model's own statistics untouched
  }

  TEST_CASE("an SGD-with-momentum step after swap and swap back is bitwise the step without them") {
    Net a, b;
    set_all(a, 0);
    set_all(b, 0);
    torch::optim::SGD opt_a(a.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::optim::SGD opt_b(b.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto set_grads = [](Net& net, int step) {
      for (const auto& p : net.parameters()) p.mutable_grad() = at::full(p.sizes(), 0.01 * step + 0.5);
    };
    baton::ExponentialMovingAverage ema(a);
    for (int step = 1; step <= 3; ++step) {
      set_grads(a, step);
      set_grads(b, step);
      ema.swap(a);  // grads and momentum buffers must survive the exchange
      ema.swap(a);
      opt_a.step();
      opt_b.step();
      ema.update(a);
    }
    CHECK(same_as(a, snapshot(b)));
    CHECK(a.head.grad().defined());
  }

  TEST_CASE("state_dict gives copies; load_state_dict round trips and names the offending tensor") {
    Net net;
    set_all(net, 0);
    baton::ExponentialMovingAverage ema(net);
    run_updates(ema, net, 2);
    auto state = ema.state_dict();
    REQUIRE(state.size() == 5);
    CHECK(state[0].first == "head");
    {
      at::NoGradGuard no_grad;
      state[0].second.add_(1.0);  // a caller-owned copy: the EMA must not change
    }
    CHECK_FALSE(bitwise_equal(ema.get("head"), state[0].second));

    Net other;
    baton::ExponentialMovingAverage loaded(other);
    loaded.load_state_dict(state);
    for (const auto& [name, tensor] : state) CHECK(bitwise_equal(loaded.get(name), tensor));

    auto wrong_shape = state;
    wrong_shape[1].second = at::zeros({4, 3});  // block.weight is [3, 4]
    const auto shape_error = error_text([&] { loaded.load_state_dict(wrong_shape); });
    CHECK(contains(shape_error, "'block.weight'"));
    CHECK(contains(shape_error, "[4, 3]"));
    CHECK(contains(shape_error, "[3, 4]"));

    auto wrong_dtype = state;
    wrong_dtype[0].second = wrong_dtype[0].second.to(at::kDouble);
    const auto dtype_error = error_text([&] { loaded.load_state_dict(wrong_dtype); });
    CHECK(contains(dtype_error, "'head'"));
    CHECK(contains(dtype_error, "Double"));
    CHECK(contains(dtype_error, "Float"));

    auto missing = state;
    missing.erase(missing.begin() + 3);  // running_mean
    CHECK(contains(error_text([&] { loaded.load_state_dict(missing); }), "'running_mean'"));
    auto extra = state;
    extra.emplace_back("ghost", at::zeros({1}));
    CHECK(contains(error_text([&] { loaded.load_state_dict(extra); }), "'ghost'"));

    // Non-strict: the intersection is loaded, the rest is left as it was.
    Net third;
    baton::ExponentialMovingAverage partial(third);
    const at::Tensor before = partial.get("running_mean").clone();
    partial.load_state_dict({extra.front(), extra.back()}, /*strict=*/false);  // head and ghost
    CHECK(bitwise_equal(partial.get("head"), state[0].second));
    CHECK(bitwise_equal(partial.get("running_mean"), before));

    baton::ExponentialMovingAverage empty;
    CHECK(contains(error_text([&] { empty.load_state_dict(state); }), "initialised"));
  }

  TEST_CASE("introspection: names, size, contains, bytes, get, to, layout errors") {
    Net net;
    baton::ExponentialMovingAverage ema(net);
    CHECK(ema.initialized());
    CHECK(ema.size() == 5);
    CHECK((ema.names() == std::vector<std::string>{"head", "block.weight", "block.bias", "running_mean",
                                                   "num_batches_tracked"}));
    CHECK(ema.contains("block.bias"));
    CHECK_FALSE(ema.contains("block"));
    CHECK(ema.bytes() == (5 + 12 + 4 + 4) * 4 + 8);
    CHECK(contains(error_text([&] { ema.get("nope"); }), "'nope'"));
    ema.to("cpu");
    CHECK(ema.device() == "cpu");
    CHECK(contains(error_text([&] { ema.to("tpu:banana"); }), "tpu:banana"));
    CHECK_FALSE(baton::ExponentialMovingAverage().initialized());

    struct Wider : Net {
      Wider() { extra = register_parameter("extra", at::zeros({2})); }
      at::Tensor extra;
    } wider;
    CHECK(contains(error_text([&] { ema.update(wider); }), "'extra'"));
    Block alone;
    CHECK(contains(error_text([&] { ema.update(alone); }), "'weight'"));
  }
}
