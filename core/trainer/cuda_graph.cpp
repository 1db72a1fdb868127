// GraphRecorder on LibTorch's CUDA graph (compiled only where baton's LibTorch has CUDA; core/trainer/CMakeLists.txt).
// A graph is recorded on a stream other than the device's default one (CUDA records no legacy-stream work), so the
// warm-up and the recording run on one side stream, ordered against the current stream by events both ways.
#include "trainer/cuda_graph.h"

#include <map>
#include <memory>

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "baton/error.h"
#include "sdk/exception_text.h"

namespace baton {

struct GraphRecorder::Impl {
  explicit Impl(const c10::Device& d) : device(d), side(c10::cuda::getStreamFromPool(false, d.index())) {}

  // Runs `work` on the side stream, after what the current stream has queued and before what it queues next.
  void on_side_stream(const std::function<void()>& work) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    at::cuda::CUDAEvent queued;
    queued.record(current);
    queued.block(side);
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      work();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
  }

  c10::Device device;
  c10::cuda::CUDAStream side;
  std::map<std::size_t, std::unique_ptr<at::cuda::CUDAGraph>> graphs;
  std::size_t next = 0;
};

bool GraphRecorder::available() { return true; }

GraphRecorder::GraphRecorder(const c10::Device& device) {
  if (!device.is_cuda()) throw Error("a CUDA graph records work on a CUDA device, not on " + device.str());
  const c10::cuda::CUDAGuard on_device(device);
  impl_ = std::make_unique<Impl>(device);
}

GraphRecorder::~GraphRecorder() = default;

void GraphRecorder::warm_up(const std::function<void()>& work) {
  const c10::cuda::CUDAGuard on_device(impl_->device);
  impl_->on_side_stream(work);
}

std::size_t GraphRecorder::record(const std::function<void()>& work) {
  const c10::cuda::CUDAGuard on_device(impl_->device);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  std::string failure;
  impl_->on_side_stream([&] {
    graph->capture_begin();
    try {
      work();
    } catch (const std::exception& e) {
      failure = detail::exception_text(e);
    }
    // Ends the capture in every case: CUDA leaves a stream that is still capturing unusable.
    try {
      graph->capture_end();
    } catch (const std::exception& e) {
      if (failure.empty()) failure = detail::exception_text(e);
    }
  });
  at::autocast::set_autocast_cache_enabled(cache);
  if (!failure.empty()) throw Error(failure);
  impl_->graphs[impl_->next] = std::move(graph);
  return impl_->next++;
}

void GraphRecorder::replay(std::size_t graph) {
  const auto found = impl_->graphs.find(graph);
  if (found == impl_->graphs.end()) throw Error("no recorded graph " + std::to_string(graph) + " to replay");
  const c10::cuda::CUDAGuard on_device(impl_->device);
  found->second->replay();
}

void GraphRecorder::drop(std::size_t graph) { impl_->graphs.erase(graph); }

}  // namespace baton
