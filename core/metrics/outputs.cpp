#include "metrics/outputs.h"

#include <cstdint>

#include "baton/error.h"

namespace baton::metrics_detail {

std::string shape_text(const at::Tensor& t) {
  std::string out = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) out += (i ? ", " : "") + std::to_string(t.size(i));
  return out + "]";
}

at::Tensor fit_outputs(const std::string& who, const at::Tensor& outputs, const at::Tensor& targets) {
  if (outputs.sizes() == targets.sizes()) return outputs;
  const bool same_batch = outputs.dim() == 0 || targets.dim() == 0 || outputs.size(0) == targets.size(0);
  if (outputs.numel() != targets.numel() || !same_batch)
    throw Error(who + ": the outputs' shape " + shape_text(outputs) + " does not match the targets' shape " +
                shape_text(targets));
  return outputs.reshape(targets.sizes());
}

}  // namespace baton::metrics_detail
