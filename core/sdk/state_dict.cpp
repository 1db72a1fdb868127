#include "baton/state_dict.h"

#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>
#include <variant>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"

namespace baton {
namespace {

using Scalar = std::variant<bool, std::int64_t, double, std::string>;
// ordered_json keeps insertion order in the text, so meta.json lists keys in the order the plugin wrote them.
using Json = nlohmann::ordered_json;

const char* type_name(const Scalar& value) {
  switch (value.index()) {
    case 0: return "bool";
    case 1: return "int";
    case 2: return "double";
    default: return "string";
  }
}

// An insertion-ordered map: entries stay where they were first set, so a replaced key keeps its position and the
// checkpoint files list keys in a stable, meaningful order.
template <typename V>
class OrderedMap {
 public:
  void set(const std::string& key, V value) {
    auto found = index_.find(key);
    if (found != index_.end()) {
      entries_[found->second].second = std::move(value);
      return;
    }
    index_.emplace(key, entries_.size());
    entries_.emplace_back(key, std::move(value));
  }
  const V* find(const std::string& key) const {
    auto found = index_.find(key);
    return found == index_.end() ? nullptr : &entries_[found->second].second;
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& entry : entries_) out.push_back(entry.first);
    return out;
  }
  const std::vector<std::pair<std::string, V>>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  void clear() {
    entries_.clear();
    index_.clear();
  }

 private:
  std::vector<std::pair<std::string, V>> entries_;
  std::unordered_map<std::string, std::size_t> index_;
};

// JSON has no NaN or infinity; these doubles travel as {"double": "nan"|"inf"|"-inf"} so a diverged loss
// saved into a checkpoint comes back as itself instead of as null.
constexpr const char* kNonFiniteTag = "double";

Json scalar_to_json(const Scalar& value) {
  if (const auto* d = std::get_if<double>(&value); d && !std::isfinite(*d)) {
    const char* text = std::isnan(*d) ? "nan" : (*d > 0 ? "inf" : "-inf");
    return Json::object({{kNonFiniteTag, text}});
  }
  return std::visit([](const auto& v) { return Json(v); }, value);
}

double non_finite_from_json(const std::string& key, const Json& value) {
  if (value.size() == 1 && value.contains(kNonFiniteTag) && value[kNonFiniteTag].is_string()) {
    const auto& text = value[kNonFiniteTag].get_ref<const std::string&>();
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
  }
  throw CheckpointError("scalar '" + key + "': unsupported JSON value " + value.dump() +
                        " (expected a bool, integer, number or string)");
}

Scalar scalar_from_json(const std::string& key, const Json& value) {
  switch (value.type()) {
    case Json::value_t::boolean: return value.get<bool>();
    case Json::value_t::number_integer: return value.get<std::int64_t>();
    case Json::value_t::number_unsigned: {
      auto u = value.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw CheckpointError("scalar '" + key + "': integer " + value.dump() + " does not fit in int64");
      }
      return static_cast<std::int64_t>(u);
    }
    case Json::value_t::number_float: return value.get<double>();
    case Json::value_t::string: return value.get<std::string>();
    case Json::value_t::object: return non_finite_from_json(key, value);
    default:
      throw CheckpointError("scalar '" + key + "': unsupported JSON value " + value.dump() +
                            " (expected a bool, integer, number or string)");
  }
}

}  // namespace

struct StateDict::Impl {
  struct Rows {
    at::Tensor block;  // set_rows'; undefined for rows held in files
    std::int64_t first_row = 0;
    std::vector<std::int64_t> shape;  // global
  };
  OrderedMap<at::Tensor> tensors;
  OrderedMap<Scalar> scalars;
  OrderedMap<Rows> rows;
  RowReader read_rows;  // attach_rows'

  const Rows& row_entry(const std::string& key) const {
    const Rows* found = rows.find(key);
    if (!found) throw CheckpointError("state dict has no row tensor '" + key + "'");
    return *found;
  }

  const Scalar& scalar(const std::string& key, const char* wanted) const {
    const Scalar* found = scalars.find(key);
    if (!found) throw CheckpointError("state dict has no scalar '" + key + "' (expected a " + wanted + ")");
    return *found;
  }

  [[noreturn]] static void wrong_type(const std::string& key, const char* wanted, const Scalar& found) {
    throw CheckpointError("state dict scalar '" + key + "' is a " + type_name(found) + ", expected a " + wanted);
  }

  template <typename T>
  T get(const std::string& key, const char* wanted) const {
    const Scalar& value = scalar(key, wanted);
    if (const T* typed = std::get_if<T>(&value)) return *typed;
    wrong_type(key, wanted, value);
  }
};

StateDict::StateDict() : impl_(std::make_unique<Impl>()) {}
StateDict::~StateDict() = default;
StateDict::StateDict(const StateDict& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
StateDict& StateDict::operator=(const StateDict& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
// A moved-from StateDict must stay usable, so moves swap Impls rather than leave a null one behind (a moved-from
// dict is empty after construction, and holds the target's old contents after assignment).
StateDict::StateDict(StateDict&& other) noexcept : impl_(std::make_unique<Impl>()) { impl_.swap(other.impl_); }
StateDict& StateDict::operator=(StateDict&& other) noexcept {
  impl_.swap(other.impl_);
  return *this;
}

void StateDict::set_tensor(const std::string& key, const at::Tensor& tensor) { impl_->tensors.set(key, tensor); }
bool StateDict::has_tensor(const std::string& key) const { return impl_->tensors.find(key) != nullptr; }
at::Tensor StateDict::tensor(const std::string& key) const {
  const at::Tensor* found = impl_->tensors.find(key);
  if (!found) throw CheckpointError("state dict has no tensor '" + key + "'");
  return *found;
}
std::vector<std::string> StateDict::tensor_keys() const { return impl_->tensors.keys(); }

void StateDict::set_int(const std::string& key, std::int64_t value) { impl_->scalars.set(key, value); }
void StateDict::set_double(const std::string& key, double value) { impl_->scalars.set(key, value); }
void StateDict::set_bool(const std::string& key, bool value) { impl_->scalars.set(key, value); }
void StateDict::set_string(const std::string& key, const std::string& value) { impl_->scalars.set(key, value); }
bool StateDict::has(const std::string& key) const { return impl_->scalars.find(key) != nullptr; }

std::int64_t StateDict::get_int(const std::string& key) const { return impl_->get<std::int64_t>(key, "int"); }
double StateDict::get_double(const std::string& key) const {
  const Scalar& value = impl_->scalar(key, "double");
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&value)) return static_cast<double>(*i);
  Impl::wrong_type(key, "double", value);
}
bool StateDict::get_bool(const std::string& key) const { return impl_->get<bool>(key, "bool"); }
std::string StateDict::get_string(const std::string& key) const { return impl_->get<std::string>(key, "string"); }
std::vector<std::string> StateDict::keys() const { return impl_->scalars.keys(); }

void StateDict::set_rows(const std::string& key, const at::Tensor& rows, std::int64_t first_row) {
  if (!rows.defined()) throw Error("state dict row tensor '" + key + "': the rows are undefined");
  if (first_row < 0 || (rows.dim() == 0 && first_row != 0))
    throw Error("state dict row tensor '" + key + "': first row " + std::to_string(first_row) +
                (rows.dim() == 0 ? " of a 0-d tensor (must be 0)" : " is negative"));
  std::vector<std::int64_t> shape = rows.sizes().vec();
  if (!shape.empty()) shape[0] += first_row;
  impl_->rows.set(key, Impl::Rows{rows, first_row, std::move(shape)});
}
std::vector<std::string> StateDict::row_keys() const { return impl_->rows.keys(); }
bool StateDict::has_rows(const std::string& key) const { return impl_->rows.find(key) != nullptr; }
at::Tensor StateDict::row_block(const std::string& key, std::int64_t* first_row) const {
  const Impl::Rows& entry = impl_->row_entry(key);
  if (!entry.block.defined()) throw CheckpointError("state dict row tensor '" + key + "' is held in files: read_rows reads it");
  if (first_row) *first_row = entry.first_row;
  return entry.block;
}
std::vector<std::int64_t> StateDict::rows_shape(const std::string& key) const { return impl_->row_entry(key).shape; }

at::Tensor StateDict::read_rows(const std::string& key, std::int64_t first, std::int64_t count) const {
  const Impl::Rows& entry = impl_->row_entry(key);
  const std::int64_t all = entry.shape.empty() ? 1 : entry.shape[0];
  if (first < 0 || count < 0 || first + count > all || (entry.shape.empty() && (first != 0 || count != 1)))
    throw CheckpointError("state dict row tensor '" + key + "': rows [" + std::to_string(first) + ", " +
                          std::to_string(first + count) + ") asked of a tensor of " + std::to_string(all) + " rows");
  if (!entry.block.defined()) return impl_->read_rows(key, first, count);
  if (entry.shape.empty()) return entry.block;
  const std::int64_t held = entry.block.size(0);
  if (first < entry.first_row || first + count > entry.first_row + held)
    throw CheckpointError("state dict row tensor '" + key + "': rows [" + std::to_string(first) + ", " +
                          std::to_string(first + count) + ") are not in its block of rows [" +
                          std::to_string(entry.first_row) + ", " + std::to_string(entry.first_row + held) + ")");
  return entry.block.narrow(0, first - entry.first_row, count);
}

void StateDict::attach_rows(std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes, RowReader read) {
  for (auto& [key, shape] : shapes) impl_->rows.set(key, Impl::Rows{at::Tensor(), 0, std::move(shape)});
  impl_->read_rows = std::move(read);
}

bool StateDict::empty() const { return impl_->tensors.empty() && impl_->scalars.empty() && impl_->rows.empty(); }
void StateDict::clear() {
  impl_->tensors.clear();
  impl_->scalars.clear();
  impl_->rows.clear();
  impl_->read_rows = nullptr;
}

std::string StateDict::scalars_json() const {
  Json out = Json::object();
  for (const auto& [key, value] : impl_->scalars.entries()) out[key] = scalar_to_json(value);
  return out.dump();
}

void StateDict::set_scalars_json(const std::string& json) {
  Json parsed;
  try {
    parsed = Json::parse(json);
  } catch (const Json::exception& e) {
    throw CheckpointError(std::string("state dict scalars: invalid JSON: ") + e.what());
  }
  if (!parsed.is_object()) {
    throw CheckpointError(std::string("state dict scalars: expected a JSON object, got ") + parsed.type_name());
  }
  OrderedMap<Scalar> scalars;
  for (const auto& [key, value] : parsed.items()) scalars.set(key, scalar_from_json(key, value));
  impl_->scalars = std::move(scalars);
}

}  // namespace baton
