// ZeRO-1 / ZeRO-2 against unsharded data parallel, 50 steps with the global batch fixed: parameters and optimizer
// state equal to 1e-6 relative, the shards' padding exactly 0, one reduce-scatter and one all-gather per step.
#include "baton_test.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sin.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "baton/communicator.h"
#include "loopback_ranks.h"
#include "shard_checks.h"
#include "sharding/zero.h"

using namespace baton;
using baton::sharding::ShardedStep;
using baton::sharding::ZeroStage;
using baton::test::chunk_rows;
using baton::test::relative_gap;
using baton::test::run_ranks;

namespace {

constexpr std::int64_t kBatch = 12;  // the global batch: every rank of W = 1, 2, 3 takes kBatch / W rows
constexpr int kSteps = 50;
// Relative to the largest element of the reference tensor. The sums are taken in the same order on both sides (the
// reduce-scatter adds the ranks' chunks in rank order, as the reference does), so on x86-64 with LibTorch 1.13 the
// results are bitwise equal; the margin is for kernels that round a flat tensor's tail differently elsewhere.
constexpr double kTolerance = 1e-6;

// Deterministic values with no random generator (the ranks are threads of one process, and their data must be
// the same on every rank and every LibTorch version): sin(0.731 i + phase) * scale, in row-major order.
at::Tensor wave(std::vector<std::int64_t> shape, double phase, double scale = 1.0) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return (at::sin(at::arange(n, at::kFloat) * 0.731 + phase) * scale).reshape(shape);
}

// A linear model's squared errors on fixed data: w (7, 3) and c (1,) map 7 inputs to 3 outputs, b (10,) weighs 10
// inputs into one output, d (5, 4) maps 5 inputs to 4. At W = 2 and 3, c (1 row) leaves every rank after rank 0
// with nothing, and every shape but (10,) at W = 2 leaves padding on some rank.
struct Data {
  at::Tensor x1 = wave({kBatch, 7}, 0.1), t1 = wave({kBatch, 3}, 0.2);
  at::Tensor x2 = wave({kBatch, 10}, 0.3), t2 = wave({kBatch}, 0.4);
  at::Tensor x3 = wave({kBatch, 5}, 0.5), t3 = wave({kBatch, 4}, 0.6);
};

NamedTensors initial_parameters() {
  NamedTensors p{{"w", wave({7, 3}, 1.1, 0.5)}, {"b", wave({10}, 1.2, 0.5)}, {"c", wave({1}, 1.3, 0.5)},
                 {"d", wave({5, 4}, 1.4, 0.5)}};
  for (auto& item : p) item.second.requires_grad_(true);
  return p;
}

// The mean squared error over rows [begin, begin + count) of the global batch.
at::Tensor loss_on(const NamedTensors& p, const Data& data, std::int64_t begin, std::int64_t count) {
  auto rows = [&](const at::Tensor& t) { return t.narrow(0, begin, count); };
  const at::Tensor& w = p[0].second;
  const at::Tensor& b = p[1].second;
  const at::Tensor& c = p[2].second;
  const at::Tensor& d = p[3].second;
  at::Tensor e1 = at::mm(rows(data.x1), w) + c - rows(data.t1);
  at::Tensor e2 = (rows(data.x2) * b).sum(1) - rows(data.t2);
  at::Tensor e3 = at::mm(rows(data.x3), d) - rows(data.t3);
  return (e1 * e1).mean() + (e2 * e2).mean() + (e3 * e3).mean();
}

using MakeOptimizer = std::function<std::shared_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>&)>;

struct OptimizerCase {
  std::string name;
  MakeOptimizer make;
};

std::vector<OptimizerCase> optimizer_cases() {
  return {
      {"sgd",
       [](const std::vector<at::Tensor>& p) {
         return std::make_shared<torch::optim::SGD>(
             p, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
       }},
      {"adam",
       [](const std::vector<at::Tensor>& p) {
         return std::make_shared<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-2));
       }},
      {"adamw",
       [](const std::vector<at::Tensor>& p) {
         return std::make_shared<torch::optim::AdamW>(p, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
       }},
  };
}

// An optimizer's state of `parameter`. The state map's key is the TensorImpl's address printed as a string on
// LibTorch 1.13 and the address itself from 2.x on; both are derived from the key type, so this compiles on both.
template <class State, class Map>
const State* state_of(const Map& states, const at::Tensor& parameter) {
  using Key = typename Map::key_type;
  Key key{};
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << parameter.unsafeGetTensorImpl();
    key = text.str();
  } else {
    key = static_cast<Key>(parameter.unsafeGetTensorImpl());
  }
  auto found = states.find(key);
  return found == states.end() ? nullptr : dynamic_cast<const State*>(found->second.get());
}

// The optimizer state tensors that an element-wise optimizer keeps beside each parameter.
std::vector<std::pair<std::string, at::Tensor>> state_tensors(const torch::optim::Optimizer& optimizer,
                                                              const at::Tensor& parameter) {
  if (const auto* s = state_of<torch::optim::SGDParamState>(optimizer.state(), parameter))
    return {{"momentum_buffer", s->momentum_buffer()}};
  if (const auto* s = state_of<torch::optim::AdamParamState>(optimizer.state(), parameter))
    return {{"exp_avg", s->exp_avg()}, {"exp_avg_sq", s->exp_avg_sq()}};
  if (const auto* s = state_of<torch::optim::AdamWParamState>(optimizer.state(), parameter))
    return {{"exp_avg", s->exp_avg()}, {"exp_avg_sq", s->exp_avg_sq()}};
  return {};
}

// Unsharded data parallel over W ranks, in one process: each step takes every rank's gradient on its slice of the
// global batch, averages them by hand (summed in rank order, then divided by W), and steps a torch optimizer over
// the full parameters.
struct Reference {
  NamedTensors parameters = initial_parameters();
  std::shared_ptr<torch::optim::Optimizer> optimizer;

  Reference(const OptimizerCase& optimizer_case, int world) {
    std::vector<at::Tensor> tensors;
    for (auto& item : parameters) tensors.push_back(item.second);
    optimizer = optimizer_case.make(tensors);
    const Data data;
    const std::int64_t rows = kBatch / world;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<at::Tensor> sums(parameters.size());
      for (int r = 0; r < world; ++r) {
        for (auto& item : parameters) item.second.mutable_grad() = at::Tensor();
        loss_on(parameters, data, r * rows, rows).backward();
        for (std::size_t i = 0; i < parameters.size(); ++i) {
          at::Tensor g = parameters[i].second.grad();
          if (r == 0)
            sums[i] = g.clone();
          else
            sums[i].add_(g);
        }
      }
      for (std::size_t i = 0; i < parameters.size(); ++i) parameters[i].second.mutable_grad() = sums[i].div_(world);
      optimizer->step();
    }
  }
};

// 50 sharded steps on this rank (`comm` null: a world of one), checked against `reference`.
void train_sharded(Communicator* comm, ZeroStage stage, const OptimizerCase& optimizer_case,
                   const Reference& reference) {
  const int rank = comm ? comm->rank() : 0;
  const int world = comm ? comm->world_size() : 1;
  // Rank threads do not see the captures of the thread that started them.
  const std::string run = optimizer_case.name + ", " + sharding::to_string(stage) + ", rank " + std::to_string(rank) +
                          " of " + std::to_string(world);
  CAPTURE(run);
  NamedTensors parameters = initial_parameters();
  std::vector<const void*> identities;
  for (auto& item : parameters) identities.push_back(item.second.unsafeGetTensorImpl());
  ShardedStep sharded(parameters, comm, stage);
  // A shard parameter per tensor this rank holds rows of: c's one row is rank 0's.
  REQUIRE(sharded.shard_parameters().size() == (rank == 0 ? 4u : 3u));
  auto optimizer = optimizer_case.make(sharded.shard_parameters());
  const Data data;
  const std::int64_t rows = kBatch / world;
  for (int step = 0; step < kSteps; ++step) {
    sharded.zero_grad();
    // Odd steps reduce in the backward, as the trainer does; even ones after it, so this rank's own gradients can
    // be kept to compare with.
    const bool in_backward = step % 2 == 1;
    sharded.reduce_during_backward(in_backward);
    const std::int64_t before = comm ? comm->collectives() : 0;
    loss_on(parameters, data, rank * rows, rows).backward();
    if (comm) CHECK(comm->collectives() == before + (in_backward ? 1 : 0));  // one reduce-scatter: one dtype
    std::vector<at::Tensor> own;  // this rank's gradients, before the reduce
    if (!in_backward)
      for (auto& item : parameters) own.push_back(item.second.grad().clone());
    sharded.reduce_gradients();
    if (comm) CHECK(comm->collectives() == before + 1);
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const at::Tensor& grad = parameters[i].second.grad();
      if (stage == ZeroStage::zero2) {
        CHECK_FALSE(grad.defined());
      } else if (!in_backward) {
        // zero1 keeps it: the rows of other ranks as this rank's own, not averaged.
        REQUIRE(grad.defined());
        const sharding::Slot& slot = sharded.layout().slots()[i];
        const at::Tensor g = grad.reshape({slot.rows, -1}), o = own[i].reshape({slot.rows, -1});
        CHECK(g.narrow(0, 0, slot.held.begin).equal(o.narrow(0, 0, slot.held.begin)));
        CHECK(g.narrow(0, slot.held.end, slot.rows - slot.held.end).equal(o.narrow(0, slot.held.end,
                                                                                  slot.rows - slot.held.end)));
      }
    }
    for (const at::Tensor& shard : sharded.shard_parameters()) CHECK(shard.grad().sizes() == shard.sizes());
    optimizer->step();
    sharded.gather_parameters();
    if (comm) CHECK(comm->collectives() == before + 2);  // and one all-gather
  }

  const auto shards = sharded.named_shard_parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const std::string& name = parameters[i].first;
    CAPTURE(name);
    // In place: the model's parameters are still the same tensors.
    CHECK(static_cast<const void*>(parameters[i].second.unsafeGetTensorImpl()) == identities[i]);
    CHECK(relative_gap(parameters[i].second, reference.parameters[i].second) <= kTolerance);
    // The shard parameter's rows of this tensor are the reference's too.
    CHECK(relative_gap(sharded.shard_of(name), chunk_rows(reference.parameters[i].second, rank, world)) <= kTolerance);
    // This rank's optimizer state for its rows of each tensor equals the reference's rows of that tensor's state.
    const at::Tensor* shard = nullptr;
    for (const auto& item : shards)
      if (item.first == name) shard = &item.second;
    if (!shard) {
      CHECK(chunk_rows(reference.parameters[i].second, rank, world).numel() == 0);  // holds none of its rows
      continue;
    }
    const auto sharded_state = state_tensors(*optimizer, *shard);
    const auto full_state = state_tensors(*reference.optimizer, reference.parameters[i].second);
    REQUIRE(!full_state.empty());
    REQUIRE(sharded_state.size() == full_state.size());
    for (std::size_t s = 0; s < full_state.size(); ++s) {
      CAPTURE(full_state[s].first);
      const at::Tensor& mine = sharded_state[s].second;
      at::Tensor want = chunk_rows(full_state[s].second, rank, world);
      REQUIRE((mine.sizes() == want.sizes()));
      CHECK(relative_gap(mine, want) <= kTolerance);
    }
  }
}

}  // namespace

TEST_SUITE("sharded step") {
  TEST_CASE("zero1 and zero2 follow unsharded data parallel for 50 steps of SGD, Adam and AdamW at W = 2 and 3") {
    for (const OptimizerCase& optimizer_case : optimizer_cases()) {
      for (int world : {2, 3}) {
        const Reference reference(optimizer_case, world);
        for (ZeroStage stage : {ZeroStage::zero1, ZeroStage::zero2}) {
          CAPTURE(optimizer_case.name);
          CAPTURE(world);
          CAPTURE(sharding::to_string(stage));
          run_ranks(world, [&](std::shared_ptr<Communicator> comm) {
            train_sharded(comm.get(), stage, optimizer_case, reference);
          });
        }
      }
    }
  }

  TEST_CASE("a world of one (no communicator) steps like the plain optimizer over the whole batch") {
    for (const OptimizerCase& optimizer_case : optimizer_cases()) {
      const Reference reference(optimizer_case, 1);
      for (ZeroStage stage : {ZeroStage::zero1, ZeroStage::zero2}) {
        CAPTURE(optimizer_case.name);
        CAPTURE(sharding::to_string(stage));
        train_sharded(nullptr, stage, optimizer_case, reference);
      }
    }
  }
}
