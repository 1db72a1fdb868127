#include "baton_test.h"

#include <ATen/ops/arange.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "baton/error.h"
#include "distributed/communicator.h"
#include "distributed/loopback_ranks_test.h"
#include "distributed/sharded_ema.h"

using namespace baton;

namespace {

// 3x2 + 2 + 2x1 + 1 = 11 floating-point elements: 6 on rank 0, 5 (padded to 6) on rank 1 of 2.
torch::nn::Sequential small_model() { return torch::nn::Sequential(torch::nn::Linear(3, 2), torch::nn::Linear(2, 1)); }

// Tensor i of the model holds arange(numel) + 100 i + k: distinct values everywhere, so a misplaced slice shows.
void set_weights(torch::nn::Sequential& model, double k) {
  c10::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : model->parameters()) {
    p.copy_(at::arange(p.numel(), at::kFloat).view(p.sizes()) + (100.0 * i + k));
    ++i;
  }
}

// What the EMA of tensor i must be after updates with w_k = base + k, k = 1..3, s = 0.5, from w_0 = base:
// c_k = s c_{k-1} + (1 - s) k  →  c = 0.5, 1.25, 2.125.
void check_ema(const std::vector<std::pair<std::string, at::Tensor>>& ema, torch::nn::Sequential& model) {
  auto params = model->named_parameters();
  REQUIRE(ema.size() == params.size());
  for (std::size_t i = 0; i < ema.size(); ++i) {
    CHECK(ema[i].first == params[i].key());
    at::Tensor expected = at::arange(params[i].value().numel(), at::kFloat).view(params[i].value().sizes()) +
                          (100.0 * static_cast<double>(i) + 2.125);
    CHECK(ema[i].second.allclose(expected));
  }
}

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("sharded EMA: each rank keeps 1/W, updates without collectives, gathers the full EMA") {
    baton::test::run_ranks(2, [](std::shared_ptr<Communicator> comm) {
      auto model = small_model();
      set_weights(model, 0);
      ShardedEma ema(*model, comm, 0.5);
      CHECK(ema.total_elements() == 11);
      CHECK(ema.shard_begin() == (comm->rank() == 0 ? 0 : 6));
      CHECK(ema.shard_end() == (comm->rank() == 0 ? 6 : 11));
      CHECK(ema.bytes() == 6 * 4);
      CHECK(ema.full_bytes() == 11 * 4);
      std::int64_t before = comm->collectives();
      for (int k = 1; k <= 3; ++k) {
        set_weights(model, k);
        ema.update(*model);
      }
      CHECK(comm->collectives() == before);  // no communication in the update
      auto full = ema.gather();
      check_ema(full, model);

      // Re-split: the full EMA loaded at world size 1 and again at 2 gives the same EMA.
      ShardedEma single(*model, nullptr, 0.5);
      single.load_full(full);
      CHECK(single.bytes() == 11 * 4);
      check_ema(single.gather(), model);
      ShardedEma again(*model, comm, 0.5);
      again.load_full(single.gather());
      check_ema(again.gather(), model);
    });
  }

  TEST_CASE("sharded EMA: a saved EMA that does not fit the model is named") {
    auto model = small_model();
    ShardedEma ema(*model, nullptr, 0.9);
    auto state = ema.gather();
    state.pop_back();
    CHECK_THROWS_WITH_AS(ema.load_full(state), "sharded EMA: tensor '1.bias' is missing from the saved EMA", Error);
    CHECK_THROWS_AS(ShardedEma(*model, nullptr, 1.5), Error);
  }
}
