// The data types of the SDK (baton/dataset.h): what plugins, models and the trainer share about the data.
#include "baton/dataset.h"

#include <algorithm>

#include <ATen/ops/index_select.h>
#include <ATen/ops/max.h>
#include <ATen/ops/min.h>

#include "baton/error.h"

namespace baton {

Dataset::~Dataset() = default;

std::int64_t DataSpec::output_size() const {
  if (num_classes > 0) return num_classes;
  std::int64_t n = 1;
  for (auto d : target_shape) n *= d;
  return n;
}

std::int64_t DataSpec::input_size() const {
  std::int64_t n = 1;
  for (auto d : input_shape) n *= d;
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

const FieldSpec* DataSpec::field(const std::string& name) const {
  for (const auto& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

std::string DataSpec::field_names() const {
  std::string out;
  for (const auto& f : fields) out += (out.empty() ? "" : ", ") + f.name;
  return out.empty() ? std::string("no fields") : out;
}

FieldSpec field_spec(std::string name, const at::Tensor& rows, std::int64_t num_classes) {
  FieldSpec out;
  out.name = std::move(name);
  out.shape = rows.sizes().slice(1).vec();
  out.dtype = rows.scalar_type();
  out.num_classes = num_classes;
  return out;
}

namespace {
// inputs, targets, then the other fields: the order of every batch.
template <class Visit>
void visit_fields(const TensorDataset& data, Visit visit) {
  if (data.inputs.defined()) visit("inputs", data.inputs);
  if (data.targets.defined()) visit("targets", data.targets);
  for (const auto& [field, tensor] : data.fields) visit(field, tensor);
}
}  // namespace

std::int64_t TensorDataset::size() const {
  std::int64_t n = -1;
  visit_fields(*this, [&](const std::string&, const at::Tensor& t) {
    if (n < 0 && t.dim() > 0) n = t.size(0);
  });
  return std::max<std::int64_t>(n, 0);
}

Batch TensorDataset::get(const at::Tensor& indices) const {
  Batch batch;
  visit_fields(*this, [&](const std::string& field, const at::Tensor& t) {
    if (t.dim() == 0 || t.size(0) != size())
      throw Error("dataset '" + name + "': field '" + field + "' has " + (t.dim() ? std::to_string(t.size(0)) : "no") +
                  " rows, the dataset " + std::to_string(size()));
    batch.set(field, at::index_select(t, 0, indices));
  });
  if (batch.empty()) throw Error("dataset '" + name + "': cannot take a batch from an empty dataset");
  return batch;
}

DataSpec TensorDataset::spec() const {
  DataSpec spec;
  if (inputs.defined()) spec.input_shape = inputs.sizes().slice(1).vec();
  if (targets.defined()) spec.target_shape = targets.sizes().slice(1).vec();
  const bool regression = targets.defined() && at::isFloatingType(targets.scalar_type());
  if (!regression && targets.defined() && targets.numel() > 0) {
    // Class indices: a silent default class count would give a model too many outputs, or too few for the data.
    const at::Tensor as_long = targets.to(at::kLong);
    const std::int64_t lowest = as_long.min().item<std::int64_t>();
    const std::int64_t highest = as_long.max().item<std::int64_t>();
    if (lowest < 0) throw Error("dataset '" + name + "': class target " + std::to_string(lowest) + " is negative");
    if (num_classes > 0 && highest >= num_classes)
      throw Error("dataset '" + name + "': class target " + std::to_string(highest) + " is not below num_classes " +
                  std::to_string(num_classes));
    spec.num_classes = num_classes > 0 ? num_classes : highest + 1;
  } else {
    spec.num_classes = regression || !targets.defined() ? 0 : num_classes;
  }
  visit_fields(*this, [&](const std::string& field, const at::Tensor& t) {
    spec.fields.push_back(field_spec(field, t, field == "targets" ? spec.num_classes : 0));
  });
  return spec;
}

}  // namespace baton
