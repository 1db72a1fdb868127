#pragma once
// The training step recorded as one CUDA graph and replayed (trainer.cuda_graphs): LibTorch's CUDA graph where this
// baton's LibTorch has CUDA (cuda_graph.cpp), and elsewhere a build whose every call says it has none
// (cuda_graph_none.cpp). The trainer's side (what is recorded, the static batch, when to fall back) is
// graph_step.cpp.
#include <functional>
#include <memory>
#include <string>

#include <c10/core/Device.h>

namespace baton {

class GraphRecorder {
 public:
  /// Whether this baton's LibTorch was built with CUDA; without it trainer.cuda_graphs is refused.
  static bool available();

  explicit GraphRecorder(const c10::Device& device);
  ~GraphRecorder();
  GraphRecorder(const GraphRecorder&) = delete;
  GraphRecorder& operator=(const GraphRecorder&) = delete;

  /// Runs `work` as it is, on the stream the graphs record on, after the work queued so far and before what is
  /// queued next: the warm-up steps, so that the libraries' per-stream state (cuBLAS workspaces, cuDNN plans) is
  /// made before the recording rather than inside it.
  void warm_up(const std::function<void()>& work);
  /// Records `work` without running it (replay() runs it) as a graph of its own, in a memory pool of its own, with
  /// autocast's cast cache off (a cached cast would be recorded once). Returns the graph's number. Throws Error
  /// with CUDA's reason when the work cannot be recorded (it waits for the GPU, copies from pageable host memory,
  /// computes on the CPU); nothing is kept then.
  std::size_t record(const std::function<void()>& work);
  /// Runs graph `graph`'s recorded work on the current stream.
  void replay(std::size_t graph);
  /// Frees graph `graph` and its memory pool.
  void drop(std::size_t graph);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
