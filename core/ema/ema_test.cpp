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
#include "test_device.h"

using baton::test::error_text;

using namespace baton::ema_test;

// The average itself: the closed form, buffers, exclusions, dtypes, strides, conversions of half life.
TEST_SUITE("ema") {
  TEST_CASE("half life and smoothing convert both ways; a half life of 0 means no averaging") {
    CHECK(baton::smoothing_from_half_life(1000, 1) == doctest::Approx(0.999307).epsilon(1e-6));
    CHECK(std::abs(baton::smoothing_from_half_life(1000, 1) - 0.999307) < 1e-6);
    CHECK(std::abs(baton::smoothing_from_half_life(1000, 10) - 0.993092) < 1e-6);
    CHECK(baton::half_life_from_smoothing(0.999307, 1) == doctest::Approx(1000).epsilon(1e-3));
    CHECK(baton::half_life_from_smoothing(std::pow(0.5, 1.0 / 250), 10) == doctest::Approx(2500).epsilon(1e-12));
    CHECK(baton::smoothing_from_half_life(0) == 0.0);
    CHECK(baton::half_life_from_smoothing(0) == 0.0);
    CHECK(baton::half_life_from_smoothing(1) == std::numeric_limits<double>::infinity());
    CHECK(contains(error_text([] { baton::smoothing_from_half_life(-1); }), "half life"));
    CHECK(contains(error_text([] { baton::half_life_from_smoothing(1.5); }), "[0, 1]"));
  }

  TEST_CASE("smoothing outside [0, 1] is rejected everywhere it can be given") {
    Net net;
    baton::EmaOptions bad;
    bad.smoothing = 1.5;
    CHECK(contains(error_text([&] { baton::ExponentialMovingAverage ema(net, bad); }), "1.5"));
    baton::ExponentialMovingAverage ema(net);
    CHECK(contains(error_text([&] { ema.set_smoothing(-0.1); }), "[0, 1]"));
    CHECK(contains(error_text([&] { ema.update(net, 1.0001); }), "[0, 1]"));
    CHECK(contains(error_text([&] { ema.update(net, std::nan("")); }), "[0, 1]"));
    ema.set_smoothing(1.0);
    ema.update(net, 0.0);
    CHECK(ema.options().smoothing == 1.0);
  }

  TEST_CASE("k updates match the closed form; int buffers copied, float buffers averaged") {
    for (auto dtype : {at::kFloat, at::kDouble}) {
      INFO("dtype " << c10::toString(dtype));
      Net net(dtype);
      set_all(net, 0);
      baton::EmaOptions options;
      options.smoothing = 0.9;
      baton::ExponentialMovingAverage ema(net, options);
      const int k = 7;
      run_updates(ema, net, k);
      const double tolerance = dtype == at::kFloat ? 5e-6 : 1e-12;
      check_closed_form(ema.get("block.weight"), k, 0.9, dtype, tolerance);
      check_closed_form(ema.get("head"), k, 0.9, dtype, tolerance);
      check_closed_form(ema.get("running_mean"), k, 0.9, dtype, tolerance);
      CHECK((ema.get("block.weight").scalar_type() == dtype));
      CHECK((ema.get("num_batches_tracked").scalar_type() == at::kLong));
      CHECK(ema.get("num_batches_tracked").item<std::int64_t>() == k * 10 + 1);
    }
  }

  TEST_CASE("buffers = copy copies floating buffers; parameters are still averaged") {
    Net net;
    set_all(net, 0);
    baton::EmaOptions options;
    options.smoothing = 0.5;
    options.buffers = baton::EmaBuffers::copy;
    baton::ExponentialMovingAverage ema(net, options);
    run_updates(ema, net, 3);
    check_equal_to_weights(ema.get("running_mean"), 3, at::kFloat);
    check_closed_form(ema.get("block.bias"), 3, 0.5, at::kFloat, 5e-6);
    CHECK(ema.get("num_batches_tracked").item<std::int64_t>() == 31);
  }

  TEST_CASE("exclude globs: '*' crosses dots, '?' is one character; excluded tensors are copied") {
    Net net;
    set_all(net, 0);
    baton::EmaOptions options;
    options.smoothing = 0.8;
    options.exclude = {"*.bias", "hea?", "runn?ng_mean_x"};
    baton::ExponentialMovingAverage ema(net, options);
    run_updates(ema, net, 4);
    check_equal_to_weights(ema.get("block.bias"), 4, at::kFloat);
    check_equal_to_weights(ema.get("head"), 4, at::kFloat);
    check_closed_form(ema.get("block.weight"), 4, 0.8, at::kFloat, 5e-6);
    check_closed_form(ema.get("running_mean"), 4, 0.8, at::kFloat, 5e-6);

    options.exclude = {"block*", "h?"};  // "h?" must not match "head"
    baton::ExponentialMovingAverage other(net, options);
    set_all(net, 5);
    other.update(net);
    check_equal_to_weights(other.get("block.weight"), 5, at::kFloat);
    CHECK(values(other.get("head"))[0] != weight_value(0, 5, at::kFloat));
  }

  TEST_CASE("smoothing 0 makes the EMA equal to the weights exactly, even far from the old average") {
    Net net;
    {
      at::NoGradGuard no_grad;
      net.head.fill_(1e30);
    }
    baton::ExponentialMovingAverage ema(net);
    {
      at::NoGradGuard no_grad;
      net.head.fill_(1.0f);
    }
    ema.update(net, 0.0);
    CHECK((values(ema.get("head")) == std::vector<double>(5, 1.0)));
  }

  TEST_CASE("fp32 EMA of bf16 and fp16 weights: fp32 values, not what a low-precision EMA gives") {
    const double s = 0.99;
    const int k = 10;
    for (auto dtype : {at::kBFloat16, at::kHalf}) {
      INFO("dtype " << c10::toString(dtype));
      Net net(dtype);
      set_all(net, 0);
      baton::EmaOptions options;
      options.smoothing = s;
      options.float32 = true;
      baton::ExponentialMovingAverage wide(net, options);
      options.float32 = false;
      baton::ExponentialMovingAverage narrow(net, options);
      for (int j = 1; j <= k; ++j) {
        set_all(net, j);
        wide.update(net);
        narrow.update(net);
      }
      CHECK((wide.get("block.weight").scalar_type() == at::kFloat));
      CHECK((narrow.get("block.weight").scalar_type() == dtype));
      check_closed_form(wide.get("block.weight"), k, s, dtype, 5e-6);

      // A low-precision EMA rounds after every step: simulate it with c10's own conversions.
      const float a = static_cast<float>(1.0 - s);
      const auto got_narrow = values(narrow.get("block.weight"));
      const auto got_wide = values(wide.get("block.weight"));
      bool differs = false;
      for (std::size_t i = 0; i < got_narrow.size(); ++i) {
        float e = static_cast<float>(weight_value(i, 0, dtype));
        for (int j = 1; j <= k; ++j) {
          const float r = e + a * (static_cast<float>(weight_value(i, j, dtype)) - e);
          e = dtype == at::kBFloat16 ? static_cast<float>(c10::BFloat16(r)) : static_cast<float>(c10::Half(r));
        }
        CHECK(got_narrow[i] == static_cast<double>(e));
        differs = differs || std::abs(got_wide[i] - got_narrow[i]) > 1e-4;
      }
      CHECK(differs);
    }
  }

  TEST_CASE("strided weights take the LibTorch path and match the closed form; the EMA never requires grad") {
    struct Strided : torch::nn::Module {
      Strided() { w = register_parameter("w", at::zeros({4, 3}).t()); }
      at::Tensor w;
    } net;
    REQUIRE_FALSE(net.w.is_contiguous());
    set_weights(net.w, 0);
    baton::EmaOptions options;
    options.smoothing = 0.6;
    baton::ExponentialMovingAverage ema(net, options);
    for (int j = 1; j <= 4; ++j) {
      set_weights(net.w, j);
      ema.update(net);
    }
    // set_weights wrote logical element i of the transposed view; values() reads in the same logical order.
    check_closed_form(ema.get("w"), 4, 0.6, at::kFloat, 5e-6);
    CHECK_FALSE(ema.get("w").requires_grad());
    CHECK_FALSE(ema.get("w").grad_fn());
  }

  TEST_CASE("on the test device (BATON_TEST_DEVICE): the closed form for every dtype, strided and mixed weights") {
    // On a GPU the averaged tensors of one dtype are updated together (one multi-tensor lerp), mixed-dtype and
    // strided pairs one by one: every path must give the closed form.
    const c10::Device device(baton::test::test_device());
    INFO("device " << device.str());
    for (auto dtype : {at::kFloat, at::kDouble}) {
      INFO("dtype " << c10::toString(dtype));
      Net net(dtype);
      net.to(device);
      set_all(net, 0);
      baton::EmaOptions options;
      options.smoothing = 0.9;
      baton::ExponentialMovingAverage ema(net, options);
      run_updates(ema, net, 7);
      const double tolerance = dtype == at::kFloat ? 5e-6 : 1e-12;
      CHECK(ema.get("block.weight").device().type() == device.type());
      check_closed_form(ema.get("block.weight"), 7, 0.9, dtype, tolerance);
      check_closed_form(ema.get("head"), 7, 0.9, dtype, tolerance);
      check_closed_form(ema.get("running_mean"), 7, 0.9, dtype, tolerance);
      CHECK(ema.get("num_batches_tracked").item<std::int64_t>() == 71);
    }
    struct Mixed : torch::nn::Module {
      Mixed() {
        strided = register_parameter("strided", at::zeros({4, 3}).t());
        low = register_parameter("low", at::zeros({6}, at::kBFloat16));
        plain = register_parameter("plain", at::zeros({5}));
      }
      at::Tensor strided, low, plain;
    } mixed;
    mixed.to(device);
    REQUIRE_FALSE(mixed.strided.is_contiguous());
    for (const auto& p : mixed.parameters()) set_weights(p, 0);
    baton::EmaOptions options;
    options.smoothing = 0.6;
    options.float32 = true;
    baton::ExponentialMovingAverage ema(mixed, options);
    for (int j = 1; j <= 4; ++j) {
      for (const auto& p : mixed.parameters()) set_weights(p, j);
      ema.update(mixed);
    }
    check_closed_form(ema.get("strided"), 4, 0.6, at::kFloat, 5e-6);
    check_closed_form(ema.get("low"), 4, 0.6, at::kBFloat16, 5e-6);
    CHECK((ema.get("low").scalar_type() == at::kFloat));
    check_closed_form(ema.get("plain"), 4, 0.6, at::kFloat, 5e-6);
  }

  TEST_CASE("a large model through the class: every tensor updated, same as a per-element reference") {
    struct Big : torch::nn::Module {
      Big() {
        for (int i = 0; i < 12; ++i) register_parameter("p" + std::to_string(i), at::randn({1000 + 37 * i, 100}));
      }
    } net;
    baton::ExponentialMovingAverage ema(net);
    std::vector<at::Tensor> before;
    for (const auto& p : net.parameters()) {
      before.push_back(p.detach().clone());
      at::NoGradGuard no_grad;
      p.mul_(-2).add_(1);
    }
    ema.update(net, 0.999);
    const float a = static_cast<float>(1.0 - 0.999);
    std::size_t t = 0;
    for (const auto& item : net.named_parameters()) {
      const at::Tensor e0 = before[t++];
      const at::Tensor got = ema.get(item.key());
      const float* e = e0.data_ptr<float>();
      const float* w = item.value().data_ptr<float>();
      const float* g = got.data_ptr<float>();
      bool same = true;
      for (std::int64_t i = 0; i < got.numel(); ++i) same = same && g[i] == e[i] + a * (w[i] - e[i]);
      CHECK(same);
    }
  }
}
