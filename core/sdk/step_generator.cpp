#include "sdk/step_generator.h"

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#include "baton/error.h"

namespace baton {
namespace {

thread_local at::Generator* t_current = nullptr;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::uint64_t step_seed(std::uint64_t seed, StepStream stream, std::uint64_t index, std::uint64_t rank) {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<std::uint64_t>(stream));
  h = splitmix64(h ^ index);
  return splitmix64(h ^ rank);
}

StepGeneratorScope::StepGeneratorScope(State& state, StepStream stream, std::uint64_t index)
    : previous_(t_current) {
  if (!state.generator.defined()) state.generator = at::make_generator<at::CPUGeneratorImpl>();
  // Evaluation batches are the same for every rank count: the index is global, so the rank is left out.
  const std::uint64_t rank = stream == StepStream::train ? static_cast<std::uint64_t>(state.rank) : 0;
  {
    std::lock_guard<std::mutex> lock(state.generator.mutex());
    state.generator.set_current_seed(step_seed(state.seed, stream, index, rank));
  }
  t_current = &state.generator;
}

StepGeneratorScope::~StepGeneratorScope() { t_current = previous_; }

at::Generator& step_generator() {
  if (t_current == nullptr)
    throw Error("step_generator(): no training, evaluation or prediction step is running in this thread");
  return *t_current;
}

}  // namespace baton
