#include "metrics/outputs.h"

#include <cstdint>
#include <utility>

#include "baton/text.h"
#include "baton/error.h"

namespace baton {

// Here rather than beside the rest of FieldKeys in the SDK: it reads a PluginConfig, which the SDK does not link.
FieldKeys FieldKeys::from(const PluginConfig& config) {
  FieldKeys keys;
  keys.output = config.get_or<std::string>("output", "");
  keys.target = config.get_or<std::string>("target", "targets");
  return keys;
}

}  // namespace baton

namespace baton::metrics_detail {

at::Tensor fit_outputs(const std::string& who, const at::Tensor& outputs, const at::Tensor& targets) {
  if (outputs.sizes() == targets.sizes()) return outputs;
  const bool same_batch = outputs.dim() == 0 || targets.dim() == 0 || outputs.size(0) == targets.size(0);
  if (outputs.numel() != targets.numel() || !same_batch)
    throw Error(who + ": the outputs' shape " + format_shape(outputs.sizes()) + " does not match the targets' shape " +
                format_shape(targets.sizes()));
  return outputs.reshape(targets.sizes());
}

std::pair<FieldKeys, DataSpec> keyed_spec(const PluginConfig& config, const DataSpec& data) {
  FieldKeys keys = FieldKeys::from(config);
  DataSpec spec = data;
  if (data.fields.empty()) return {keys, spec};  // a dataset that lists no fields: its targets are the targets
  const FieldSpec* field = data.field(keys.target);
  if (field == nullptr)
    config.fail(config.has("target") ? "target" : "name",
                "the data has no field '" + keys.target + "' to compare with (its fields: " + data.field_names() +
                    "); name one with the key `target`");
  spec.target_shape = field->shape;
  spec.num_classes = field->num_classes;
  return {keys, spec};
}

}  // namespace baton::metrics_detail
