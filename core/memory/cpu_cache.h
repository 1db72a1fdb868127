#pragma once
// The process's CPU tensor memory through a cache of large blocks (`trainer.cpu_allocator = "caching"`,
// docs/config.md). A training step frees and allocates the same large tensors every step
// (gradients, optimizer temporaries, collective buffers); through the C library each is either mapped afresh (a
// page fault per 4 KiB, at 1-2 µs each) or carved from a heap that keeps freed pages resident and fragments, so a
// rank's resident memory runs 1.2-2.1 x its live tensors. The cache keeps freed blocks of 256 KiB and more, each its
// own mapping, for the next tensor: one of its size as it is, else the cached block nearest in size resized by the
// kernel (mremap: resident pages move, a shrunk tail is freed, a grown one faults only its new pages), and a new
// mapping only when nothing is cached. Cached blocks past the peak of live tensor memory are released, the largest
// first: resident tensor memory stays at the live peak, and a step that repeats its sizes maps nothing. No
// LibTorch in this header.
#include <cstdint>

namespace baton::memory {

struct CpuCacheStats {
  std::int64_t live_bytes = 0;       // blocks of the cache held by tensors now
  std::int64_t cached_bytes = 0;     // freed blocks kept for reuse
  std::int64_t peak_live_bytes = 0;  // the most live_bytes has been
  std::int64_t mapped = 0;           // blocks mapped from the system so far
  std::int64_t reused = 0;           // allocations served from the cache so far, by a block of their size
  std::int64_t resized = 0;          // ... by a cached block of another size, resized
  std::int64_t released = 0;         // cached blocks given back to the system so far
};

/// The smallest allocation the cache serves; smaller ones go to LibTorch's own CPU allocator.
constexpr std::int64_t kCpuCacheMinBytes = std::int64_t{1} << 18;

/// Routes the process's large CPU tensor allocations through the cache (true) or LibTorch's own allocator (false).
/// The first call with true installs the cache as LibTorch's CPU allocator for the rest of the process; false
/// afterwards sends new allocations to the system again and unmaps what is cached (blocks still held are returned
/// to the system when their tensors are freed). Tensors made before keep the allocator that made them.
void use_cpu_cache(bool on);
bool cpu_cache_on();
CpuCacheStats cpu_cache_stats();
/// Unmaps every cached block and starts the live peak again from what is live now (the trainer calls it at the
/// start and end of a fit: an embedding program gets the memory back, and one fit's peak does not bound the
/// next); live blocks are untouched.
void release_cpu_cache();

}  // namespace baton::memory
