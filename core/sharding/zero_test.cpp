// The sharded step's collectives per dtype, what it shards, and its errors.
#include "baton_test.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include "baton/communicator.h"
#include "baton/error.h"
#include "loopback_ranks.h"
#include "sharding/zero.h"

using namespace baton;
using baton::sharding::ShardedStep;
using baton::sharding::ZeroStage;
using baton::test::run_ranks;

namespace {

at::Tensor counting(std::vector<std::int64_t> shape, at::ScalarType dtype, double start) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return (at::arange(n, at::kDouble) + start).reshape(shape).to(dtype);
}

}  // namespace

TEST_SUITE("sharded step") {
  TEST_CASE("load_parameters: the shards take the model's values replaced outside the step (a broadcast)") {
    run_ranks(2, [&](std::shared_ptr<Communicator> group) {
      const int r = group->rank();
      CAPTURE(r);
      // 7 rows over 2 ranks: rank 0 holds rows 0-3, rank 1 rows 4-6 and one row of padding.
      NamedTensors parameters{{"w", counting({7, 3}, at::kFloat, 1).requires_grad_(true)}};
      ShardedStep sharded(parameters, group.get(), ZeroStage::zero1);
      {
        c10::NoGradGuard no_grad;
        parameters[0].second.copy_(counting({7, 3}, at::kFloat, 1000));  // as the trainer's broadcast writes
      }
      sharded.load_parameters();
      const at::Tensor expected = counting({7, 3}, at::kFloat, 1000).narrow(0, r == 0 ? 0 : 4, r == 0 ? 4 : 3);
      CHECK(sharded.shard_of("w").equal(expected));
      // The padding row stays zero, and a gather gives the replaced values back whole.
      const at::Tensor& buffer = sharded.shard_parameter(at::kFloat);
      CHECK(buffer.numel() == 12);
      if (r == 1) CHECK(buffer.detach().narrow(0, 9, 3).eq(0).all().item<bool>());
      {
        c10::NoGradGuard no_grad;
        parameters[0].second.zero_();
      }
      sharded.gather_parameters();
      CHECK(parameters[0].second.equal(counting({7, 3}, at::kFloat, 1000)));
    });
  }

  TEST_CASE("one reduce-scatter and one all-gather per bucket, the same values at any bucket size; frozen left alone") {
    // Gradients are set by hand: rank r's gradient of every parameter is (r + 1) times its values' pattern, so the
    // mean over W = 2 ranks is 1.5 times the pattern, exact in float and double. Buckets: the default (one per
    // dtype: 2), or 16 bytes a rank (w's 12 floats alone, c's 1 float, b's 3 doubles alone: 3).
    for (const std::int64_t bucket_bytes : {std::int64_t{25} << 20, std::int64_t{16}})
    for (ZeroStage stage : {ZeroStage::zero1, ZeroStage::zero2}) {
      CAPTURE(sharding::to_string(stage));
      CAPTURE(bucket_bytes);
      const std::int64_t buckets = bucket_bytes == 16 ? 3 : 2;
      run_ranks(2, [&](std::shared_ptr<Communicator> group) {
        Communicator& comm = *group;
        const int r = comm.rank();
        const std::string run = std::string(sharding::to_string(stage)) + ", rank " + std::to_string(r);
        CAPTURE(run);
        NamedTensors parameters{{"w", counting({7, 3}, at::kFloat, 1)},
                                {"frozen", counting({4}, at::kFloat, 100)},
                                {"b", counting({5}, at::kDouble, 1)},
                                {"c", counting({1}, at::kFloat, 50)}};
        for (auto& item : parameters) item.second.requires_grad_(item.first != "frozen");
        ShardedStep sharded(parameters, &comm, stage, bucket_bytes);
        CHECK(static_cast<std::int64_t>(sharded.buckets().size()) == buckets);

        // The frozen tensor has no slot; the others are sharded in their order, float first (first seen).
        std::vector<std::string> names;
        for (const auto& slot : sharded.layout().slots()) names.push_back(slot.name);
        CHECK(names == std::vector<std::string>{"w", "b", "c"});
        REQUIRE(sharded.shard_parameters().size() == 2);
        const at::Tensor& floats = sharded.shard_parameter(at::kFloat);
        const at::Tensor& doubles = sharded.shard_parameter(at::kDouble);
        CHECK(floats.is_leaf());
        CHECK(floats.requires_grad());
        // w (7 rows at W = 2: 4 per rank, 3 for rank 1 plus one padding row) and c (1 row: rank 0's; rank 1 pads).
        CHECK(floats.numel() == 4 * 3 + 1);
        CHECK(doubles.numel() == 3);  // b: 5 rows, 3 per rank
        // The shard parameters start from this rank's rows of the model's values.
        CHECK(sharded.shard_of("w").equal(counting({7, 3}, at::kFloat, 1).narrow(0, 4 * r, r == 0 ? 4 : 3)));
        CHECK(sharded.shard_of("c").numel() == (r == 0 ? 1 : 0));

        for (auto& item : parameters)
          if (item.first != "frozen") item.second.mutable_grad() = item.second.detach() * (r + 1);
        const std::int64_t before = comm.collectives();
        sharded.reduce_gradients();
        CHECK(comm.collectives() == before + buckets);  // a reduce-scatter per bucket
        CHECK(parameters[0].second.grad().defined() == (stage == ZeroStage::zero1));
        CHECK(parameters[2].second.grad().defined() == (stage == ZeroStage::zero1));
        // The shard's gradient is the mean of the ranks' gradients on its rows: 1.5 times the values.
        at::Tensor w_grad = sharded.layout().shard_of_buffer(floats.grad(), 0);
        CHECK(w_grad.equal(sharded.shard_of("w") * 1.5));
        at::Tensor b_grad = sharded.layout().shard_of_buffer(doubles.grad(), 1);
        CHECK(b_grad.equal(sharded.shard_of("b") * 1.5));

        // A step of "lr 1" by hand: every shard becomes -0.5 times its values; the gather writes the full tensors.
        {
          c10::NoGradGuard no_grad;
          for (const at::Tensor& shard : sharded.shard_parameters()) shard.sub_(shard.grad());
        }
        sharded.gather_parameters();
        CHECK(comm.collectives() == before + 2 * buckets);  // and an all-gather per bucket
        CHECK(parameters[0].second.equal(counting({7, 3}, at::kFloat, 1) * -0.5));
        CHECK(parameters[2].second.equal(counting({5}, at::kDouble, 1) * -0.5));
        CHECK(parameters[3].second.equal(counting({1}, at::kFloat, 50) * -0.5));
        CHECK(parameters[1].second.equal(counting({4}, at::kFloat, 100)));  // frozen: never written

        sharded.zero_grad();
        CHECK_FALSE(floats.grad().defined());
        CHECK_FALSE(parameters[0].second.grad().defined());
        // No gradient at all on a rank is a zero contribution: rank 1 reduces none, so rank 0's halves.
        if (r == 0) parameters[0].second.mutable_grad() = at::ones_like(parameters[0].second);
        sharded.reduce_gradients();
        at::Tensor half = sharded.layout().shard_of_buffer(floats.grad(), 0);
        CHECK(half.equal(at::full(half.sizes(), 0.5, half.options())));
      });
    }
  }

  TEST_CASE("errors name the parameter or dtype") {
    at::Tensor w = at::zeros({3, 2}).requires_grad_(true);
    CHECK_THROWS_WITH_AS(ShardedStep({{"w", w}, {"gone", at::Tensor()}}, nullptr, ZeroStage::zero1),
                         doctest::Contains("'gone' is undefined"), Error);
    CHECK_THROWS_WITH_AS(ShardedStep({{"w", w}, {"w", w}}, nullptr, ZeroStage::zero2),
                         doctest::Contains("'w' is given twice"), Error);
    ShardedStep sharded({{"w", w}}, nullptr, ZeroStage::zero1);
    CHECK_THROWS_WITH_AS(sharded.shard_parameter(at::kDouble),
                         doctest::Contains("no sharded parameter is Double (the shards are Float)"), Error);
    CHECK_THROWS_WITH_AS(sharded.shard_of("v"), doctest::Contains("no tensor named 'v'"), Error);
  }
}
