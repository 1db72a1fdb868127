#pragma once
// The NCCL process group, built only against a LibTorch with CUDA and NCCL (BATON_NCCL): Communicator::connect
// asks for it when [distributed] backend = "nccl". Kept in its own file so that a CPU-only build never sees a CUDA
// header.
#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/c10d_compat.h"

namespace baton::distributed_detail {

/// Makes device `local_rank` this process's current CUDA device and joins the NCCL group through `store`.
c10::intrusive_ptr<c10d_compat::Group> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                        int world_size, int local_rank,
                                                        std::chrono::milliseconds timeout);

}  // namespace baton::distributed_detail
