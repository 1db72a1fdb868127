#include "baton_test.h"

#include <string>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>

#include "baton/communicator.h"
#include "loopback_ranks.h"
#include "sharding/layout.h"
#include "tensor_values.h"

using namespace baton;
using baton::sharding::Layout;
using baton::sharding::TensorSpec;
using baton::test::run_ranks;

namespace {

std::vector<TensorSpec> issue_shapes(at::ScalarType dtype) {
  return {{"w", {7, 3}, dtype}, {"b", {10}, dtype}, {"one", {1}, dtype}, {"scalar", {}, dtype}};
}

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

using baton::test::values_of;

}  // namespace

TEST_SUITE("sharding layout") {
  TEST_CASE("pack, reduce_scatter, all_gather, unpack: every rank gets the mean of the ranks' full tensors") {
    // Rank r's tensor t holds (16 t + i + 1) * (r + 1) at element i (a gradient, say). Over W ranks the mean is
    // (16 t + i + 1) * (1 + ... + W) / W = (16 t + i + 1) * (W + 1) / 2: twice the base at W = 3, 2.5 times at
    // W = 4. The largest base is 49 (the scalar: t = 3, i = 0), so every input (at most 49 * 4 = 196) and every
    // mean (k * 5 / 2 with k * 5 <= 245) has at most 8 significant bits: exact in bfloat16 as in float.
    for (int world : {3, 4}) {
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        CAPTURE(world);
        CAPTURE(c10::toString(dtype));
        run_ranks(world, [&](std::shared_ptr<Communicator> group) {
          Communicator& comm = *group;
          const int r = comm.rank();
          const auto specs = issue_shapes(dtype);
          Layout layout(specs, r, world);
          std::vector<at::Tensor> grads;
          std::vector<std::vector<double>> mean;  // by hand, per the comment above
          for (std::size_t t = 0; t < specs.size(); ++t) {
            const std::int64_t n = numel_of(specs[t].shape);
            grads.push_back(((at::arange(n, at::kFloat) + (16.0 * t + 1)) * (r + 1)).reshape(specs[t].shape).to(dtype));
            std::vector<double> m;
            for (std::int64_t i = 0; i < n; ++i) m.push_back((16.0 * t + i + 1) * (world + 1) / 2);
            mean.push_back(m);
          }
          const std::int64_t before = comm.collectives();
          at::Tensor mine = comm.reduce_scatter(layout.pack(grads, dtype), true);
          REQUIRE(mine.numel() == layout.buffer_numel(dtype));
          CHECK((mine.scalar_type() == dtype));
          // The rank's buffer holds its rows of each mean, and zero padding.
          for (std::size_t t = 0; t < specs.size(); ++t) {
            const auto& slot = layout.slots()[t];
            const std::vector<double> rows(mean[t].begin() + slot.held.begin * slot.row_numel,
                                           mean[t].begin() + slot.held.end * slot.row_numel);
            CHECK(values_of(layout.shard_of_buffer(mine, t)) == rows);
            for (double v : values_of(mine.narrow(0, slot.offset + slot.shard_numel(),
                                                  slot.slot_numel() - slot.shard_numel())))
              CHECK(v == 0);
          }
          auto full = layout.unpack(comm.all_gather(mine));
          CHECK(comm.collectives() == before + 2);  // one reduce-scatter, one all-gather
          for (std::size_t t = 0; t < specs.size(); ++t) {
            CHECK((full[t].sizes() == grads[t].sizes()));
            CHECK((full[t].scalar_type() == dtype));
            CHECK(values_of(full[t]) == mean[t]);
          }
        });
      }
    }
  }
}
