// Matches every event and does nothing, so a run with several of these measures the engine's own overhead.
#include "baton/plugin.h"

namespace {

class Noop final : public baton::Algorithm {
 public:
  bool match(baton::Event, const baton::State&) override { return true; }
  void apply(baton::Event, baton::State&, baton::Logger&) override {}
};

}  // namespace

BATON_PLUGIN(Noop, "bench_noop", "1.0.0", "does nothing on every event (engine overhead benchmark)")
