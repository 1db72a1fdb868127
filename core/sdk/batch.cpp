// Named tensors of a step (baton/batch.h).
#include "baton/batch.h"

#include <algorithm>

#include "baton/error.h"

namespace baton {

TensorFields::TensorFields(const char* kind, std::initializer_list<Entry> entries) : kind_(kind) {
  for (const auto& [name, tensor] : entries) set(name, tensor);
}

const at::Tensor* TensorFields::find(const std::string& name) const {
  for (const auto& entry : entries_)
    if (entry.first == name) return &entry.second;
  return nullptr;
}

at::Tensor* TensorFields::find(const std::string& name) {
  for (auto& entry : entries_)
    if (entry.first == name) return &entry.second;
  return nullptr;
}

void TensorFields::missing(const std::string& name) const {
  const std::string present = entries_.empty() ? "it has none" : "its fields: " + describe();
  throw Error(std::string("the ") + kind_ + " has no field '" + name + "' (" + present + ")");
}

const at::Tensor& TensorFields::operator[](const std::string& name) const {
  const at::Tensor* found = find(name);
  if (found == nullptr) missing(name);
  return *found;
}

at::Tensor& TensorFields::operator[](const std::string& name) {
  at::Tensor* found = find(name);
  if (found == nullptr) missing(name);
  return *found;
}

void TensorFields::set(const std::string& name, at::Tensor value) {
  if (!value.defined()) {
    erase(name);
    return;
  }
  if (at::Tensor* found = find(name))
    *found = std::move(value);
  else
    entries_.emplace_back(name, std::move(value));
}

bool TensorFields::erase(const std::string& name) {
  const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.first == name; });
  if (it == entries_.end()) return false;
  entries_.erase(it);
  return true;
}

std::vector<std::string> TensorFields::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& entry : entries_) out.push_back(entry.first);
  return out;
}

std::string TensorFields::describe() const {
  std::string out;
  for (const auto& [name, tensor] : entries_) {
    if (!out.empty()) out += ", ";
    out += name + " [";
    for (std::int64_t i = 0; i < tensor.dim(); ++i) out += (i ? ", " : "") + std::to_string(tensor.size(i));
    out += "] " + std::string(c10::toString(tensor.scalar_type()));
  }
  return out;
}

Batch Batch::of(at::Tensor inputs, at::Tensor targets) {
  Batch batch;
  batch.set("inputs", std::move(inputs));
  batch.set("targets", std::move(targets));
  return batch;
}

std::int64_t Batch::size() const {
  for (const auto& [name, tensor] : *this)
    if (tensor.dim() > 0) return tensor.size(0);
  return 0;
}

Batch Batch::slice(std::int64_t begin, std::int64_t end) const {
  Batch out;
  for (const auto& [name, tensor] : *this) {
    if (tensor.dim() == 0)
      throw Error("the batch's field '" + name + "' is a scalar, with no samples to split into microbatches");
    out.set(name, tensor.slice(0, begin, end));
  }
  return out;
}

Outputs::Outputs(at::Tensor main) : TensorFields("outputs", {}) { set("outputs", std::move(main)); }

const at::Tensor& Outputs::main() const {
  if (const at::Tensor* found = find("outputs")) return *found;
  if (empty()) missing("outputs");
  return begin()->second;
}

at::Tensor& Outputs::main() {
  if (at::Tensor* found = find("outputs")) return *found;
  if (empty()) missing("outputs");
  return begin()->second;
}

}  // namespace baton
