// zero3: each unit's parameters exist in full only while the unit runs. Against unsharded data parallel computed
// here by hand (each rank's slice of a fixed global batch, gradients averaged in rank order, a torch optimizer over
// the whole model): parameters and optimizer state equal to 1e-6 relative at W = 1, 2, 3, with dropout and batch
// norm inside units (the recompute replays the random generator and does not count the statistics twice), nested
// units, a root parameter in no unit; released parameters between steps and while other units run; the collectives
// of a step counted.
#include "baton_test.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/tanh.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "baton/communicator.h"
#include "baton/error.h"
#include "baton/unit.h"
#include "loopback_ranks.h"
#include "shard_checks.h"
#include "sharding/zero.h"

using namespace baton;
using baton::sharding::ShardedStep;
using baton::sharding::UnitSpec;
using baton::sharding::ZeroStage;
using baton::test::chunk_rows;
using baton::test::relative_gap;
using baton::test::run_ranks;

namespace zero3_test {

constexpr std::int64_t kBatch = 12;
constexpr double kTolerance = 1e-6;

at::Tensor wave(std::vector<std::int64_t> shape, double phase, double scale = 1.0) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return (at::sin(at::arange(n, at::kFloat) * 0.731 + phase) * scale).reshape(shape);
}

// first = [Linear(6, 8), BatchNorm1d(8)], stack = [Linear(8, 8), Tanh, Linear(8, 5)] with stack.0 a unit inside the
// unit stack, head = Linear(5, 3) (dropout on its input when `dropout` > 0), and a root parameter `scale` in no
// unit. Every forward of a unit goes through run_unit, with its module captured by value.
struct NetImpl : torch::nn::Module {
  torch::nn::Sequential first{nullptr}, stack{nullptr};
  torch::nn::Linear head{nullptr};
  at::Tensor scale;
  double dropout = 0;
  std::function<void()> inside_head;  // a probe called while head runs

  explicit NetImpl(double dropout_p) : dropout(dropout_p) {
    first = register_module("first", torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::BatchNorm1d(8)));
    stack = register_module("stack", torch::nn::Sequential(torch::nn::Linear(8, 8), torch::nn::Tanh(),
                                                           torch::nn::Linear(8, 5)));
    head = register_module("head", torch::nn::Linear(5, 3));
    scale = register_parameter("scale", at::ones({3}));
    c10::NoGradGuard no_grad;
    double phase = 0.1;
    for (auto& p : named_parameters()) p.value().copy_(wave(p.value().sizes().vec(), phase += 0.37, 0.5));
  }

  at::Tensor forward(const at::Tensor& x) {
    auto first_ = first;
    at::Tensor h = run_unit(*first, [first_](const at::Tensor& in) mutable { return first_->forward(in); }, x);
    auto stack_ = stack;
    h = run_unit(*stack, [stack_](const at::Tensor& in) {
      auto inner = stack_->ptr<torch::nn::LinearImpl>(0);
      at::Tensor y = run_unit(*inner, [inner](const at::Tensor& z) { return inner->forward(z); }, in);
      return stack_->ptr<torch::nn::LinearImpl>(2)->forward(at::tanh(y));
    }, at::tanh(h));
    auto head_ = head;
    const double p = dropout;
    const bool train = is_training();
    auto probe = inside_head;
    h = run_unit(*head, [head_, p, train, probe](const at::Tensor& in) mutable {
      if (probe) probe();
      return head_->forward(p > 0 ? at::dropout(in, p, train) : in);
    }, h);
    return h * scale;
  }
};
TORCH_MODULE(Net);

std::vector<UnitSpec> units_of(const Net& net) {
  return {{"first", net->first.ptr().get()},
          {"stack", net->stack.ptr().get()},
          {"stack.0", net->stack->ptr(0).get()},
          {"head", net->head.ptr().get()}};
}

struct Data {
  at::Tensor x = wave({kBatch, 6}, 0.3), t = wave({kBatch, 3}, 0.9);
};

at::Tensor loss_on(Net& net, const Data& data, std::int64_t begin, std::int64_t count) {
  at::Tensor e = net->forward(data.x.narrow(0, begin, count)) - data.t.narrow(0, begin, count);
  return (e * e).mean();
}

using MakeOptimizer = std::function<std::shared_ptr<torch::optim::Optimizer>(const std::vector<at::Tensor>&)>;

MakeOptimizer adam() {
  return [](const std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-2));
  };
}

MakeOptimizer sgd() {
  return [](const std::vector<at::Tensor>& p) {
    return std::make_shared<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-4));
  };
}

// Unsharded data parallel over `world` ranks in one process, `steps` steps; the random generator is seeded with
// 1000 + step + 100 * slice before each slice's forward, as each rank seeds it below.
struct Reference {
  Net net;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  Reference(double dropout, const MakeOptimizer& make, int world, int steps) : net(dropout) {
    optimizer = make(net->parameters());
    const Data data;
    const std::int64_t rows = kBatch / world;
    for (int step = 0; step < steps; ++step) {
      auto parameters = net->parameters();
      std::vector<at::Tensor> sums(parameters.size());
      for (int r = 0; r < world; ++r) {
        for (auto& p : parameters) p.mutable_grad() = at::Tensor();
        at::manual_seed(1000 + step + 100 * r);
        loss_on(net, data, r * rows, rows).backward();
        for (std::size_t i = 0; i < parameters.size(); ++i)
          sums[i] = r == 0 ? parameters[i].grad().clone() : sums[i].add_(parameters[i].grad());
      }
      for (std::size_t i = 0; i < parameters.size(); ++i) parameters[i].mutable_grad() = sums[i].div_(world);
      optimizer->step();
    }
  }
};

// The step's collectives, from the model's structure: each unit is gathered for its forward and again for its
// backward and reduce-scattered once (3); stack.0, run inside stack, is also gathered when stack's forward is
// recomputed (1); the root (scale) is reduce-scattered and gathered (2). One bucket each.
constexpr std::int64_t kCollectivesPerStep = 3 * 4 + 1 + 2;

void train_zero3(Communicator* comm, double dropout, const MakeOptimizer& make, const Reference& reference,
                 int steps) {
  const int rank = comm ? comm->rank() : 0;
  const int world = comm ? comm->world_size() : 1;
  const std::string run = "rank " + std::to_string(rank) + " of " + std::to_string(world);
  CAPTURE(run);
  Net net(dropout);
  ShardedStep sharded(named_model_tensors(*net, false), comm, ZeroStage::zero3, std::int64_t{25} << 20,
                      units_of(net));
  auto optimizer = make(sharded.shard_parameters());
  sharded.release_units();
  CHECK(sharded.released());
  // While head runs, the other units' parameters are released and head's are whole.
  std::vector<std::int64_t> seen;
  net->inside_head = [&] {
    seen = {net->first[0]->as<torch::nn::Linear>()->weight.numel(), net->stack[2]->as<torch::nn::Linear>()->weight.numel(),
            net->head->weight.numel()};
  };
  const Data data;
  const std::int64_t rows = kBatch / world;
  for (int step = 0; step < steps; ++step) {
    sharded.zero_grad();
    const std::int64_t before = comm ? comm->collectives() : 0;
    at::manual_seed(1000 + step + 100 * rank);
    loss_on(net, data, rank * rows, rows).backward();
    sharded.reduce_gradients();
    optimizer->step();
    sharded.gather_parameters();
    if (comm) CHECK(comm->collectives() - before == kCollectivesPerStep);
    // Between steps: the units' parameters hold nothing, the root's are whole.
    CHECK(net->first[0]->as<torch::nn::Linear>()->weight.numel() == 0);
    CHECK(net->head->weight.numel() == 0);
    CHECK(net->scale.numel() == 3);
    CHECK((seen == std::vector<std::int64_t>{0, 0, 15}));
  }
  // run_unit calls: once a step for each unit (a recompute calls the unit's forward itself), twice for stack.0,
  // which stack's forward and stack's recompute both run.
  CHECK(sharded.unit_runs(0) == steps);
  CHECK(sharded.unit_runs(2) == 2 * steps);

  // Each parameter's rows in the shard equal the reference's rows; so does the optimizer's state (read through
  // the shard's flat state: its rows of each slot, cut by the slot).
  const auto& layout = sharded.layout();
  auto reference_parameters = named_model_tensors(*reference.net, false);
  for (std::size_t i = 0; i < layout.slots().size(); ++i) {
    const std::string& name = layout.slots()[i].name;
    CAPTURE(name);
    REQUIRE(reference_parameters[i].first == name);
    at::Tensor want = chunk_rows(reference_parameters[i].second, rank, world);
    CHECK(relative_gap(sharded.shard_of(name), want) <= kTolerance);
  }
  // The whole model again: every parameter equals the reference's; batch-norm statistics at W = 1.
  sharded.gather_units();
  CHECK_FALSE(sharded.released());
  for (auto& [name, tensor] : named_model_tensors(*net, world == 1)) {
    CAPTURE(name);
    at::Tensor want;
    for (auto& [n, t] : named_model_tensors(*reference.net)) if (n == name) want = t;
    REQUIRE(want.defined());
    CHECK(relative_gap(tensor, want) <= kTolerance);
  }
}

TEST_SUITE("sharded step") {

  TEST_CASE("zero3 in one process: dropout and batch norm in units follow the unsharded model (Adam, SGD)") {
    for (const auto& make : {adam(), sgd()}) {
      const Reference reference(0.3, make, 1, 20);
      train_zero3(nullptr, 0.3, make, reference, 20);
    }
  }

  TEST_CASE("zero3 follows unsharded data parallel at W = 2 and 3, one unit gathered at a time") {
    for (int world : {2, 3}) {
      CAPTURE(world);
      const Reference reference(0.0, adam(), world, 20);
      run_ranks(world, [&](std::shared_ptr<Communicator> comm) { train_zero3(comm.get(), 0.0, adam(), reference, 20); });
    }
  }

  TEST_CASE("zero3's units: misuse refused with the reason") {
    Net net(0.0);
    const auto params = named_model_tensors(*net, false);
    // A unit that owns no parameter.
    auto tanh = net->stack->ptr(1);
    CHECK_THROWS_WITH_AS(ShardedStep(params, nullptr, ZeroStage::zero3, 1 << 20, {{"stack.1", tanh.get()}}),
                         doctest::Contains("unit 'stack.1' holds no parameter that trains"), Error);
    // Units under zero2.
    CHECK_THROWS_WITH_AS(ShardedStep(params, nullptr, ZeroStage::zero2, 1 << 20, units_of(net)),
                         doctest::Contains("units are zero3's"), Error);
    // One module in two runs at once.
    ShardedStep one(params, nullptr, ZeroStage::zero3, 1 << 20, units_of(net));
    CHECK_THROWS_WITH_AS(ShardedStep(params, nullptr, ZeroStage::zero3, 1 << 20, units_of(net)),
                         doctest::Contains("another sharded run"), Error);
    // Outside a run, run_unit is the forward itself.
    Net plain(0.0);
    CHECK(plain->forward(at::ones({2, 6})).sizes() == at::IntArrayRef({2, 3}));
  }
}

}  // namespace zero3_test
