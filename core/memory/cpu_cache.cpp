#include "memory/cpu_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

namespace baton::memory {
namespace {

constexpr std::size_t kPage = 4096;

// LibTorch's CPU allocator is a process-wide pointer: the cache is one object that lives as long as the process
// (tensors may be freed during static destruction), installed once and switched on and off by a flag.
// LibTorch 1.13 declares allocate() const; from 2.3 it is not, and copy_data() is to be defined: both are given,
// and each version overrides the one it declares.
class CpuCache final : public c10::Allocator {
 public:
  explicit CpuCache(c10::Allocator* system) : system_(system), system_deleter_(system->allocate(1).get_deleter()) {}

  c10::DataPtr allocate(size_t n) const { return const_cast<CpuCache*>(this)->take(n); }
  c10::DataPtr allocate(size_t n) { return take(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
  // raw_allocate() frees through this: release() tells the cache's blocks from LibTorch's by their address.
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void set_on(bool on, CpuCacheFit fit) {
    std::lock_guard<std::mutex> lock(mutex_);
    on_ = on;
    compact_ = fit == CpuCacheFit::compact;
    if (!on) drop_cached(cached_.size());
  }
  bool on() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return on_;
  }
  CpuCacheStats stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_cached(cached_.size());
    stats_.peak_live_bytes = stats_.live_bytes;
  }

  static CpuCache* instance;

 private:
  c10::DataPtr take(size_t n) {
    if (static_cast<std::int64_t>(n) >= kCpuCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (on_) {
        void* block = take_block((n + kPage - 1) / kPage * kPage);
        return {block, block, &release, c10::Device(c10::DeviceType::CPU)};
      }
    }
    return system_->allocate(n);  // its own deleter; raw_deleter() hands such a pointer back to it
  }

  // A cached block of this size up to twice as large, as it is: the smallest that fits (a tensor's untouched pages
  // are not resident; touched ones are reused rather than faulted in again). Else a new mapping while the memory
  // held stays within a quarter above the live peak; past that, the cached block nearest in size, the smallest
  // larger one first, resized by the kernel (mremap moves its resident pages, frees a shrunk tail, and a grown one
  // faults only its new pages). Then cached blocks are released, the largest first, until the memory held is
  // within the bound again. Resizing alone, with no slack, kept memory at the live peak but faulted the grown pages
  // in every step: the main job's steps of many sizes spent a tenth of their time in page faults. That is still
  // CpuCacheFit::compact (a block within an eighth, else a resize, the bound at the live peak) for a run that
  // needs its memory at the peak.
  void* take_block(std::size_t size) {
    void* block = nullptr;
    auto fit = cached_.lower_bound(size);
    if (fit != cached_.end() && fit->first <= (compact_ ? size + size / 8 : 2 * size)) {
      block = fit->second;
      size = fit->first;
      uncache(fit);
      ++stats_.reused;
    } else if (!cached_.empty() && (compact_ || held() + static_cast<std::int64_t>(size) > budget())) {
      if (fit == cached_.end()) --fit;  // all smaller: the largest grows least
      void* old = fit->second;
      const std::size_t old_size = fit->first;
      uncache(fit);
      block = ::mremap(old, old_size, size, MREMAP_MAYMOVE);
      if (block == MAP_FAILED) {
        ::munmap(old, old_size);
        block = nullptr;
      } else {
        ++stats_.resized;
      }
    }
    if (block == nullptr) block = map(size);
    hand_out(block, size);
    while (!cached_.empty() && held() > budget()) drop_cached(1);
    return block;
  }

  std::int64_t held() const { return stats_.live_bytes + stats_.cached_bytes; }
  // The memory the cache may hold, live and cached: a quarter above the live peak (compact: the peak).
  std::int64_t budget() const { return stats_.peak_live_bytes + (compact_ ? 0 : stats_.peak_live_bytes / 4); }

  void* map(std::size_t size) {
    void* block = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED && !cached_.empty()) {  // what is cached may be what the system is short of
      drop_cached(cached_.size());
      block = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (block == MAP_FAILED) {
      const int error = errno;
      TORCH_CHECK(false, "CPU memory: cannot allocate ", size, " bytes (", std::strerror(error), "; ",
                  stats_.live_bytes, " bytes held in large tensors)");
    }
    ++stats_.mapped;
    return block;
  }

  void uncache(std::multimap<std::size_t, void*>::iterator at) {
    stats_.cached_bytes -= static_cast<std::int64_t>(at->first);
    cached_.erase(at);
  }

  void hand_out(void* block, std::size_t size) {
    live_[block] = size;
    stats_.live_bytes += static_cast<std::int64_t>(size);
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  }

  // Unmaps `count` cached blocks, the largest first (the fewest calls for the most memory).
  void drop_cached(std::size_t count) {
    for (; count > 0 && !cached_.empty(); --count) {
      auto last = std::prev(cached_.end());
      ::munmap(last->second, last->first);
      ++stats_.released;
      uncache(last);
    }
  }

  static void release(void* data) {
    CpuCache& cache = *instance;
    {
      std::lock_guard<std::mutex> lock(cache.mutex_);
      const auto found = cache.live_.find(data);
      if (found != cache.live_.end()) {
        const std::size_t size = found->second;
        cache.live_.erase(found);
        cache.stats_.live_bytes -= static_cast<std::int64_t>(size);
        if (cache.on_) {
          cache.cached_.emplace(size, data);
          cache.stats_.cached_bytes += static_cast<std::int64_t>(size);
        } else {
          ::munmap(data, size);
        }
        return;
      }
    }
    cache.system_deleter_(data);
  }

  c10::Allocator* system_;
  c10::DeleterFnPtr system_deleter_;  // LibTorch's CPU deleter (its data pointer is its context)
  mutable std::mutex mutex_;
  bool on_ = false;
  bool compact_ = false;  // CpuCacheFit::compact
  std::unordered_map<void*, std::size_t> live_;  // the blocks of this cache held by tensors
  std::multimap<std::size_t, void*> cached_;     // freed blocks by size
  CpuCacheStats stats_;
};

CpuCache* CpuCache::instance = nullptr;

CpuCache& installed() {
  static CpuCache* cache = [] {
    auto* made = new CpuCache(c10::GetCPUAllocator());  // never deleted: tensors outlive any scope
    CpuCache::instance = made;
    // Above LibTorch's default (0) and below a program's own wrapper, which may wrap this one.
    c10::SetCPUAllocator(made, /*priority=*/10);
    return made;
  }();
  return *cache;
}

}  // namespace

void use_cpu_cache(bool on, CpuCacheFit fit) {
  if (!on && CpuCache::instance == nullptr) return;  // never installed: LibTorch's allocator serves already
  installed().set_on(on, fit);
}

void use_cpu_allocator(const std::string& name) {
  use_cpu_cache(name != "system", name == "compact" ? CpuCacheFit::compact : CpuCacheFit::fast);
}

bool cpu_cache_on() { return CpuCache::instance != nullptr && CpuCache::instance->on(); }

CpuCacheStats cpu_cache_stats() { return CpuCache::instance ? CpuCache::instance->stats() : CpuCacheStats{}; }

void release_cpu_cache() {
  if (CpuCache::instance) CpuCache::instance->release_cached();
}

}  // namespace baton::memory
