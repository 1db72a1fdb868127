// The parts of the component SDK (baton/registry.h, baton/components.h) that live in libbaton: where
// registrations come from, and the Metric interface's key function. The registries themselves are in
// core/components, beside the built-ins they start with.
#include "baton/components.h"

#include <utility>

namespace baton {
namespace {

ComponentOrigin& current_origin() {
  static ComponentOrigin origin;
  return origin;
}

}  // namespace

const ComponentOrigin& ComponentOrigin::current() { return current_origin(); }

ComponentOriginScope::ComponentOriginScope(ComponentOrigin origin) : previous_(std::exchange(current_origin(), std::move(origin))) {}

ComponentOriginScope::~ComponentOriginScope() { current_origin() = std::move(previous_); }

Metric::~Metric() = default;

}  // namespace baton
