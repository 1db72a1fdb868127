#pragma once
// trainer.cuda_graphs: what the trainer keeps of its recorded steps (graph_step.cpp runs them). After kWarmUp steps
// run as usual on the recording stream, a batch of the recorded shape is copied into a graph's own input tensors
// and the graph replays forward, loss, backward, the optimizer step (optim::CapturableStep, the rate read from the
// device) and the capturable plugins' work; the gradients live in tensors every graph accumulates into. A step
// runs uncaptured, as without graphs, when its batch has another shape (an epoch's last, smaller batch), when a
// plugin asks (State::capture.uncaptured), and for the rest of the run once a recording failed.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/batch.h"
#include "optim/capturable_step.h"
#include "trainer/cuda_graph.h"

namespace baton {

struct StepGraphs {
  /// Steps run as usual on the recording stream before the first recording: the first calls of cuDNN and cuBLAS
  /// choose algorithms and allocate workspaces, which a recording must not contain.
  static constexpr std::int64_t kWarmUp = 3;
  /// Graphs kept at once (each holds its activations' memory): a plugin's variants beyond it replace the least
  /// recently used.
  static constexpr std::size_t kKept = 2;

  struct Graph {
    std::vector<std::int64_t> variant;  // State::capture.variant when recorded
    std::size_t id = 0;                 // GraphRecorder's number
    Batch batch;                        // the input tensors the graph reads: each batch is copied in
    Outputs outputs;                    // what the recorded forward wrote, read after each replay
    at::Tensor loss;
    std::uint64_t used = 0;
  };

  /// A batch field as recorded: each step's batch is compared against these without formatting a string.
  struct Field {
    std::string name;
    std::vector<std::int64_t> sizes;
    at::ScalarType dtype;
  };

  explicit StepGraphs(const c10::Device& device) : recorder(device) {}

  /// Whether `batch` has the recorded fields, sizes and dtypes; the first batch asked sets them.
  bool same_layout(const Batch& batch) {
    if (layout.empty()) {
      for (const auto& [name, tensor] : batch) layout.push_back({name, tensor.sizes().vec(), tensor.scalar_type()});
      shape = batch.describe();
      return true;
    }
    if (batch.count() != layout.size()) return false;
    std::size_t i = 0;
    for (const auto& [name, tensor] : batch) {
      const Field& f = layout[i++];
      if (name != f.name || tensor.scalar_type() != f.dtype || !tensor.sizes().equals(f.sizes)) return false;
    }
    return true;
  }

  GraphRecorder recorder;
  std::vector<Graph> graphs;
  std::vector<std::unique_ptr<optim::CapturableStep>> optimizer_steps;  // one per optimizer, after the warm-up
  std::vector<at::Tensor> params, grads;  // every trainable parameter and the gradient tensor the graphs write
  std::int64_t warm = 0;                  // warm-up steps run
  std::vector<Field> layout;              // the recorded batches' fields
  std::string shape;                      // the same, as told in messages
  std::string off;                        // why the run stopped recording; "" while it records
  std::set<std::string> told;             // messages given once
  std::uint64_t clock = 0;                // for `used`
  std::int64_t replays = 0, uncaptured = 0;
};

}  // namespace baton
