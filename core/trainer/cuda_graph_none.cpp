// GraphRecorder where baton's LibTorch has no CUDA (Debian's CPU LibTorch): trainer.cuda_graphs is refused before a
// run starts (GraphRecorder::available), so these are reached only by a caller that did not ask.
#include "trainer/cuda_graph.h"

#include "baton/error.h"

namespace baton {

struct GraphRecorder::Impl {};

namespace {
[[noreturn]] void no_cuda() {
  throw Error("trainer.cuda_graphs: this baton's LibTorch was built without CUDA, so it records no CUDA graphs");
}
}  // namespace

bool GraphRecorder::available() { return false; }
GraphRecorder::GraphRecorder(const c10::Device&) { no_cuda(); }
GraphRecorder::~GraphRecorder() = default;
void GraphRecorder::warm_up(const std::function<void()>&) { no_cuda(); }
std::size_t GraphRecorder::record(const std::function<void()>&) { no_cuda(); }
void GraphRecorder::replay(std::size_t) { no_cuda(); }
void GraphRecorder::drop(std::size_t) { no_cuda(); }

}  // namespace baton
