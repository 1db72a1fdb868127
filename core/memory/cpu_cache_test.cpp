#include "baton_test.h"  // first: doctest's CHECK over glog's

#include "memory/cpu_cache.h"

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
  CHECK(ten.mapped == first.mapped);  // no page faults in steps 2-10
  CHECK(ten.live_bytes + ten.cached_bytes <= ten.peak_live_bytes);
}

TEST_CASE("steps of mixed sizes reuse freed memory across sizes and keep resident memory at the live peak") {
  use_cpu_cache(true);
  baton::memory::release_cpu_cache();
  std::mt19937 random(7);
  std::vector<std::int64_t> sizes;  // 24 tensors of 1-8 MiB, in a fixed order
  for (int k = 0; k < 24; ++k) sizes.push_back((1 + static_cast<std::int64_t>(random() % 8)) * kMiB + 4096 * k);
  const std::int64_t rss_before = rss_bytes();
  run_step(sizes, 6);
  const auto first = cpu_cache_stats();
  for (int k = 0; k < 9; ++k) run_step(sizes, 6);
  const auto ten = cpu_cache_stats();
  CHECK(ten.mapped == first.mapped);  // a freed block of another size is resized, never a new mapping
  CHECK(ten.resized > first.resized);
  CHECK(ten.live_bytes + ten.cached_bytes <= ten.peak_live_bytes);
  // The process's resident growth is the live peak (with some slack for LibTorch's own small allocations).
  const std::int64_t grown = rss_bytes() - rss_before;
  CHECK(grown <= ten.peak_live_bytes + 4 * kMiB);
  MESSAGE("peak of live large tensors " << ten.peak_live_bytes / kMiB << " MiB, resident growth " << grown / kMiB
                                        << " MiB");
  baton::memory::release_cpu_cache();
  CHECK(cpu_cache_stats().cached_bytes == 0);
  CHECK(rss_bytes() - rss_before <= 4 * kMiB);
}

TEST_CASE("a request larger than anything cached grows a cached block and releases the rest past the live peak") {
  use_cpu_cache(true);
  baton::memory::release_cpu_cache();
  const auto start = cpu_cache_stats();
  { at::Tensor a = floats(2 * kMiB), b = floats(2 * kMiB); }  // 4 MiB cached
  { at::Tensor big = floats(16 * kMiB); }  // one 2 MiB block grown to 16; the other would pass the peak
  const auto now = cpu_cache_stats();
  CHECK(now.resized == start.resized + 1);
  CHECK(now.mapped == start.mapped + 2);
  CHECK(now.released == start.released + 1);
  CHECK(now.cached_bytes == 16 * kMiB);
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
