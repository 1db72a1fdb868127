#include "baton_test.h"  // first: doctest's CHECK over glog's

#include "memory/cpu_cache.h"

#include <sys/resource.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>

namespace {

using baton::memory::cpu_cache_stats;
using baton::memory::use_cpu_cache;

constexpr std::int64_t kMiB = 1 << 20;

at::Tensor floats(std::int64_t bytes) { return at::empty({bytes / 4}, at::kFloat); }

std::int64_t rss_bytes() {  // VmRSS of /proc/self/status
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

std::int64_t minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

}  // namespace

TEST_CASE("a freed large block serves the next tensor of its size without a new mapping; small ones are LibTorch's") {
  use_cpu_cache(true);
  const auto before = cpu_cache_stats();
  void* first = nullptr;
  {
    at::Tensor t = floats(4 * kMiB);
    first = t.data_ptr();
    CHECK(cpu_cache_stats().live_bytes == before.live_bytes + 4 * kMiB);
  }
  CHECK(cpu_cache_stats().live_bytes == before.live_bytes);
  CHECK(cpu_cache_stats().cached_bytes >= 4 * kMiB);
  const auto freed = cpu_cache_stats();
  at::Tensor again = floats(4 * kMiB);
  CHECK(again.data_ptr() == first);
  CHECK(cpu_cache_stats().reused == freed.reused + 1);
  CHECK(cpu_cache_stats().mapped == freed.mapped);
  // Below kCpuCacheMinBytes (256 KiB): not the cache's.
  at::Tensor small = floats(baton::memory::kCpuCacheMinBytes / 2);
  CHECK(cpu_cache_stats().live_bytes == freed.live_bytes + 4 * kMiB);
  CHECK(small.numel() == baton::memory::kCpuCacheMinBytes / 8);
}

// One "step": tensors of the given sizes in order, at most `alive` of them held at once (gradients in flight), each
// written whole.
void run_step(const std::vector<std::int64_t>& sizes, std::size_t alive) {
  std::vector<at::Tensor> held;
  for (std::int64_t bytes : sizes) {
    held.push_back(floats(bytes));
    held.back().fill_(1.0f);
    if (held.size() > alive) held.erase(held.begin());
  }
}

TEST_CASE("steps that repeat their sizes map blocks in the first step only") {
  use_cpu_cache(true);
  baton::memory::release_cpu_cache();
  std::vector<std::int64_t> sizes;  // a model's layers: a few sizes, repeated
  for (int k = 0; k < 30; ++k) sizes.push_back((k % 3 == 0 ? 4 : k % 3 == 1 ? 1 : 2) * kMiB + 4096 * (k % 5));
  run_step(sizes, 8);
  const auto first = cpu_cache_stats();
  for (int k = 0; k < 9; ++k) run_step(sizes, 8);
  const auto ten = cpu_cache_stats();
  CHECK(first.mapped > 0);
  CHECK(ten.mapped == first.mapped);  // no new mapping in steps 2-10
  CHECK(ten.live_bytes + ten.cached_bytes <= ten.peak_live_bytes + ten.peak_live_bytes / 4);
}

// Ten steps of 24 tensors of 1-8 MiB in a fixed order (~100 MiB, 25 Ki pages, a step) through the cache in the
// given form: its counts after the first step and after the tenth, the page faults of steps 2-10, and the process's
// resident growth.
struct MixedSteps {
  baton::memory::CpuCacheStats first, ten;
  std::int64_t faults = 0, grown = 0, rss_before = 0;
};

MixedSteps run_mixed_steps(baton::memory::CpuCacheFit fit) {
  use_cpu_cache(true, fit);
  baton::memory::release_cpu_cache();
  std::mt19937 random(7);
  std::vector<std::int64_t> sizes;
  for (int k = 0; k < 24; ++k) sizes.push_back((1 + static_cast<std::int64_t>(random() % 8)) * kMiB + 4096 * k);
  MixedSteps out;
  out.rss_before = rss_bytes();
  run_step(sizes, 6);
  out.first = cpu_cache_stats();
  const std::int64_t faults_before = minor_faults();
  for (int k = 0; k < 9; ++k) run_step(sizes, 6);
  out.faults = minor_faults() - faults_before;
  out.ten = cpu_cache_stats();
  out.grown = rss_bytes() - out.rss_before;
  MESSAGE("peak of live large tensors " << out.ten.peak_live_bytes / kMiB << " MiB, resident growth "
                                        << out.grown / kMiB << " MiB, page faults in steps 2-10: " << out.faults);
  return out;
}

TEST_CASE("steps of mixed sizes reuse freed memory without page faults, within a quarter above the live peak") {
  const MixedSteps m = run_mixed_steps(baton::memory::CpuCacheFit::fast);
  const std::int64_t bound = m.ten.peak_live_bytes + m.ten.peak_live_bytes / 4;
  CHECK(m.ten.mapped == m.first.mapped);
  // Steps 2-10 write ~225 Ki pages of tensors: reused blocks fault none (compact, below, faults tens of thousands).
  CHECK(m.faults < 2000);
  CHECK(m.ten.live_bytes + m.ten.cached_bytes <= bound);
  // The process's resident growth is within that bound (with some slack for LibTorch's own small allocations).
  CHECK(m.grown <= bound + 4 * kMiB);
  baton::memory::release_cpu_cache();
  CHECK(cpu_cache_stats().cached_bytes == 0);
  CHECK(rss_bytes() - m.rss_before <= 4 * kMiB);
}

TEST_CASE("compact: the same steps held at the live peak by resizing, at the cost of page faults") {
  const MixedSteps m = run_mixed_steps(baton::memory::CpuCacheFit::compact);
  CHECK(m.ten.mapped == m.first.mapped);  // a freed block of another size is resized, never a new mapping
  CHECK(m.ten.resized > m.first.resized);
  CHECK(m.ten.live_bytes + m.ten.cached_bytes <= m.ten.peak_live_bytes);
  CHECK(m.grown <= m.ten.peak_live_bytes + 4 * kMiB);
  CHECK(m.faults > 2000);  // the grown blocks' pages, again in every step
  baton::memory::release_cpu_cache();
  use_cpu_cache(true);  // the default form for the cases after
}

TEST_CASE("a request larger than anything cached grows a cached block once the bound is reached") {
  use_cpu_cache(true);
  baton::memory::release_cpu_cache();
  const auto start = cpu_cache_stats();
  { at::Tensor a = floats(2 * kMiB), b = floats(2 * kMiB); }  // 4 MiB cached, the live peak 4 MiB
  // 16 MiB more would hold 20 MiB, past 1.25 x the peak: one 2 MiB block grows to 16 rather than a new mapping.
  { at::Tensor big = floats(16 * kMiB); }
  const auto now = cpu_cache_stats();
  CHECK(now.resized == start.resized + 1);
  CHECK(now.mapped == start.mapped + 2);
  CHECK(now.cached_bytes == 18 * kMiB);  // within 1.25 x the new peak (16 MiB): nothing released
  CHECK(now.released == start.released);
  // A 1 MiB tensor takes the smallest cached block up to twice its size as it is: the 2 MiB one.
  { at::Tensor small = floats(1 * kMiB); }
  CHECK(cpu_cache_stats().reused == now.reused + 1);
  CHECK(cpu_cache_stats().mapped == now.mapped);
  CHECK(cpu_cache_stats().resized == now.resized);
}

TEST_CASE("raw_allocate works for large and small blocks, and the cache can be switched off") {
  use_cpu_cache(true);
  c10::Allocator* allocator = c10::GetCPUAllocator();
  const auto before = cpu_cache_stats();
  void* large = allocator->raw_allocate(3 * kMiB);
  void* small = allocator->raw_allocate(64);
  CHECK(cpu_cache_stats().live_bytes == before.live_bytes + 3 * kMiB);
  allocator->raw_deallocate(large);
  allocator->raw_deallocate(small);
  CHECK(cpu_cache_stats().live_bytes == before.live_bytes);

  at::Tensor held = floats(2 * kMiB);  // made while on, freed while off: unmapped, not cached
  use_cpu_cache(false);
  CHECK_FALSE(baton::memory::cpu_cache_on());
  CHECK(cpu_cache_stats().cached_bytes == 0);
  const auto off = cpu_cache_stats();
  at::Tensor system = floats(8 * kMiB);
  CHECK(cpu_cache_stats().live_bytes == off.live_bytes);  // LibTorch's allocator made it
  held = at::Tensor();
  CHECK(cpu_cache_stats().live_bytes == off.live_bytes - 2 * kMiB);
  CHECK(cpu_cache_stats().cached_bytes == 0);
  use_cpu_cache(true);
}

TEST_CASE("threads allocating and freeing at once leave the cache's counts whole") {
  use_cpu_cache(true);
  const auto before = cpu_cache_stats();
  const auto work = [](int seed) {
    std::mt19937 random(seed);
    for (int k = 0; k < 200; ++k) {
      at::Tensor t = floats((1 + static_cast<std::int64_t>(random() % 4)) * kMiB);
      t.fill_(static_cast<float>(k));
      CHECK_MESSAGE(t[t.numel() - 1].item<float>() == static_cast<float>(k), "a block given to two tensors");
    }
  };
  std::thread a(work, 1), b(work, 2);
  a.join();
  b.join();
  CHECK(cpu_cache_stats().live_bytes == before.live_bytes);
}
