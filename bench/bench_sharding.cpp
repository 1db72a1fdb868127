// Sharded data parallel's memory, traffic and speed, per rank, against the formulas of docs/distributed.md.
//
// A 26.0 M-parameter MLP (784 -> 1024, 24 hidden 1024 -> 1024 layers, -> 10; fp32) trained with Adam and the EMA,
// as the trainer trains it under each `[distributed] sharding` mode: the same calls it makes (Communicator::average
// or sharding::ShardedStep's reduce-scatter, in the backward as each bucket completes, and all-gather around the
// optimizer step; the EMA sharded over the ranks). Buckets of 4 MB (--bucket-mb), one hidden layer's weight: a
// collective's buffers are a bucket's size, so against a 104 MB model the 25 MB default would keep a quarter of
// the gradients in flight and the peak could not come near the formula.
// Each rank is its own process (this program started again with --rank), joined over loopback Gloo, so its peak
// resident memory is its own. For W = 1, 2, 4 and each mode, every rank reports:
//   state   bytes of the model state it holds after a step: parameters, gradients (the model's and the shard's),
//           the shard parameters, Adam's moments, the EMA; each storage counted once (zero1/zero2's shard
//           parameters are the rows of the model's own, zero1's shard gradients the rows of its whole gradients);
//   peak    the growth of its peak resident memory (VmHWM) from before the model was built to the end, less the
//           growth of its resident file pages (RssFile: LibTorch's code, shared by the ranks), with LibTorch's
//           CPU allocator as the trainer sets it (trainer.cpu_allocator, --cpu-allocator: caching by default);
//   tensors the peak of its live tensor storage over the same span (LibTorch's CPU allocator wrapped to count it):
//           the peak above less what the allocator keeps resident of memory already freed (the C library
//           kept 1.3-1.6 x; the cache keeps its blocks within this peak);
//   sent    bytes over the loopback interface per step (its counters, all ranks together, divided by W), from the
//           kernel, not from the code;
//   step    seconds per training step (forward, backward, reduce, Adam, gather, EMA), the median of the timed
//           steps, and rank 0's mean per phase.
// Printed beside each: the formula (Adam + EMA in fp32 = 20 bytes per parameter unsharded; zero1 (8 + 12/W)/20,
// zero2 (4 + 16/W)/20, zero3 (20/W)/20 of that between steps, each Linear a unit, and at its peak the largest unit's
// parameters and gradients besides (8 bytes each); the ring's 2 (W - 1)/W of the
// parameter bytes sent per step, 3 (W - 1)/W under zero3). The forward runs each part through baton::run_unit, as
// Sequential models do in the trainer, and the EMA follows zero3's rows as the ema plugin does.
// Last line: RESULT zero1_state_vs_formula=... zero2_state_vs_formula=... zero1_peak_vs_formula=...
//            zero2_peak_vs_formula=... zero1_tensor_peak_vs_formula=... zero2_tensor_peak_vs_formula=...
//            zero3_tensor_peak_vs_formula=...
//            sent_vs_ring=... zero1_step_vs_ddp=... zero2_step_vs_ddp=... zero3_state_vs_formula=...
//            zero3_peak_vs_formula=... zero3_sent_vs_ring=... zero3_step_vs_ddp=...   (at W = 2)
//   bench_sharding [--steps N] [--worlds 1,2,4] [--bucket-mb 4] [--cpu-allocator caching|compact|system] [--rounds 3]
// The step ratios at W = 2 are of each mode's median over `rounds` runs, the modes run alternately.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "baton/communicator.h"
#include "baton/ema.h"
#include "baton/model_tensors.h"
#include "baton/unit.h"
#include "memory/cpu_cache.h"
#include "sharding/zero.h"

extern char** environ;

namespace {

constexpr std::int64_t kBatch = 64;
const char* const kModes[] = {"none", "zero1", "zero2", "zero3"};

std::int64_t status_kib(const char* key) {  // a line of /proc/self/status, in KiB
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key)));
  return 0;
}

std::int64_t loopback_sent() {  // bytes transmitted on `lo` since boot
  std::ifstream in("/proc/net/dev");
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != "lo") continue;
    std::istringstream fields(line.substr(colon + 1));
    std::int64_t v[9] = {};
    for (auto& x : v) fields >> x;
    return v[8];  // receive: bytes packets errs drop fifo frame compressed multicast; then transmit bytes
  }
  return 0;
}

// Bytes of distinct storage: a view (a shard of the model's own parameter, a gradient in a flat buffer) adds
// nothing beyond the storage it lives in, counted once.
class StorageBytes {
 public:
  void add(const at::Tensor& t) {
    if (t.defined() && t.has_storage()) seen_.emplace(t.storage().data(), static_cast<std::int64_t>(t.storage().nbytes()));
  }
  std::int64_t total() const {
    std::int64_t sum = 0;
    for (const auto& item : seen_) sum += item.second;
    return sum;
  }

 private:
  std::map<const void*, std::int64_t> seen_;
};

torch::nn::Sequential make_model() {
  torch::nn::Sequential model(torch::nn::Linear(784, 1024), torch::nn::ReLU());
  for (int k = 0; k < 24; ++k) {
    model->push_back(torch::nn::Linear(1024, 1024));
    model->push_back(torch::nn::ReLU());
  }
  model->push_back(torch::nn::Linear(1024, 10));
  return model;
}

// Wraps LibTorch's CPU allocator to count the bytes of live tensor storage and their peak: what the rank's tensors
// need at most, apart from what the C library keeps resident after they are freed (VmHWM counts that too).
// LibTorch 1.13 declares allocate() const; from 2.3 it is not, and copy_data() is to be defined: both are given,
// and each version overrides the one it declares.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) const { return counted(n); }
  c10::DataPtr allocate(size_t n) { return counted(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
  std::int64_t live() const { return live_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  struct Block {
    c10::DataPtr inner;
    std::int64_t bytes;
    const CountingAllocator* owner;
  };
  static void release(void* context) {
    auto* block = static_cast<Block*>(context);
    block->owner->live_ -= block->bytes;
    delete block;
  }
  c10::DataPtr counted(size_t n) const {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* block = new Block{std::move(inner), static_cast<std::int64_t>(n), this};
    const std::int64_t now = live_ += block->bytes;
    std::int64_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
    return {data, block, &release, device};
  }
  c10::Allocator* base_;
  mutable std::atomic<std::int64_t> live_{0}, peak_{0};
};

// The median: a step that another process on the machine delayed moves it less than the mean (the ranks share
// two cores here).
double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// One rank's run: prints "rank R state=... peak=... sent=... step=..." on stdout.
int run_rank(int rank, int world, const std::string& mode, int port, int steps, std::int64_t bucket_bytes,
             const std::string& cpu_allocator) {
  const std::int64_t rss_before = status_kib("VmHWM:");
  const std::int64_t file_before = status_kib("RssFile:");
  baton::memory::use_cpu_allocator(cpu_allocator);  // as the trainer does during fit()
  static CountingAllocator counting(c10::GetCPUAllocator());
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  const std::int64_t live_before = counting.live();
  // Each rank's share of the cores, as `baton train` gives it (trainer.threads = 0: cores / LOCAL_WORLD_SIZE).
  const int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world);
  at::set_num_threads(threads);
  baton::DistributedEnv env;
  env.rank = rank;
  env.world_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  std::shared_ptr<baton::Communicator> comm;
  if (world > 1) comm = baton::Communicator::connect(env, baton::CommunicatorOptions{});
  at::manual_seed(1);  // the same initial weights on every rank, as the trainer's broadcast makes them
  torch::nn::Sequential model = make_model();
  std::unique_ptr<baton::sharding::ShardedStep> sharded;
  std::vector<baton::sharding::UnitSpec> units;  // zero3: every Linear, the trainer's default
  if (mode == "zero3")
    for (const auto& item : model->named_children())
      if (!item.value()->parameters().empty()) units.push_back({item.key(), item.value().get()});
  if (mode != "none")
    sharded = std::make_unique<baton::sharding::ShardedStep>(
        baton::named_model_tensors(*model, false), comm.get(),
        mode == "zero1"   ? baton::sharding::ZeroStage::zero1
        : mode == "zero2" ? baton::sharding::ZeroStage::zero2
                          : baton::sharding::ZeroStage::zero3,
        bucket_bytes, units);
  torch::optim::Adam adam(sharded ? sharded->shard_parameters() : model->parameters(), torch::optim::AdamOptions(1e-4));
  baton::EmaOptions ema_options;
  ema_options.smoothing = 0.999;
  ema_options.threads = threads;
  if (world > 1) ema_options.shard_over = comm;  // sharded over the ranks, as the ema plugin does by default
  ema_options.held_rows = [&sharded] {  // zero3's released parameters, as RunFacts::held_rows gives them
    return sharded ? sharded->held_rows() : std::vector<baton::HeldRows>();
  };
  baton::ExponentialMovingAverage ema(*model, ema_options);
  if (sharded) sharded->release_units();  // zero3: each Linear whole only while it runs
  const auto forward = [&model](const at::Tensor& x) {
    at::Tensor h = x;
    for (auto& part : *model) h = baton::run_unit(part, h);
    return h;
  };
  at::manual_seed(100 + rank);  // each rank its own data
  const at::Tensor inputs = at::randn({kBatch, 784}), targets = at::randint(0, 10, {kBatch});

  std::vector<double> step_seconds;  // the timed steps'
  double phases[5] = {};             // zero_grad + forward + backward, reduce, Adam, gather, EMA
  std::int64_t sent_before = 0, state = 0;
  for (int step = 0; step < steps; ++step) {
    if (step == 1) {  // the first step allocates the optimizer state: timed from the second on
      if (comm) comm->barrier();
      sent_before = loopback_sent();
    }
    const auto started = std::chrono::steady_clock::now();
    auto mark = started;
    const auto phase = [&](int k) {  // adds the time since the last mark to phase k, for the steps timed
      const auto now = std::chrono::steady_clock::now();
      if (step >= 1) phases[k] += std::chrono::duration<double>(now - mark).count();
      mark = now;
    };
    adam.zero_grad();
    if (sharded) sharded->zero_grad();
    const at::Tensor loss = at::cross_entropy_loss(forward(inputs), targets);
    if (sharded) sharded->reduce_during_backward(true);  // as the trainer: each bucket reduced as it completes
    loss.backward();
    phase(0);
    if (sharded)
      sharded->reduce_gradients();
    else if (comm) {
      std::vector<at::Tensor> grads;
      for (const auto& p : model->parameters()) grads.push_back(p.grad());
      comm->average(grads, static_cast<std::size_t>(bucket_bytes));
    }
    phase(1);
    adam.step();
    phase(2);
    if (sharded) sharded->gather_parameters();
    phase(3);
    ema.update(*model);
    phase(4);
    if (step >= 1)
      step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    if (step == steps - 1) {  // what the rank holds at the end of a step
      StorageBytes held;
      for (const auto& p : model->parameters()) {
        held.add(p);
        held.add(p.grad());
      }
      if (sharded)
        for (const auto& s : sharded->shard_parameters()) {
          held.add(s);
          held.add(s.grad());
        }
      for (const auto& item : adam.state()) {
        const auto& moments = static_cast<const torch::optim::AdamParamState&>(*item.second);
        held.add(moments.exp_avg());
        held.add(moments.exp_avg_sq());
        held.add(moments.max_exp_avg_sq());
      }
      state = ema.bytes() + held.total();
    }
  }
  if (comm) comm->barrier();
  const std::int64_t sent = loopback_sent() - sent_before;
  // LibTorch's code pages read in for the first step's kernels (12 MB here) are file pages the ranks share, not
  // the rank's memory: their growth, which ends with the first step, is taken off.
  const double peak =
      static_cast<double>(status_kib("VmHWM:") - rss_before - (status_kib("RssFile:") - file_before)) * 1024.0;
  const double tensor_peak = static_cast<double>(counting.peak() - live_before);
  const double timed = steps - 1;
  std::printf("rank %d state=%lld peak=%.0f tensors=%.0f sent=%.0f step=%.6f phases=%.3f/%.3f/%.3f/%.3f/%.3f\n", rank,
              static_cast<long long>(state), peak, tensor_peak, static_cast<double>(sent) / timed / world, median(step_seconds),
              phases[0] / timed, phases[1] / timed, phases[2] / timed, phases[3] / timed, phases[4] / timed);
  return 0;
}

struct Measured {
  double state = 0, peak = 0, tensors = 0, sent = 0, step = 0;  // the largest over the ranks (sent: the average)
  std::string phases;                              // rank 0's seconds per phase
};

// Starts W copies of this program, one per rank, and reads back their lines.
Measured run_world(const char* self, int world, const std::string& mode, int steps, int port, int bucket_mb,
                   const std::string& cpu_allocator) {
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    const std::string args[] = {self, "--rank", std::to_string(r), "--world", std::to_string(world), "--mode", mode,
                                "--port", std::to_string(port), "--steps", std::to_string(steps),
                                "--bucket-mb", std::to_string(bucket_mb), "--cpu-allocator", cpu_allocator};
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, self, &actions, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("cannot start a rank");
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  Measured m;
  for (int r = 0; r < world; ++r) {
    std::string out;
    char buffer[4096];
    ssize_t n;
    while ((n = ::read(pipes[r], buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<std::size_t>(n));
    ::close(pipes[r]);
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("rank " + std::to_string(r) + " of " + mode + " at W = " + std::to_string(world) +
                               " failed: " + out);
    double state = 0, peak = 0, tensors = 0, sent = 0, step = 0;
    int rank = 0;
    char phases[128] = {};
    if (std::sscanf(out.c_str(), "rank %d state=%lf peak=%lf tensors=%lf sent=%lf step=%lf phases=%127s", &rank,
                    &state, &peak, &tensors, &sent, &step, phases) != 7)
      throw std::runtime_error("rank " + std::to_string(r) + " printed: " + out);
    if (r == 0) m.phases = phases;
    m.state = std::max(m.state, state);
    m.peak = std::max(m.peak, peak);
    m.tensors = std::max(m.tensors, tensors);
    m.sent = sent;
    m.step = std::max(m.step, step);
  }
  return m;
}

double formula(const std::string& mode, int world) {  // model-state bytes per parameter (Adam + EMA, fp32)
  const double w = world;
  if (mode == "zero1") return 8 + 12 / w;
  if (mode == "zero2") return 4 + 16 / w;
  if (mode == "zero3") return 20 / w;  // between steps; while a unit runs, its parameters and gradients besides
  return 4 + 4 + 8 + 4 / w;  // none: the EMA alone is sharded (the ema plugin's default)
}

}  // namespace

int main(int argc, char** argv) {
  int rank = -1, world = 1, port = 29600, steps = 6, bucket_mb = 4, rounds = 3;
  std::string mode = "none", worlds = "1,2,4", cpu_allocator = "caching";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--rank") rank = std::stoi(value);
    else if (key == "--world") world = std::stoi(value);
    else if (key == "--mode") mode = value;
    else if (key == "--port") port = std::stoi(value);
    else if (key == "--steps") steps = std::max(2, std::stoi(value));
    else if (key == "--worlds") worlds = value;
    else if (key == "--bucket-mb") bucket_mb = std::max(1, std::stoi(value));
    else if (key == "--rounds") rounds = std::max(1, std::stoi(value));
    else if (key == "--cpu-allocator" && (value == "caching" || value == "compact" || value == "system"))
      cpu_allocator = value;
    else {
      std::fprintf(stderr, "usage: bench_sharding [--steps N] [--worlds 1,2,4] [--bucket-mb 4] "
                           "[--cpu-allocator caching|compact|system] [--rounds 3]\n");
      return 2;
    }
  }
  if (rank >= 0) return run_rank(rank, world, mode, port, steps, std::int64_t{bucket_mb} << 20, cpu_allocator);

  const double parameters = 784.0 * 1024 + 1024 + 24 * (1024.0 * 1024 + 1024) + 1024.0 * 10 + 10;
  std::printf("model: %.1f M parameters (fp32, %.1f MB), Adam and the EMA; buckets of %d MB; %d steps, the first "
              "untimed; CPU allocator: %s\n", parameters / 1e6, parameters * 4 / 1e6, bucket_mb, steps,
              cpu_allocator.c_str());
  std::printf("%-6s %2s %10s %8s %8s %10s %8s %10s %8s %10s %8s %8s  %s\n", "mode", "W", "state MB", "B/param",
              "formula", "peak MB", "B/param", "tensors MB", "B/param", "sent MB", "vs ring", "step s",
              "s: backward(+reduce)/reduce/adam/gather/ema");
  std::map<std::string, Measured> at2;
  double unsharded = 0;
  std::istringstream list(worlds);
  std::string item;
  int next_port = port;
  while (std::getline(list, item, ',')) {
    const int w = std::stoi(item);
    for (const char* m : kModes) {
      Measured r = run_world(argv[0], w, m, steps, next_port++, bucket_mb, cpu_allocator);
      const double per_param = r.state / parameters;
      if (w == 1 && std::string(m) == "none") unsharded = per_param;
      const double ring = w > 1 ? (std::string(m) == "zero3" ? 3.0 : 2.0) * (w - 1) / w * parameters * 4 : 0;
      std::printf("%-6s %2d %10.1f %8.2f %8.2f %10.1f %8.2f %10.1f %8.2f %10.1f %8s %8.3f  %s\n", m, w, r.state / 1e6,
                  per_param, formula(m, w), r.peak / 1e6, r.peak / parameters, r.tensors / 1e6,
                  r.tensors / parameters, r.sent / 1e6,
                  ring > 0 ? std::to_string(r.sent / ring).substr(0, 5).c_str() : "-", r.step, r.phases.c_str());
      std::fflush(stdout);
      if (w == 2) at2[m] = r;
    }
  }
  if (at2.size() != 4) {
    std::printf("RESULT (W = 2 not measured)\n");
    return 0;
  }
  // The step times at W = 2 again, the modes in turn, rounds - 1 more times: the ranks share this machine's cores
  // with each other and with whatever else runs, so one run per mode drifts with the load; each ratio is of the
  // modes' medians over the rounds, measured alternately.
  std::map<std::string, std::vector<double>> steps_at2;
  for (const char* m : kModes) steps_at2[m].push_back(at2[m].step);
  for (int round = 1; round < rounds; ++round) {
    std::printf("step round %d of %d at W = 2:", round + 1, rounds);
    for (const char* m : kModes) {
      const double step = run_world(argv[0], 2, m, steps, next_port++, bucket_mb, cpu_allocator).step;
      steps_at2[m].push_back(step);
      std::printf(" %s %.3f s", m, step);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  for (const char* m : kModes) at2[m].step = median(steps_at2[m]);
  std::printf("median step over %d rounds at W = 2: none %.3f s, zero1 %.3f, zero2 %.3f, zero3 %.3f\n", rounds,
              at2["none"].step, at2["zero1"].step, at2["zero2"].step, at2["zero3"].step);
  const double ring2 = parameters * 4;  // 2 (W - 1)/W at W = 2
  // zero3's peak beside its state: the largest unit (a 1024 x 1024 Linear) whole, with its gradient, while it runs.
  const double largest_unit = 1024.0 * 1024 + 1024;
  const double zero3_peak_formula = formula("zero3", 2) + 8 * largest_unit / parameters;
  if (unsharded > 0) std::printf("unsharded (none at W = 1): %.2f bytes per parameter (formula 20)\n", unsharded);
  std::printf("RESULT zero1_state_vs_formula=%.3f zero2_state_vs_formula=%.3f zero1_peak_vs_formula=%.3f "
              "zero2_peak_vs_formula=%.3f zero1_tensor_peak_vs_formula=%.3f zero2_tensor_peak_vs_formula=%.3f "
              "zero3_tensor_peak_vs_formula=%.3f sent_vs_ring=%.3f zero1_step_vs_ddp=%.3f zero2_step_vs_ddp=%.3f zero3_state_vs_formula=%.3f "
              "zero3_peak_vs_formula=%.3f zero3_sent_vs_ring=%.3f zero3_step_vs_ddp=%.3f\n",
              at2["zero1"].state / parameters / formula("zero1", 2), at2["zero2"].state / parameters / formula("zero2", 2),
              at2["zero1"].peak / parameters / formula("zero1", 2), at2["zero2"].peak / parameters / formula("zero2", 2),
              at2["zero1"].tensors / parameters / formula("zero1", 2),
              at2["zero2"].tensors / parameters / formula("zero2", 2),
              at2["zero3"].tensors / parameters / zero3_peak_formula, at2["zero2"].sent / ring2,
              at2["zero1"].step / at2["none"].step, at2["zero2"].step / at2["none"].step,
              at2["zero3"].state / parameters / formula("zero3", 2), at2["zero3"].peak / parameters / zero3_peak_formula,
              at2["zero3"].sent / (1.5 * ring2), at2["zero3"].step / at2["none"].step);
  return 0;
}
