#pragma once
// The one place that knows how c10d differs between the LibTorch versions baton builds on (1.13 and 2.x).
//
// LibTorch 2.0 split the process group in two: c10d::ProcessGroup became a dispatcher over per-device
// c10d::Backend objects, and the concrete groups (ProcessGroupGloo, ProcessGroupNCCL) now derive from Backend.
// In 1.13 they derive from ProcessGroup itself (Backend.hpp exists there but nothing uses it). baton drives one
// backend directly, so it holds the concrete group through whichever base class it has; both expose the same
// collectives (allreduce, broadcast, allgather, barrier) with the same options structs.
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

}  // namespace baton::c10d_compat
