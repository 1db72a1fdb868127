#pragma once
// The one place that knows how LibTorch's optimizers differ between the versions baton builds on (1.13 and 2.x).
//
// Optimizer::state() maps each parameter to its state. LibTorch 1.13 keys the map by the address of the
// parameter's TensorImpl printed as text (std::string); 2.x keys it by the address itself (void*). The key type is
// read off the map rather than guessed from a version number, so a LibTorch between the two builds either way.
#include <sstream>
#include <string>
#include <type_traits>

#include <torch/optim/optimizer.h>

namespace baton::optimizer_compat {

using StateMap = std::remove_cv_t<std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>>;
using StateKey = StateMap::key_type;

namespace detail {
inline std::string key_of(c10::TensorImpl* impl, std::string* /*tag*/) {
  std::ostringstream text;  // as LibTorch 1.13 prints it (c10::guts::to_string)
  text << static_cast<const void*>(impl);
  return text.str();
}
inline void* key_of(c10::TensorImpl* impl, void** /*tag*/) { return impl; }
}  // namespace detail

/// The key of `param` in Optimizer::state().
inline StateKey state_key(const at::Tensor& param) {
  return detail::key_of(param.unsafeGetTensorImpl(), static_cast<StateKey*>(nullptr));
}

}  // namespace baton::optimizer_compat
