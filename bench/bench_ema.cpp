// EMA update speed on a transformer-like parameter list (~200 tensors, ~100 M parameters), against
//   (a) an in-place streaming `a += b` over two flat fp32 buffers of the same size: the machine's read-read-write
//       bandwidth, the ceiling for an update that reads the EMA and the weights and writes the EMA;
//   (b) the per-tensor LibTorch loop the Python peers use, ema.mul_(s).add_(w, 1 - s);
//   (c) at::_foreach_mul_ + at::_foreach_add_ over the tensor lists;
//   (d) baton's update: fp32 weights, and bf16 weights into an fp32 EMA (against the per-tensor LibTorch loop on
//       the same task, ema.mul_(s).add_(w.to(float32), 1 - s)).
// Every variant runs kRepeats times, interleaved so background load hits all alike; the fastest run counts.
// LibTorch and the stream loop are given as many threads as baton (one per core).
// Last line: RESULT ema_vs_stream=<d fp32 GB/s / a GB/s> ema_vs_per_tensor=<time b / time d fp32>
//            bf16_vs_per_tensor=<time of the LibTorch bf16 loop / time of baton's bf16 update>
//
//   bench_ema --device cuda    the same model on a GPU, where (a) is a device-to-device copy of the EMA's bytes
//                              (dst.copy_(src): read and write, the ceiling of a streaming kernel there) and each
//                              timed run ends with a device synchronisation. Last line:
//                              (e) is the update of a sharded run's EMA: one lerp_ over a flat buffer (layout.h).
//   RESULT device=cuda ema_gbps=<d fp32> copy_gbps=<a> shard_gbps=<e> ema_vs_copy=<d / a> shard_vs_copy=<e / a>
//          ema_vs_per_tensor=... bf16_vs_per_tensor=...
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/empty.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>

#include "baton/ema.h"

namespace {

constexpr int kRepeats = 21;
constexpr int kBlocks = 24;
constexpr std::int64_t kWidth = 576;
constexpr std::int64_t kVocab = 8192;
constexpr std::int64_t kContext = 1024;
constexpr double kSmoothing = 0.999;

using Clock = std::chrono::steady_clock;

// 24 blocks of (q, k, v, o: d x d; MLP: d x 4d and 4d x d; two norm weights), token and position embeddings and a
// final norm: 195 tensors.
struct Transformer : torch::nn::Module {
  explicit Transformer(at::ScalarType dtype) {
    auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
      register_parameter(name, at::empty(shape, at::TensorOptions().dtype(dtype)).uniform_(-0.05, 0.05));
    };
    add("tok_emb", {kVocab, kWidth});
    add("pos_emb", {kContext, kWidth});
    for (int b = 0; b < kBlocks; ++b) {
      // One flat module: parameter names cannot contain dots.
      const std::string p = "blocks_" + std::to_string(b) + "_";
      for (const char* m : {"q", "k", "v", "o"}) add(p + "attn_" + m + "_weight", {kWidth, kWidth});
      add(p + "mlp_fc1_weight", {4 * kWidth, kWidth});
      add(p + "mlp_fc2_weight", {kWidth, 4 * kWidth});
      add(p + "ln1_weight", {kWidth});
      add(p + "ln2_weight", {kWidth});
    }
    add("ln_f_weight", {kWidth});
  }
};

std::int64_t count_elements(const std::vector<at::Tensor>& tensors) {
  std::int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

// Waits for the device's queued work: a GPU run is timed to its end, not to its launch. Nothing to wait for on the CPU.
std::function<void()> wait_for_device = [] {};

double seconds(const std::function<void()>& f) {
  const auto start = Clock::now();
  f();
  wait_for_device();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Series {
  Series(std::string name_, double bytes_per_element_, std::function<void()> run_)
      : name(std::move(name_)), bytes_per_element(bytes_per_element_), run(std::move(run_)) {}
  std::string name;
  double bytes_per_element;
  std::function<void()> run;
  std::vector<double> times;
  double best() const { return *std::min_element(times.begin(), times.end()); }
};

// One untimed warm-up (page faults, caches), then kRepeats interleaved rounds.
void measure(std::vector<Series>& series, std::int64_t elements) {
  for (auto& s : series) s.run();
  for (int r = 0; r < kRepeats; ++r)
    for (auto& s : series) s.times.push_back(seconds(s.run));
  for (const auto& s : series) {
    std::printf("%-44s", s.name.c_str());
    for (double t : s.times) std::printf(" %7.2f", t * 1e3);
    const double best = s.best();
    std::printf("  ms | best %7.2f ms  %6.2f GB/s  %6.2f Gelem/s\n", best * 1e3,
                s.bytes_per_element * static_cast<double>(elements) / best / 1e9,
                static_cast<double>(elements) / best / 1e9);
  }
}

std::vector<at::Tensor> clones_as(const std::vector<at::Tensor>& tensors, at::ScalarType dtype) {
  std::vector<at::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().to(dtype, /*non_blocking=*/false, /*copy=*/true));
  return out;
}

void stream_add(float* a, const float* b, std::int64_t n, int threads) {
#pragma omp parallel for simd schedule(static) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) a[i] += b[i];
}

// bf16 weights into an fp32 EMA on `device`: LibTorch's per-tensor loop against baton's update (best times).
std::pair<double, double> measure_bf16(const c10::Device device, std::int64_t elements) {
  at::NoGradGuard no_grad;
  const double s = kSmoothing;
  Transformer model(at::kBFloat16);
  model.to(device);
  const std::vector<at::Tensor> weights = model.parameters();
  std::vector<at::Tensor> per_tensor = clones_as(weights, at::kFloat);
  baton::EmaOptions options;
  options.smoothing = s;
  options.float32 = true;
  baton::ExponentialMovingAverage ema(model, options);
  std::printf("bf16 weights -> fp32 EMA; GB/s counts 10 bytes per element (read w bf16, read and write ema)\n");
  std::vector<Series> series{
      {"per-tensor ema.mul_(s).add_(w.to(f32), 1-s)", 10,
       [&] {
         for (std::size_t i = 0; i < weights.size(); ++i)
           per_tensor[i].mul_(s).add_(weights[i].to(at::kFloat), 1 - s);
       }},
      {"(d) baton update bf16 -> fp32", 10, [&] { ema.update(model); }},
  };
  measure(series, elements);
  return {series[0].best(), series[1].best()};
}

// The fp32 and bf16 runs on a device other than the CPU: (a) is a device-to-device copy of the same bytes.
int run_on_device(const c10::Device device) {
  if (device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_ema: --device %s, but this LibTorch sees no CUDA device\n", device.str().c_str());
    return 1;
  }
  if (device.is_cuda()) wait_for_device = [] { torch::cuda::synchronize(); };
  at::NoGradGuard no_grad;
  const double s = kSmoothing;
  double t_copy = 0, t_per_tensor = 0, t_baton32 = 0, t_shard = 0;
  std::int64_t elements = 0;
  {
    Transformer model(at::kFloat);
    model.to(device);
    const std::vector<at::Tensor> weights = model.parameters();
    elements = count_elements(weights);
    std::printf("model: %zu tensors, %lld parameters (%.1f M) on %s\n", weights.size(),
                static_cast<long long>(elements), static_cast<double>(elements) / 1e6, device.str().c_str());
    std::printf("times per repeat in ms; GB/s counts 12 bytes per element for the updates (read ema, read w, "
                "write ema), 8 for the copy (read, write)\n");
    const auto on_device = at::TensorOptions().dtype(at::kFloat).device(device);
    at::Tensor copy_src = at::empty({elements}, on_device).uniform_(-1, 1), copy_dst = at::empty({elements}, on_device);
    std::vector<at::Tensor> per_tensor = clones_as(weights, at::kFloat);
    baton::EmaOptions options;
    options.smoothing = s;
    baton::ExponentialMovingAverage ema(model, options);
    // What the EMA of a sharded run updates: the rank's shard of every tensor in one flat buffer per dtype, beside
    // the optimizer's flat shard of the weights (sharding/layout.h), here as large as the whole model.
    at::Tensor shard_weights = at::empty({elements}, on_device).uniform_(-1, 1), shard_ema = shard_weights.clone();
    std::vector<Series> series{
        {"(a) device-to-device copy of the EMA's bytes", 8, [&] { copy_dst.copy_(copy_src); }},
        {"(b) per-tensor ema.mul_(s).add_(w, 1-s)", 12,
         [&] {
           for (std::size_t i = 0; i < weights.size(); ++i) per_tensor[i].mul_(s).add_(weights[i], 1 - s);
         }},
        {"(d) baton update fp32", 12, [&] { ema.update(model); }},
        {"(e) one lerp_ over flat buffers (a shard)", 12, [&] { shard_ema.lerp_(shard_weights, 1 - s); }},
    };
    measure(series, elements);
    t_copy = series[0].best();
    t_per_tensor = series[1].best();
    t_baton32 = series[2].best();
    t_shard = series[3].best();
  }
  const auto [t_torch16, t_baton16] = measure_bf16(device, elements);
  const double ema_gbps = 12.0 * static_cast<double>(elements) / t_baton32 / 1e9;
  const double copy_gbps = 8.0 * static_cast<double>(elements) / t_copy / 1e9;
  const double shard_gbps = 12.0 * static_cast<double>(elements) / t_shard / 1e9;
  std::printf("RESULT device=%s ema_gbps=%.1f copy_gbps=%.1f shard_gbps=%.1f ema_vs_copy=%.3f shard_vs_copy=%.3f "
              "ema_vs_per_tensor=%.3f bf16_vs_per_tensor=%.3f\n",
              device.str().c_str(), ema_gbps, copy_gbps, shard_gbps, ema_gbps / copy_gbps, shard_gbps / copy_gbps,
              t_per_tensor / t_baton32, t_torch16 / t_baton16);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      device_name = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_ema [--device cpu|cuda|cuda:N]\n");
      return 2;
    }
  }
  std::optional<c10::Device> device;
  try {
    device = c10::Device(device_name);
  } catch (const std::exception&) {
    std::fprintf(stderr, "bench_ema: unknown device '%s' (expected cpu, cuda or cuda:N)\n", device_name.c_str());
    return 2;
  }
  if (!device->is_cpu()) return run_on_device(*device);

  const int threads = omp_get_num_procs();
  at::set_num_threads(threads);
  at::NoGradGuard no_grad;
  const double s = kSmoothing;

  // fp32: stream reference, per-tensor loop, foreach, baton.
  double t_stream = 0, t_per_tensor = 0, t_baton32 = 0;
  std::int64_t elements = 0;
  {
    Transformer model(at::kFloat);
    const std::vector<at::Tensor> weights = model.parameters();
    elements = count_elements(weights);
    std::printf("model: %zu tensors, %lld parameters (%.1f M); %d threads (baton, LibTorch, stream)\n",
                weights.size(), static_cast<long long>(elements), static_cast<double>(elements) / 1e6, threads);
    std::printf("times per repeat in ms; GB/s counts 12 bytes per element for fp32 (read ema, read w, write ema)\n");

    at::Tensor flat_a = at::empty({elements}).uniform_(-1, 1), flat_b = at::empty({elements}).uniform_(-1e-3, 1e-3);
    std::vector<at::Tensor> per_tensor = clones_as(weights, at::kFloat);
    std::vector<at::Tensor> foreach_ema = clones_as(weights, at::kFloat);
    baton::EmaOptions options;
    options.smoothing = s;
    baton::ExponentialMovingAverage ema(model, options);

    std::vector<Series> series{
        {"(a) stream a += b (OpenMP, flat)", 12,
         [&] { stream_add(flat_a.data_ptr<float>(), flat_b.data_ptr<float>(), elements, threads); }},
        {"(b) per-tensor ema.mul_(s).add_(w, 1-s)", 12,
         [&] {
           for (std::size_t i = 0; i < weights.size(); ++i) per_tensor[i].mul_(s).add_(weights[i], 1 - s);
         }},
        {"(c) _foreach_mul_ + _foreach_add_", 12,
         [&] {
           at::_foreach_mul_(foreach_ema, s);
           at::_foreach_add_(foreach_ema, weights, 1 - s);
         }},
        {"(d) baton update fp32", 12, [&] { ema.update(model); }},
    };
    measure(series, elements);
    t_stream = series[0].best();
    t_per_tensor = series[1].best();
    t_baton32 = series[3].best();
  }

  // bf16 weights, fp32 EMA.
  const auto [t_torch16, t_baton16] = measure_bf16(*device, elements);

  std::printf("RESULT ema_vs_stream=%.3f ema_vs_per_tensor=%.3f bf16_vs_per_tensor=%.3f\n", t_stream / t_baton32,
              t_per_tensor / t_baton32, t_torch16 / t_baton16);
  return 0;
}
