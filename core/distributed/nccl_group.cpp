#include "distributed/nccl_group.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace baton::distributed_detail {

c10::intrusive_ptr<c10d_compat::Group> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                        int world_size, int local_rank,
                                                        std::chrono::milliseconds timeout) {
  // NCCL binds a communicator to the device current when it is created: one GPU per rank, chosen by LOCAL_RANK.
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank));
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace baton::distributed_detail
