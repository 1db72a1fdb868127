#include "sdk/step_generator.h"

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#include "baton/error.h"
#include "baton/mix64.h"

namespace baton {
namespace {

thread_local at::Generator* t_current = nullptr;

}  // namespace

std::uint64_t step_seed(std::uint64_t seed, StepStream stream, std::uint64_t index, std::uint64_t rank) {
  std::uint64_t h = mix64(seed);
  h = mix64(h ^ static_cast<std::uint64_t>(stream));
  h = mix64(h ^ index);
  return mix64(h ^ rank);
}

StepGeneratorScope::StepGeneratorScope(State& state, StepStream stream, std::uint64_t index)
    : previous_(t_current) {
  if (!state.generator.defined()) state.generator = at::make_generator<at::CPUGeneratorImpl>();
  // Evaluation batches are the same for every rank count: the index is global, so the rank is left out.
  const std::uint64_t rank = stream == StepStream::train ? static_cast<std::uint64_t>(state.facts.rank()) : 0;
  {
    std::lock_guard<std::mutex> lock(state.generator.mutex());
    state.generator.set_current_seed(step_seed(state.facts.seed(), stream, index, rank));
  }
  t_current = &state.generator;
}

StepGeneratorScope::~StepGeneratorScope() { t_current = previous_; }

bool step_running() { return t_current != nullptr; }

at::Generator& step_generator() {
  if (t_current == nullptr)
    throw Error("step_generator(): no training, evaluation or prediction step is running in this thread");
  return *t_current;
}

}  // namespace baton
