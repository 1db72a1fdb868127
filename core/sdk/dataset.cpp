// The data types of the SDK (baton/dataset.h): what plugins, models and the trainer share about the data.
#include "baton/dataset.h"

#include <ATen/ops/index_select.h>

#include "baton/error.h"

namespace baton {

Dataset::~Dataset() = default;

std::int64_t DataSpec::output_size() const {
  if (num_classes > 0) return num_classes;
  std::int64_t n = 1;
  for (auto d : target_shape) n *= d;
  return n;
}

std::string DataSpec::describe() const {
  const auto shape = [](const std::vector<std::int64_t>& dims) {
    std::string out;
    for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? "x" : "") + std::to_string(dims[i]);
    return out.empty() ? std::string("scalar") : out;
  };
  std::string out = shape(input_shape) + " inputs, ";
  if (num_classes > 0) return out + std::to_string(num_classes) + " classes";
  const std::int64_t values = output_size();
  return out + std::to_string(values) + " regression target" + (values == 1 ? "" : "s");
}

Batch TensorDataset::get(const at::Tensor& indices) const {
  if (!inputs.defined() || !targets.defined())
    throw Error("dataset '" + name + "': cannot take a batch from an empty dataset");
  return Batch{at::index_select(inputs, 0, indices), at::index_select(targets, 0, indices)};
}

DataSpec TensorDataset::spec() const {
  DataSpec spec;
  if (inputs.defined()) spec.input_shape = inputs.sizes().slice(1).vec();
  if (targets.defined()) spec.target_shape = targets.sizes().slice(1).vec();
  const bool regression = targets.defined() && at::isFloatingType(targets.scalar_type());
  spec.num_classes = regression ? 0 : num_classes;
  return spec;
}

}  // namespace baton
