#pragma once
// Seeding State::generator per step and making it the thread's step_generator() while the step runs.
#include <cstdint>

#include "baton/state.h"

namespace baton {

/// Which kind of step a seed is for: training steps and evaluation batches draw from separate streams.
/// `training_data` is a plugin's pass over the training data (TrainingPasses::forward_training_data).
enum class StepStream : std::uint64_t { train = 1, eval = 2, predict = 3, training_data = 4 };

/// Whether a StepGeneratorScope is open in this thread (step_generator() returns rather than throws).
bool step_running();

/// For the life of the scope, State::generator is seeded from (seed, stream, index, rank) and is what
/// step_generator() returns in this thread. `index` is the batch count for training, the batch's first sample for
/// evaluation and prediction (so an evaluation batch draws the same whatever the number of ranks).
class StepGeneratorScope {
 public:
  StepGeneratorScope(State& state, StepStream stream, std::uint64_t index);
  ~StepGeneratorScope();
  StepGeneratorScope(const StepGeneratorScope&) = delete;
  StepGeneratorScope& operator=(const StepGeneratorScope&) = delete;

 private:
  at::Generator* previous_;
};

/// The seed of one step: a SplitMix64 mix of the four numbers, so neighbouring steps get unrelated streams.
std::uint64_t step_seed(std::uint64_t seed, StepStream stream, std::uint64_t index, std::uint64_t rank);

}  // namespace baton
