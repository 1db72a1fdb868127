#pragma once
// What the trainer's collaborators (Checkpointer, Evaluator) share with it: the run's State, the engine that fires
// events to its plugins, its logger, its options, and the precision and device parsed from them once.
#include <c10/core/Device.h>

#include "baton/trainer.h"
#include "trainer/precision.h"

namespace baton {

class Engine;
class RunLogger;

struct RunContext {
  State& state;
  Engine& engine;
  RunLogger& logger;
  const TrainerOptions& options;
  Precision precision;
  c10::Device device;
};

}  // namespace baton
