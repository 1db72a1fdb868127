// Mixed precision: "auto" and what it reads of the machine; the autocast scope (on inside, the previous state back
// outside); the loss scaler's state machine against hand-worked sequences; and a trainer run under amp_bf16: the
// forward pass in bfloat16, the weights, the gradients and the loss in float32, close to the same run in fp32.
#include "baton_test.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>

#include "small_trainer.h"
#include "trainer/loss_scaler.h"
#include "trainer/precision.h"
#include "error_text.h"

using baton::test::error_text;

using baton::AutocastScope;
using baton::LossScaler;
using baton::Precision;

namespace {

at::Tensor product() { return at::matmul(at::ones({2, 3}), at::ones({3, 2})); }

// Records the dtypes the step's tensors have where plugins see them.
struct DtypeRecorder : baton::Callback {
  std::vector<at::ScalarType> outputs, losses, weights, grads;
  void after_forward(baton::State& s, baton::Logger&) override { outputs.push_back(s.outputs.main().scalar_type()); }
  void after_loss(baton::State& s, baton::Logger&) override { losses.push_back(s.loss.scalar_type()); }
  void after_train_batch(baton::State& s, baton::Logger&) override {
    for (const auto& p : s.facts.model()->parameters()) {
      weights.push_back(p.scalar_type());
      if (p.grad().defined()) grads.push_back(p.grad().scalar_type());
    }
  }
};

bool all_are(const std::vector<at::ScalarType>& types, at::ScalarType type) {
  if (types.empty()) return false;
  for (auto t : types)
    if (t != type) return false;
  return true;
}

// A parameter with a gradient of the given values.
at::Tensor with_grad(std::vector<float> values) {
  at::Tensor p = at::zeros({static_cast<std::int64_t>(values.size())});
  p.mutable_grad() = at::tensor(values);
  return p;
}

}  // namespace

TEST_CASE("precision names parse, and amp_fp16 is refused on the CPU") {
  CHECK(baton::precision_from_name("fp32") == Precision::fp32);
  CHECK(baton::precision_from_name("amp_bf16") == Precision::amp_bf16);
  CHECK(baton::precision_from_name("amp_fp16") == Precision::amp_fp16);
  CHECK_FALSE(baton::precision_from_name("bf16").has_value());
  CHECK(std::string(baton::precision_name(Precision::amp_bf16)) == "amp_bf16");

  auto options = baton::test::quiet_options();
  options.precision = Precision::amp_fp16;
  CHECK(error_text([&] { baton::test::make_trainer(options, "mlp"); }).find("amp_fp16 needs a CUDA device") !=
        std::string::npos);
}

TEST_CASE("the autocast scope runs matrix products in bfloat16 inside and restores the previous state after") {
  CHECK((product().scalar_type() == at::kFloat));
  {
    AutocastScope scope(Precision::amp_bf16, c10::DeviceType::CPU);
    CHECK((product().scalar_type() == at::kBFloat16));
    {
      AutocastScope none(Precision::fp32, c10::DeviceType::CPU);  // fp32 changes nothing: still on
      CHECK((product().scalar_type() == at::kBFloat16));
    }
    CHECK((product().scalar_type() == at::kBFloat16));
  }
  CHECK((product().scalar_type() == at::kFloat));
  // The exact value survives: 3 is exact in bfloat16.
  {
    AutocastScope scope(Precision::amp_bf16, c10::DeviceType::CPU);
    CHECK(product().to(at::kFloat)[0][0].item<float>() == 3.0f);
  }
}

TEST_CASE("the loss scaler scales, unscales, skips on overflow, backs off and grows as worked by hand") {
  baton::LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  LossScaler scaler(o);
  CHECK(scaler.scale(at::full({}, 0.5)).item<double>() == 512.0);

  // Gradients of the scaled loss come back divided by the scale (powers of two: exact).
  at::Tensor p = with_grad({1024.0f, -2048.0f, 0.0f});
  CHECK_FALSE(scaler.unscale({p, at::zeros({2})}));  // a parameter without a gradient is skipped
  CHECK(p.grad()[0].item<float>() == 1.0f);
  CHECK(p.grad()[1].item<float>() == -2.0f);

  // Two good steps, then an overflow: the scale halves and the count of good steps restarts.
  scaler.update(false);
  scaler.update(false);
  CHECK(scaler.good_steps() == 2);
  CHECK(scaler.unscale({with_grad({1.0f, std::numeric_limits<float>::infinity()})}));
  CHECK(scaler.unscale({with_grad({std::nanf("")}), with_grad({1.0f})}));
  scaler.update(true);
  CHECK(scaler.scale_value() == 512.0);
  CHECK(scaler.good_steps() == 0);
  CHECK(scaler.skipped_steps() == 1);
  // Three good steps in a row (growth_interval): the scale doubles once, and the count restarts.
  for (int i = 0; i < 3; ++i) scaler.update(false);
  CHECK(scaler.scale_value() == 1024.0);
  CHECK(scaler.good_steps() == 0);
  scaler.update(false);

  // Its state round-trips through a StateDict; a dict without it leaves a scaler unchanged.
  baton::StateDict saved;
  scaler.state_dict(saved);
  LossScaler restored(o);
  restored.load_state_dict(saved);
  CHECK(restored.scale_value() == 1024.0);
  CHECK(restored.good_steps() == 1);
  CHECK(restored.skipped_steps() == 1);
  LossScaler untouched(o);
  untouched.load_state_dict(baton::StateDict());
  CHECK(untouched.scale_value() == 1024.0);

  CHECK_THROWS_AS(LossScaler(baton::LossScalerOptions{1024, 1.0, 0.5, 10}), baton::Error);
}

TEST_CASE("amp_bf16 runs the forward pass in bfloat16 and keeps weights, gradients and loss in float32") {
  // On the test device: autocast's switches are per device type, and a CUDA run must flip CUDA's.
  auto fp32_options = baton::test::quiet_options();
  fp32_options.device = baton::test::test_device();
  MESSAGE("device " << fp32_options.device);
  auto fp32 = baton::test::make_trainer(fp32_options, "convnet");
  auto fp32_recorder = std::make_shared<DtypeRecorder>();
  fp32->add_plugin("dtypes", fp32_recorder);
  auto fp32_result = fp32->fit();

  auto amp_options = fp32_options;
  amp_options.precision = Precision::amp_bf16;
  auto amp = baton::test::make_trainer(amp_options, "convnet");
  auto recorder = std::make_shared<DtypeRecorder>();
  amp->add_plugin("dtypes", recorder);
  auto amp_result = amp->fit();

  CHECK(all_are(fp32_recorder->outputs, at::kFloat));
  CHECK(all_are(recorder->outputs, at::kBFloat16));  // the logits come out of a bf16 Linear
  CHECK(all_are(recorder->losses, at::kFloat));      // cross entropy runs in float32 under autocast
  CHECK(all_are(recorder->weights, at::kFloat));
  CHECK(all_are(recorder->grads, at::kFloat));
  // Same data, same initial weights: the two runs learn alike (bf16 keeps 8 bits of mantissa, so not bitwise).
  REQUIRE(fp32_result.evals.size() == 2);
  REQUIRE(amp_result.evals.size() == 2);
  const double fp32_loss = fp32_result.evals.back().metrics.at("eval/loss");
  const double amp_loss = amp_result.evals.back().metrics.at("eval/loss");
  CHECK(std::isfinite(amp_loss));
  CHECK(std::abs(amp_loss - fp32_loss) < 0.1 * fp32_loss + 0.02);
}

// Excerpts of /proc/cpuinfo as the kernel writes them (one core's lines; every core lists the same flags).
namespace {
const char* const kEpycNoBf16 =
    "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr avx2 avx512f avx512bw avx512_vnni\n";
const char* const kZen4 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n";
const char* const kSapphireRapids = "flags\t\t: fpu avx512f amx_tile amx_int8 amx_bf16 avx512_bf16\n";
const char* const kNeoverseV1 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve bf16 i8mm\n";
const char* const kNeoverseN1 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2\n";
// A word that merely contains the flag's name is not the flag.
const char* const kLookalike = "flags\t\t: fpu avx512_bf16x not_amx_bf16\n";

// This machine's answer, read independently of cpu_bf16_support: a whole-word search of the flags lines.
bool this_cpu_has_native_bf16() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0 && line.rfind("Features", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;)
      if (w == "avx512_bf16" || w == "amx_bf16" || w == "bf16") return true;
    return false;
  }
  return false;
}
}  // namespace

TEST_CASE("bfloat16 support is read from /proc/cpuinfo's flags (x86) or Features (Arm), word by word") {
  using baton::cpu_bf16_support;
  CHECK_FALSE(cpu_bf16_support(kEpycNoBf16).native);
  CHECK(cpu_bf16_support(kEpycNoBf16).evidence == "no avx512_bf16 or amx_bf16 in /proc/cpuinfo");
  CHECK(cpu_bf16_support(kZen4).native);
  CHECK(cpu_bf16_support(kZen4).evidence == "avx512_bf16 in /proc/cpuinfo");
  CHECK(cpu_bf16_support(kSapphireRapids).native);
  CHECK(cpu_bf16_support(kSapphireRapids).evidence == "amx_bf16 in /proc/cpuinfo");
  CHECK(cpu_bf16_support(kNeoverseV1).native);
  CHECK_FALSE(cpu_bf16_support(kNeoverseN1).native);
  CHECK_FALSE(cpu_bf16_support(kLookalike).native);
  CHECK_FALSE(cpu_bf16_support("").native);
}

TEST_CASE("\"auto\" chooses amp_bf16 where bfloat16 is native, fp32 elsewhere; explicit choices stay, with a warning") {
  using baton::choose_precision;
  const auto cpu = c10::DeviceType::CPU;
  const baton::Bf16Support native{true, "avx512_bf16 in /proc/cpuinfo"};
  const baton::Bf16Support emulated{false, "no avx512_bf16 or amx_bf16 in /proc/cpuinfo"};
  std::string warning = "stale";

  auto chosen = choose_precision(Precision::automatic, cpu, native, false, warning);
  CHECK(chosen.precision == Precision::amp_bf16);
  CHECK(chosen.why == "auto: this CPU computes bfloat16 natively (avx512_bf16 in /proc/cpuinfo)");
  CHECK(warning.empty());

  chosen = choose_precision(Precision::automatic, cpu, emulated, false, warning);
  CHECK(chosen.precision == Precision::fp32);
  CHECK(chosen.why == "auto: this CPU would emulate bfloat16, slower than fp32 (no avx512_bf16 or amx_bf16 in "
                      "/proc/cpuinfo)");

  // A model's own training step trains in fp32 only, so "auto" never asks it for more.
  CHECK(choose_precision(Precision::automatic, cpu, native, true, warning).precision == Precision::fp32);
  CHECK(choose_precision(Precision::automatic, c10::DeviceType::CUDA, {true, "capability 9.0"}, false, warning)
            .precision == Precision::amp_bf16);

  chosen = choose_precision(Precision::amp_bf16, cpu, emulated, false, warning);
  CHECK(chosen.precision == Precision::amp_bf16);
  CHECK(warning.find("emulates bfloat16") != std::string::npos);
  CHECK(warning.find("precision = \"auto\" chooses fp32 here") != std::string::npos);
  chosen = choose_precision(Precision::amp_bf16, cpu, native, false, warning);
  CHECK(chosen.why == "as configured; this CPU computes bfloat16 natively (avx512_bf16 in /proc/cpuinfo)");
  CHECK(warning.empty());
  CHECK(choose_precision(Precision::fp32, cpu, baton::Bf16Support{}, false, warning).why == "as configured");
}

TEST_CASE("a trainer left at the default precision (\"auto\") trains in what this machine's CPU computes natively") {
  CHECK(baton::TrainerOptions{}.precision == Precision::automatic);
  CHECK(baton::precision_from_name("auto") == Precision::automatic);
  CHECK(std::string(baton::precision_name(Precision::automatic)) == "auto");
  auto options = baton::test::quiet_options();
  options.precision = Precision::automatic;
  auto trainer = baton::test::make_trainer(options, "mlp");
  const bool native = this_cpu_has_native_bf16();
  MESSAGE("this CPU: " << trainer->precision().why);
  CHECK(trainer->precision().precision == (native ? Precision::amp_bf16 : Precision::fp32));
  CHECK(trainer->precision().why.rfind("auto: this CPU ", 0) == 0);

  // amp_bf16 asked of a CPU that emulates it: the run says so among its warnings.
  options.precision = Precision::amp_bf16;
  auto amp = baton::test::make_trainer(options, "mlp");
  bool warned = false;
  for (const auto& w : amp->warnings()) warned = warned || w.find("emulates bfloat16") != std::string::npos;
  CHECK(warned == !native);
}
