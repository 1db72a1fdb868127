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
#include "error_text.h"

using baton::test::error_text;

namespace {

// A two-level model: dotted names, parameters, a floating buffer and an integer buffer (like BatchNorm's).
// Module::to(dtype) in C++ converts integer buffers too (Python's does not), so models are built in their dtype.
struct Block : torch::nn::Module {
  explicit Block(at::ScalarType dtype = at::kFloat) {
    weight = register_parameter("weight", at::zeros({3, 4}, dtype));
    bias = register_parameter("bias", at::zeros({4}, dtype));
  }
  at::Tensor weight, bias;
};

struct Net : torch::nn::Module {
  explicit Net(at::ScalarType dtype = at::kFloat) {
    block = register_module("block", std::make_shared<Block>(dtype));
    head = register_parameter("head", at::zeros({5}, dtype));
    running_mean = register_buffer("running_mean", at::zeros({4}, dtype));
    num_batches_tracked = register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
  }
  std::shared_ptr<Block> block;
  at::Tensor head, running_mean, num_batches_tracked;
};

std::vector<double> values(const at::Tensor& t) {
  at::Tensor d = t.detach().to(at::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// Element i of the weights at step j, rounded to the tensor's dtype (the EMA sees the rounded value).
double weight_value(std::size_t i, int step, at::ScalarType dtype) {
  const double exact = std::sin(0.37 * static_cast<double>(i) + 1.3 * step) + 0.25 * step;
  return values(at::full({}, exact, at::kDouble).to(dtype))[0];
}

void set_weights(const at::Tensor& t, int step) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = weight_value(i, step, t.scalar_type());
  at::NoGradGuard no_grad;
  at::Tensor source = at::from_blob(v.data(), t.sizes(), at::kDouble).to(t.scalar_type());
  t.copy_(source);
}

void set_all(Net& net, int step) {
  for (const auto& p : net.named_parameters()) set_weights(p.value(), step);
  set_weights(net.running_mean, step);
  net.num_batches_tracked.fill_(step * 10 + 1);
}

// ema_k = s^k w0 + (1 - s) sum_{j=1..k} s^(k-j) w_j, in double.
double closed_form(std::size_t i, int k, double s, at::ScalarType dtype) {
  double sum = std::pow(s, k) * weight_value(i, 0, dtype);
  for (int j = 1; j <= k; ++j) sum += (1 - s) * std::pow(s, k - j) * weight_value(i, j, dtype);
  return sum;
}

void check_closed_form(const at::Tensor& ema, int k, double s, at::ScalarType weight_dtype, double tolerance) {
  const auto got = values(ema);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::abs(got[i] - closed_form(i, k, s, weight_dtype)) <= tolerance);
  }
}

void check_equal_to_weights(const at::Tensor& ema, int step, at::ScalarType dtype) {
  const auto got = values(ema);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == weight_value(i, step, dtype));
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::vector<at::Tensor> snapshot(const torch::nn::Module& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.named_parameters()) out.push_back(p.value().detach().clone());
  for (const auto& b : model.named_buffers()) out.push_back(b.value().detach().clone());
  return out;
}

bool same_as(const torch::nn::Module& model, const std::vector<at::Tensor>& saved) {
  auto now = snapshot(model);
  if (now.size() != saved.size()) return false;
  for (std::size_t i = 0; i < now.size(); ++i)
    if (!bitwise_equal(now[i], saved[i])) return false;
  return true;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Runs k updates over the weight sequence of set_all.
void run_updates(baton::ExponentialMovingAverage& ema, Net& net, int k) {
  for (int j = 1; j <= k; ++j) {
    set_all(net, j);
    ema.update(net);
  }
}

}  // namespace

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

  TEST_CASE("the parallel kernel over > 1M elements equals a single-threaded evaluation bit for bit") {
    using baton::ema_kernel::Element;
    const std::vector<std::int64_t> sizes = {300001, 524288, 77, 400000, 1, 65536 * 3 + 5};
    std::vector<std::vector<float>> ema32, w32;
    std::vector<std::vector<float>> ema_bf;
    std::vector<std::vector<std::uint16_t>> w_bf;
    std::vector<double> ema64(250000), w64(250000);
    std::vector<std::int64_t> counters(1000), counters_src(1000);
    std::vector<baton::ema_kernel::Task> tasks;
    std::int64_t total = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      const auto n = static_cast<std::size_t>(sizes[t]);
      ema32.emplace_back(n);
      w32.emplace_back(n);
      ema_bf.emplace_back(n);
      w_bf.emplace_back(n);
      for (std::size_t i = 0; i < n; ++i) {
        ema32[t][i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i) + static_cast<double>(t)));
        w32[t][i] = static_cast<float>(std::cos(0.003 * static_cast<double>(i)) * 3);
        ema_bf[t][i] = ema32[t][i];
        w_bf[t][i] = c10::BFloat16(w32[t][i]).x;
      }
      total += 2 * sizes[t];
    }
    for (std::size_t i = 0; i < ema64.size(); ++i) {
      ema64[i] = std::sin(static_cast<double>(i));
      w64[i] = std::cos(static_cast<double>(i));
    }
    for (std::size_t i = 0; i < counters.size(); ++i) counters_src[i] = static_cast<std::int64_t>(i * 7);
    REQUIRE(total > 1000000);

    const double s = 0.9993;
    const float a = static_cast<float>(1.0 - s);
    auto expected32 = ema32;
    auto expected_bf = ema_bf;
    auto expected64 = ema64;
    for (std::size_t t = 0; t < sizes.size(); ++t)
      for (std::size_t i = 0; i < expected32[t].size(); ++i) {
        expected32[t][i] = expected32[t][i] + a * (w32[t][i] - expected32[t][i]);
        const float w = static_cast<float>(c10::BFloat16(w_bf[t][i], c10::BFloat16::from_bits()));
        expected_bf[t][i] = expected_bf[t][i] + a * (w - expected_bf[t][i]);
      }
    for (std::size_t i = 0; i < expected64.size(); ++i)
      expected64[i] = expected64[i] + (1.0 - s) * (w64[i] - expected64[i]);

    auto build = [&] {
      std::vector<baton::ema_kernel::Task> out;
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        out.push_back({ema32[t].data(), w32[t].data(), sizes[t], Element::f32, Element::f32, false});
        out.push_back({ema_bf[t].data(), w_bf[t].data(), sizes[t], Element::f32, Element::bf16, false});
      }
      out.push_back({ema64.data(), w64.data(), static_cast<std::int64_t>(ema64.size()), Element::f64, Element::f64,
                     false});
      out.push_back({counters.data(), counters_src.data(), static_cast<std::int64_t>(counters.size() * 8),
                     Element::bytes, Element::bytes, true});
      return out;
    };
    baton::ema_kernel::Plan plan(build());
    CHECK(plan.chunks() > 16);
    const int threads = plan.run(s);
    CHECK(threads == baton::ema_kernel::default_threads());
    // LibTorch lowers OpenMP's default to half the processors; the kernel must still use every one of them.
    if (omp_get_num_procs() >= 2 && !std::getenv("OMP_NUM_THREADS")) CHECK(threads == omp_get_num_procs());

    CHECK((ema32 == expected32));
    CHECK((ema_bf == expected_bf));
    CHECK((ema64 == expected64));
    CHECK((counters == counters_src));

    // A second step with one thread and with several from the same state agrees bit for bit as well.
    auto again32 = ema32;
    auto again64 = ema64;
    CHECK(plan.run(s, 1) == 1);
    auto one_thread32 = ema32;
    auto one_thread64 = ema64;
    ema32 = again32;
    ema64 = again64;
    plan.run(s, 3);
    CHECK((ema32 == one_thread32));
    CHECK((ema64 == one_thread64));
  }

  TEST_CASE("the kernel's fp16 conversions agree with c10::Half bit for bit (all halves; floats of every range)") {
    using baton::ema_kernel::Element;
    std::vector<std::uint16_t> halves(65536);
    for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(i);
    std::vector<float> widened(halves.size());
    baton::ema_kernel::Plan({{widened.data(), halves.data(), 65536, Element::f32, Element::f16, true}}).run(0.5);
    int wrong = 0;
    for (std::size_t i = 0; i < halves.size(); ++i) {
      const float expected = static_cast<float>(c10::Half(halves[i], c10::Half::from_bits()));
      const bool same = std::isnan(expected) ? std::isnan(widened[i]) : std::memcmp(&expected, &widened[i], 4) == 0;
      wrong += same ? 0 : 1;
    }
    CHECK(wrong == 0);

    // Every half value, the midpoints between neighbours (ties round to even), and a sweep of float bit patterns
    // covering subnormal, overflowing, infinite and NaN inputs.
    std::vector<float> floats;
    for (std::uint32_t h = 0; h < 0x7C00; ++h) {
      const float a = static_cast<float>(c10::Half(static_cast<std::uint16_t>(h), c10::Half::from_bits()));
      const float b = static_cast<float>(c10::Half(static_cast<std::uint16_t>(h + 1), c10::Half::from_bits()));
      floats.push_back(a);
      floats.push_back(-(a + (b - a) / 2));
    }
    for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 40009) {
      float f;
      const auto b32 = static_cast<std::uint32_t>(bits);
      std::memcpy(&f, &b32, 4);
      floats.push_back(f);
    }
    std::vector<std::uint16_t> narrowed(floats.size());
    baton::ema_kernel::Plan({{narrowed.data(), floats.data(), static_cast<std::int64_t>(floats.size()), Element::f16,
                              Element::f32, true}})
        .run(0.5);
    wrong = 0;
    for (std::size_t i = 0; i < floats.size(); ++i) wrong += narrowed[i] == c10::Half(floats[i]).x ? 0 : 1;
    CHECK(wrong == 0);
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
