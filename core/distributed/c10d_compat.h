#pragma once
// The one place that knows how c10d differs between the LibTorch versions baton builds on (1.13 and 2.x).
//
// LibTorch 2.0 split the process group in two: c10d::ProcessGroup became a dispatcher over per-device
// c10d::Backend objects, and the concrete groups (ProcessGroupGloo, ProcessGroupNCCL) now derive from Backend.
// In 1.13 they derive from ProcessGroup itself (Backend.hpp exists there but nothing uses it). baton drives one
// backend directly, so it holds the concrete group through whichever base class it has; both expose the same
// collectives (allreduce, broadcast, allgather, barrier) with the same options structs.
//
// The reduce-scatter's two building blocks keep one name and signature from 1.13 on: alltoall_base (Gloo and NCCL)
// and _reduce_scatter_base (NCCL; Gloo's throws on 1.13 and all-reduces on 2.x, so baton does not call Gloo's).
// PyTorch's newest Backend adds all_to_all_single and reduce_scatter_single and keeps the old names as forwarding
// virtuals, so calls through the old names reach either override.
//
// LibTorch 2.4 also made the TCPStore serve through libuv by default, and a LibTorch built without libuv (Debian's
// 2.6) then refuses to create one at all ("use_libuv was requested but PyTorch was build without libuv support").
// baton asks for the plain-socket store, which every version has; it serves a rendezvous of a few hundred ranks
// as well.
#include <utility>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace baton::c10d_compat {

#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

namespace detail {
// Chosen when TCPStoreOptions has useLibUV (2.2 and later), whatever its default; the other overload before that.
template <class Options>
auto prefer_plain_sockets(Options& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <class Options>
void prefer_plain_sockets(Options&, long) {}
}  // namespace detail

/// TCPStore options that every LibTorch build accepts.
inline c10d::TCPStoreOptions tcp_store_options() {
  c10d::TCPStoreOptions options;
  detail::prefer_plain_sockets(options, 0);
  return options;
}

}  // namespace baton::c10d_compat
