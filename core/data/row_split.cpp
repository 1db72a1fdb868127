#include "data/row_split.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <ATen/ops/empty.h>

#include "data/random.h"

namespace baton {

RowSplit draw_row_split(const PluginConfig& config, std::int64_t rows, std::uint64_t seed) {
  const double fraction = config.get_number_or("eval_fraction", 0.2, Range::half_open(0, 1));
  if (fraction == 0) return {};
  const auto eval_rows = static_cast<std::int64_t>(std::llround(fraction * static_cast<double>(rows)));
  if (eval_rows == 0 || eval_rows == rows)
    config.fail("eval_fraction", "leaves " + std::string(eval_rows == 0 ? "no evaluation" : "no training") +
                                     " rows of " + std::to_string(rows));
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  detail::PortableRandom random(seed);
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[random.below(i)]);
  // Sorted parts: evaluation and prediction list rows as the file has them (the sampler shuffles training anyway),
  // and a file read a batch at a time reads runs of neighbouring rows.
  const auto part = [&](std::int64_t from, std::int64_t to) {
    at::Tensor out = at::empty({to - from}, at::kLong);
    std::int64_t* begin = out.data_ptr<std::int64_t>();
    std::copy(order.begin() + from, order.begin() + to, begin);
    std::sort(begin, begin + (to - from));
    return out;
  };
  return {part(0, rows - eval_rows), part(rows - eval_rows, rows)};
}

}  // namespace baton
