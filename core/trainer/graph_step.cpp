// trainer.cuda_graphs (step_graphs.h, docs/performance.md): the training step recorded once per batch shape and
// plugin variant, replayed for the batches after. Recording fires the step's events as usual (the handlers'
// device work is recorded, not run); a replay runs that work and then fires the same events with
// State::capture.replayed set, so capturable plugins keep their host bookkeeping, and the time advances between
// after_train_batch and the capturable plugins' batch_end as it does without graphs.
#include <algorithm>
#include <utility>

#include "optim/capturable_step.h"
#include "trainer/step_graphs.h"
#include "trainer/trainer_impl.h"

namespace baton {
namespace {

// The events a recorded step contains, in order, before the time advances (batch_end follows it).
constexpr Event kRecordedEvents[] = {Event::before_forward, Event::after_forward,  Event::before_loss,
                                     Event::after_loss,     Event::before_backward, Event::after_backward,
                                     Event::after_train_batch};

// State::capture.replayed for the events fired after a replay, cleared on every exit path.
struct ReplayedScope {
  explicit ReplayedScope(StepCapture& c) : capture(c) { capture.replayed = true; }
  ~ReplayedScope() { capture.replayed = false; }
  ReplayedScope(const ReplayedScope&) = delete;
  ReplayedScope& operator=(const ReplayedScope&) = delete;
  StepCapture& capture;
};

Batch static_copy(const Batch& batch) {
  Batch out;
  for (const auto& [name, tensor] : batch) out.set(name, tensor.clone());
  return out;
}

}  // namespace

std::vector<Event> recorded_step_events() {
  return std::vector<Event>(std::begin(kRecordedEvents), std::end(kRecordedEvents));
}

// Why trainer.cuda_graphs cannot record this run's step ("" when it can), for what the settings table cannot see:
// the process group, a model's own step, the optimizers, the plugins, and a LibTorch without CUDA.
std::string Trainer::Impl::graph_refusal() const {
  if (!GraphRecorder::available())
    return "this baton's LibTorch was built without CUDA (build baton against a CUDA LibTorch: README)";
  if (options.world_size > 1)
    return "the run has " + std::to_string(options.world_size) + " ranks, and the gradients' all-reduce between " +
           "them is not recorded yet: train on one rank, or without cuda_graphs";
  if (model.training_step()) return "the model trains by its own training step, which baton does not record";
  for (const auto& o : optimizers)
    if (const std::string why = optim::CapturableStep::refusal(*o.optimizer); !why.empty())
      return "optimizer '" + o.name + "': " + why;
  const std::vector<std::string> handlers = engine.uncapturable_handlers(recorded_step_events());
  if (!handlers.empty()) {
    std::string list;
    for (const auto& h : handlers) list += (list.empty() ? "" : ", ") + h;
    return "plugins handle events inside the step without declaring themselves capturable (" + list + "): " +
           "their work would run once, when the step is recorded, and never again";
  }
  return "";
}

// The step of train_batch when the run records: returns false when this one runs uncaptured (the caller runs it as
// usual, and batch_end reaches every plugin); true when it ran recorded (the time has advanced, and the capturable
// plugins have had batch_end).
bool Trainer::Impl::graph_step(std::int64_t samples) {
  StepGraphs& g = *graphs;
  const auto tell_once = [&](const std::string& message) {
    if (g.told.insert(message).second) logger.info("trainer.cuda_graphs: " + message);
  };
  if (!g.off.empty()) return false;
  if (!state.capture.uncaptured.empty()) {
    tell_once("a step runs uncaptured: " + state.capture.uncaptured);
    ++g.uncaptured;
    return false;
  }
  if (!g.same_layout(state.batch)) {
    tell_once("a batch of " + state.batch.describe() + " runs uncaptured: the graphs hold " + g.shape);
    ++g.uncaptured;
    return false;
  }
  if (g.warm < StepGraphs::kWarmUp) {
    ++g.warm;
    g.recorder.warm_up([&] { eager_step(); });
    state.progress.now.advance_batch(samples * options.world_size);
    return true;  // batch_end reaches every plugin: nothing was recorded
  }

  auto found = std::find_if(g.graphs.begin(), g.graphs.end(),
                            [&](const StepGraphs::Graph& graph) { return graph.variant == state.capture.variant; });
  const bool recording = found == g.graphs.end();
  if (recording) {
    try {
      found = record_step(samples);
    } catch (const std::exception& e) {
      g.off = e.what();
      logger.warn("trainer.cuda_graphs: the training step could not be recorded, so the run goes on without CUDA "
                  "graphs: " + g.off);
      ++g.uncaptured;
      return false;  // nothing ran on the device: this batch trains as usual
    }
  } else {
    for (const auto& [name, tensor] : state.batch) found->batch[name].copy_(tensor, /*non_blocking=*/true);
    state.batch = found->batch;
    for (auto& step : g.optimizer_steps) step->prepare();  // a recording prepared its own step
    // The gradients the graphs write, where every reader of the parameters finds them: an uncaptured step since
    // may have pointed .grad elsewhere (a recording pointed them itself, and its backward accumulated in place).
    for (std::size_t i = 0; i < g.params.size(); ++i) g.params[i].mutable_grad() = g.grads[i];
  }
  batch_end_side = EngineSide::uncapturable;
  g.recorder.replay(found->id);
  found->used = ++g.clock;
  ++g.replays;
  state.outputs = found->outputs;
  state.loss = found->loss;
  if (!recording) {
    // The handlers' host side: their device work ran in the replay.
    const ReplayedScope replayed(state.capture);
    for (const Event e : kRecordedEvents) fire(e);
    state.progress.now.advance_batch(samples * options.world_size);
    fire(Event::batch_end, EngineSide::capturable);
  }
  return true;
}

// Records the step for this batch's variant and returns its graph (the oldest is dropped beyond kKept). The
// recording fires the events from before_forward on, the optimizer step, the time's advance and the capturable
// plugins' batch_end: their host code runs here, once, and their device work runs in the replay that follows.
std::vector<StepGraphs::Graph>::iterator Trainer::Impl::record_step(std::int64_t samples) {
  StepGraphs& g = *graphs;
  if (g.optimizer_steps.empty()) {
    for (const auto& o : optimizers) g.optimizer_steps.push_back(std::make_unique<optim::CapturableStep>(*o.optimizer));
    for (const auto& p : module->parameters())
      if (p.requires_grad() && p.grad().defined()) {
        g.params.push_back(p);
        g.grads.push_back(p.grad());
      }
  }
  if (g.graphs.size() >= StepGraphs::kKept) {
    auto oldest = std::min_element(g.graphs.begin(), g.graphs.end(),
                                   [](const auto& a, const auto& b) { return a.used < b.used; });
    g.recorder.drop(oldest->id);
    g.graphs.erase(oldest);
  }
  StepGraphs::Graph graph;
  graph.variant = state.capture.variant;
  graph.batch = static_copy(state.batch);
  state.batch = graph.batch;
  for (std::size_t i = 0; i < g.params.size(); ++i) g.params[i].mutable_grad() = g.grads[i];
  for (auto& step : g.optimizer_steps) step->prepare();
  const Timestamp before = state.progress.now;
  const std::string batch_shape = g.shape;
  try {
    graph.id = g.recorder.record([&] {
      // The gradients accumulate into the same tensors every step: zeroed in the graph, not dropped.
      for (auto& grad : g.grads) grad.zero_();
      const at::Tensor loss = step_once();
      backward(loss);
      fire(Event::after_backward);
      fire(Event::after_train_batch);
      for (auto& step : g.optimizer_steps) step->step();
      state.progress.now.advance_batch(samples * options.world_size);
      fire(Event::batch_end, EngineSide::capturable);
    });
  } catch (...) {
    // Nothing ran: the time and the optimizer's step counts go back to this step's start, and the step runs as usual
    // with fresh gradients.
    state.progress.now = before;
    for (auto& step : g.optimizer_steps) step->retract();
    state.clear_step_data();
    state.batch = graph.batch;
    throw;
  }
  graph.outputs = state.outputs;
  graph.loss = state.loss;
  std::string variant;
  for (const std::int64_t v : graph.variant) variant += (variant.empty() ? "" : ", ") + std::to_string(v);
  g.graphs.push_back(std::move(graph));
  logger.info("trainer.cuda_graphs: recorded the training step for batches of " + batch_shape +
              (variant.empty() ? std::string() : " (plugins' variant " + variant + ")"));
  return g.graphs.end() - 1;
}

}  // namespace baton
