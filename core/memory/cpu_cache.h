#pragma once
// The process's CPU tensor memory through a cache of large blocks (`trainer.cpu_allocator = "caching"`,
// docs/config.md). A training step frees and allocates the same large tensors every step
// (gradients, optimizer temporaries, collective buffers); through the C library each is either mapped afresh (a
// page fault per 4 KiB, at 1-2 µs each) or carved from a heap that keeps freed pages resident and fragments, so a
// rank's resident memory runs 1.2-2.1 x its live tensors. The cache keeps freed blocks of 256 KiB and more, each its
// own mapping, for the next tensor: the smallest cached block of its size up to twice as large, as it is; else a new
// mapping while the memory held stays within a quarter above the peak of live tensor memory, and past that a
// cached block resized by the kernel (mremap: resident pages move, a shrunk tail is freed, a grown one faults only
// its new pages). Cached blocks past that bound are released, the largest first: resident tensor memory stays
// within 1.25 x the live peak, and a step that repeats its sizes maps and faults nothing. CpuCacheFit::compact keeps
// it at the live peak instead, resizing blocks of other sizes at the cost of faulting their grown pages again. No LibTorch in this header.
#include <cstdint>
#include <string>

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

/// How the cache trades memory for page faults (trainer.cpu_allocator "caching" and "compact").
enum class CpuCacheFit {
  /// Blocks up to twice the size asked for are handed out as they are, and new blocks mapped, while the memory held
  /// stays within a quarter above the live peak: a step that repeats its sizes faults no page.
  fast,
  /// A block within an eighth of the size asked for as it is, else a cached block resized, and the memory held kept
  /// at the live peak: resident memory at the peak of live tensors (what a sharded run shards for), and the pages a
  /// grown block gains faulted in each time (a tenth of a convnet's step on the main job).
  compact,
};

/// Routes the process's large CPU tensor allocations through the cache (true) or LibTorch's own allocator (false).
/// The first call with true installs the cache as LibTorch's CPU allocator for the rest of the process; false
/// afterwards sends new allocations to the system again and unmaps what is cached (blocks still held are returned
/// to the system when their tensors are freed). Tensors made before keep the allocator that made them.
void use_cpu_cache(bool on, CpuCacheFit fit = CpuCacheFit::fast);
/// trainer.cpu_allocator by name: "caching" (the cache, CpuCacheFit::fast), "compact" (CpuCacheFit::compact) or
/// "system" (LibTorch's own allocator).
void use_cpu_allocator(const std::string& name);
bool cpu_cache_on();
CpuCacheStats cpu_cache_stats();
/// Unmaps every cached block and starts the live peak again from what is live now (the trainer calls it at the
/// start and end of a fit: an embedding program gets the memory back, and one fit's peak does not bound the
/// next); live blocks are untouched.
void release_cpu_cache();

}  // namespace baton::memory
