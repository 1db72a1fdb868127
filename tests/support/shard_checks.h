#pragma once
// The sharding tests' yardsticks, computed from the definitions rather than by the layout under test.
#include <algorithm>
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace baton::test {

/// max |got - want| / max |want|; 0 for two empty tensors (a rank holding no rows), 1 for an empty `want` only.
inline double relative_gap(const at::Tensor& got, const at::Tensor& want) {
  if (want.numel() == 0) return got.numel() == 0 ? 0.0 : 1.0;
  const double gap = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  const double scale = want.to(at::kDouble).abs().max().item<double>();
  return scale > 0 ? gap / scale : gap;
}

/// Rank `rank`'s rows of `full` under torch.chunk(full, world, 0): ceil(rows / world) rows per rank, the trailing
/// ranks holding fewer or none. A 0-d tensor is one row (held by rank 0), returned as [1] or [0].
inline at::Tensor chunk_rows(const at::Tensor& full, int rank, int world) {
  const at::Tensor rows_of = full.dim() == 0 ? full.reshape({1}) : full;
  const std::int64_t rows = rows_of.size(0);
  const std::int64_t per_rank = (rows + world - 1) / world;
  const std::int64_t begin = std::min<std::int64_t>(rank * per_rank, rows);
  const std::int64_t end = std::min<std::int64_t>((rank + 1) * per_rank, rows);
  return rows_of.narrow(0, begin, end - begin);
}

}  // namespace baton::test
