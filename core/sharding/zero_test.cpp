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
  TEST_CASE("the shards follow the model's values replaced outside the step; new storage is re-aliased or refused") {
    for (ZeroStage stage : {ZeroStage::zero1, ZeroStage::zero2, ZeroStage::zero3}) {
      CAPTURE(sharding::to_string(stage));
      run_ranks(2, [&](std::shared_ptr<Communicator> group) {
        const int r = group->rank();
        CAPTURE(r);
        // 7 rows over 2 ranks: rank 0 holds rows 0-3, rank 1 rows 4-6.
        NamedTensors parameters{{"w", counting({7, 3}, at::kFloat, 1).requires_grad_(true)}};
        ShardedStep sharded(parameters, group.get(), stage);
        const at::Tensor shard = sharded.shard_parameters().at(0);
        CHECK(shard.is_leaf());
        CHECK(shard.requires_grad());
        CHECK(shard.sizes().vec() == std::vector<std::int64_t>{r == 0 ? 4 : 3, 3});
        {
          c10::NoGradGuard no_grad;
          parameters[0].second.copy_(counting({7, 3}, at::kFloat, 1000));  // as the trainer's broadcast writes
        }
        const at::Tensor expected = counting({7, 3}, at::kFloat, 1000).narrow(0, r == 0 ? 0 : 4, r == 0 ? 4 : 3);
        // The shards are the rows of the model's own storage (zero3's too, for a parameter of no unit: its root;
        // zero3_test.cpp covers the units' own shards): they see the new values at once.
        CHECK(sharded.shard_of("w").equal(expected));
        sharded.load_parameters();
        CHECK(sharded.shard_of("w").equal(expected));
        CHECK(sharded.shard_parameters().at(0).unsafeGetTensorImpl() == shard.unsafeGetTensorImpl());
        {
          c10::NoGradGuard no_grad;
          shard.add_(1);  // as an optimizer steps this rank's rows; the gather brings the other rank's
        }
        sharded.gather_parameters();
        CHECK(parameters[0].second.equal(counting({7, 3}, at::kFloat, 1001)));
        // The parameter given new storage: the step refuses to gather until load_parameters re-aliases the shard
        // (the same tensor, which an optimizer holds) to it.
        parameters[0].second.set_data(counting({7, 3}, at::kFloat, 5));
        CHECK_THROWS_WITH_AS(sharded.gather_parameters(), doctest::Contains("'w' was given new storage"), Error);
        sharded.load_parameters();
        CHECK(sharded.shard_parameters().at(0).unsafeGetTensorImpl() == shard.unsafeGetTensorImpl());
        CHECK(shard.equal(counting({7, 3}, at::kFloat, 5).narrow(0, r == 0 ? 0 : 4, r == 0 ? 4 : 3)));
        sharded.gather_parameters();
        // New storage between steps (channels_last converts so at fit_start): the next reduce follows it, and the
        // step then writes the parameter the model reads.
        parameters[0].second.set_data(counting({7, 3}, at::kFloat, 7));
        parameters[0].second.mutable_grad() = at::ones({7, 3});
        sharded.reduce_gradients();
        {
          c10::NoGradGuard no_grad;
          shard.sub_(shard.grad());  // a step of lr 1: every rank's rows minus the mean gradient, 1
        }
        sharded.gather_parameters();
        CHECK(parameters[0].second.equal(counting({7, 3}, at::kFloat, 6)));
      });
    }
  }

  TEST_CASE("one reduce-scatter and one all-gather per bucket, the same values at any bucket size; frozen left alone") {
    // Gradients are set by hand: rank r's gradient of every parameter is (r + 1) times its values' pattern, so the
    // mean over W = 2 ranks is 1.5 times the pattern, exact in float and double. Buckets: the default (one per
    // dtype: 2), or 32 bytes, 16 a rank (w's 12 floats alone, c's 1 float, b's 3 doubles alone: 3).
    for (const std::int64_t bucket_bytes : {std::int64_t{25} << 20, std::int64_t{32}})
    for (ZeroStage stage : {ZeroStage::zero1, ZeroStage::zero2}) {
      CAPTURE(sharding::to_string(stage));
      CAPTURE(bucket_bytes);
      const std::int64_t buckets = bucket_bytes == 32 ? 3 : 2;
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
        // One shard parameter per tensor this rank holds rows of: w (7 rows at W = 2: 4 and 3), b (5 rows: 3 and
        // 2), c (1 row: rank 0's alone).
        std::vector<std::string> held;
        for (const auto& item : sharded.named_shard_parameters()) held.push_back(item.first);
        CHECK(held == (r == 0 ? std::vector<std::string>{"w", "b", "c"} : std::vector<std::string>{"w", "b"}));
        REQUIRE(sharded.shard_parameters().size() == held.size());
        const at::Tensor& w_shard = sharded.shard_parameters()[0];
        const at::Tensor& b_shard = sharded.shard_parameters()[1];
        CHECK(w_shard.is_leaf());
        CHECK(w_shard.requires_grad());
        CHECK(w_shard.sizes().vec() == std::vector<std::int64_t>{r == 0 ? 4 : 3, 3});
        CHECK(b_shard.sizes().vec() == std::vector<std::int64_t>{r == 0 ? 3 : 2});
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
        CHECK(w_shard.grad().equal(sharded.shard_of("w") * 1.5));
        CHECK(b_shard.grad().equal(sharded.shard_of("b") * 1.5));
        if (stage == ZeroStage::zero1) {
          // zero1 keeps the model's gradient: its rows on this rank hold the mean, the others this rank's own.
          const at::Tensor& full = parameters[0].second.grad();
          const std::int64_t mine = r == 0 ? 0 : 4, rows = r == 0 ? 4 : 3, other = r == 0 ? 4 : 0;
          CHECK(full.narrow(0, mine, rows).equal(counting({7, 3}, at::kFloat, 1).narrow(0, mine, rows) * 1.5));
          CHECK(full.narrow(0, other, 7 - rows).equal(counting({7, 3}, at::kFloat, 1).narrow(0, other, 7 - rows) *
                                                      (r + 1)));
        }

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
        CHECK_FALSE(w_shard.grad().defined());
        CHECK_FALSE(parameters[0].second.grad().defined());
        // No gradient at all on a rank is a zero contribution: rank 1 reduces none, so rank 0's halves.
        if (r == 0) parameters[0].second.mutable_grad() = at::ones_like(parameters[0].second);
        sharded.reduce_gradients();
        const at::Tensor half = w_shard.grad();
        CHECK(half.equal(at::full(half.sizes(), 0.5, half.options())));
      });
    }
  }

  TEST_CASE("armed, the backward reduces each bucket as its gradients complete, in one order, an unused one after") {
    // loss = sum(a * x) + sum(b * 2x) + sum(c * 3x) (+ sum(u * 4x) on rank 0 only), x = (r + 1) * pattern: the
    // gradients are those multiples of x, so the mean over the 2 ranks is 1.5 times them (u's: 4 * 0.5 = 2, rank 1
    // giving none). 96 bytes a bucket: each [6, 4] float tensor is one. u is bucket 0, which rank 1's backward never
    // completes: it reduces buckets 3, 2, 1 in its backward and 0 after, rank 0 all four in its own.
    for (ZeroStage stage : {ZeroStage::zero1, ZeroStage::zero2}) {
      CAPTURE(sharding::to_string(stage));
      run_ranks(2, [&](std::shared_ptr<Communicator> group) {
        Communicator& comm = *group;
        const int r = comm.rank();
        CAPTURE(r);
        NamedTensors parameters;
        for (const char* name : {"u", "a", "b", "c"})
          parameters.emplace_back(name, counting({6, 4}, at::kFloat, 1).requires_grad_(true));
        ShardedStep sharded(parameters, &comm, stage, 96);
        REQUIRE(sharded.buckets().size() == 4);
        const at::Tensor x = counting({6, 4}, at::kFloat, 1) * (r + 1);
        const auto loss = [&] {
          at::Tensor total = (parameters[1].second * x).sum() + (parameters[2].second * x * 2).sum() +
                             (parameters[3].second * x * 3).sum();
          return r == 0 ? total + (parameters[0].second * x * 4).sum() : total;
        };
        // Disarmed: the backward only accumulates.
        std::int64_t before = comm.collectives();
        loss().backward();
        CHECK(comm.collectives() == before);
        sharded.zero_grad();

        sharded.reduce_during_backward(true);
        before = comm.collectives();
        loss().backward();
        CHECK(comm.collectives() - before == (r == 0 ? 4 : 3));
        if (stage == ZeroStage::zero2)  // released as each bucket was reduced; rank 1's u never had one
          for (const auto& item : parameters) CHECK_FALSE(item.second.grad().defined());
        sharded.reduce_gradients();
        CHECK(comm.collectives() - before == 4);
        const at::Tensor pattern = counting({6, 4}, at::kFloat, 1);
        const std::int64_t first = r == 0 ? 0 : 3;
        for (std::size_t k = 0; k < 4; ++k) {
          const double factor = k == 0 ? 2.0 : 1.5 * static_cast<double>(k);
          CAPTURE(parameters[k].first);
          CHECK(sharded.shard_parameters()[k].grad().equal(pattern.narrow(0, first, 3) * factor));
        }
        // The next backward, disarmed again by reduce_gradients, does not reduce.
        sharded.zero_grad();
        before = comm.collectives();
        loss().backward();
        CHECK(comm.collectives() == before);
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
    CHECK_THROWS_WITH_AS(sharded.shard_of("v"), doctest::Contains("no tensor named 'v'"), Error);
  }
}
