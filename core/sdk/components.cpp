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

TensorMetric::~TensorMetric() = default;

void TensorMetric::update(const Outputs& outputs, const Batch& batch) {
  update_tensors(keys.output_of(outputs), keys.target_of(batch));
}

const at::Tensor& FieldKeys::output_of(const Outputs& outputs) const {
  return output.empty() ? outputs.main() : outputs[output];
}

const at::Tensor& FieldKeys::target_of(const Batch& batch) const { return batch[target]; }

LossFunction tensor_loss(FieldKeys keys, std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> fn) {
  return [keys = std::move(keys), fn = std::move(fn)](const Outputs& outputs, const Batch& batch) {
    return fn(keys.output_of(outputs), keys.target_of(batch));
  };
}

}  // namespace baton
