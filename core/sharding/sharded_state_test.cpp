// What a rank writes of a sharded run's state and reads back: row blocks named as an unsharded run names them,
// whose union is the model, an optimizer state that resumes the step bitwise, and the unsharded optimizer state
// taken apart into each rank's rows.
#include "baton_test.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include "baton/communicator.h"
#include "baton/error.h"
#include "baton/optimizer_state.h"
#include "error_text.h"
#include "loopback_ranks.h"
#include "sharding/sharded_state.h"
#include "sharding/zero.h"

using namespace baton;
using baton::sharding::ShardedStep;
using baton::sharding::ZeroStage;
using baton::test::run_ranks;

namespace {

// Shapes with uneven and empty shards at W = 2 and 3: (7, 3), (10,), (1,) and a 0-d tensor.
NamedTensors model_tensors() {
  NamedTensors out;
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes = {
      {"a.weight", {7, 3}}, {"a.bias", {10}}, {"b.one", {1}}, {"b.scalar", {}}};
  double start = 1;
  for (const auto& [name, shape] : shapes) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    out.emplace_back(name, ((at::arange(n, at::kFloat) + start) / 8).reshape(shape).requires_grad_(true));
    start += 100;
  }
  return out;
}

// A deterministic gradient for step k, the same on every rank (so the mean is itself).
void set_gradients(const NamedTensors& tensors, int k) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& p = tensors[i].second;
    p.mutable_grad() = (at::arange(p.numel(), at::kFloat).reshape(p.sizes()) * 0.01 + 0.1 * (k + 1) + 0.3 * i).sin();
  }
}

// k steps of the sharded step with Adam from the current values.
void steps(ShardedStep& step, torch::optim::Optimizer& adam, const NamedTensors& tensors, int from, int to) {
  for (int k = from; k < to; ++k) {
    set_gradients(tensors, k);
    step.reduce_gradients();
    adam.step();
    step.gather_parameters();
    step.zero_grad();
  }
}

// The files hold views of the live shards (written before the next step); the test keeps copies.
StateDict snapshot(const StateDict& live) {
  StateDict copy = live;
  for (const auto& key : live.tensor_keys()) copy.set_tensor(key, live.tensor(key).clone());
  return copy;
}

std::unique_ptr<torch::optim::Adam> adam_over(const ShardedStep& step) {
  return std::make_unique<torch::optim::Adam>(step.shard_parameters(), torch::optim::AdamOptions(0.05));
}

}  // namespace

TEST_SUITE("sharded state") {
  TEST_CASE("shard file names") {
    CHECK(sharding::shard_file_name("model", 1, 4) == "model-shard-00001-of-00004.safetensors");
    CHECK(sharding::is_shard_file("optimizer", "optimizer-shard-00003-of-00004.safetensors"));
    CHECK_FALSE(sharding::is_shard_file("optimizer", "model-shard-00003-of-00004.safetensors"));
    CHECK_FALSE(sharding::is_shard_file("model", "model.safetensors"));
  }

  TEST_CASE("the ranks' model shards are row blocks whose union is the model, each row once") {
    for (int world : {2, 3}) {
      CAPTURE(world);
      std::vector<StateDict> files(static_cast<std::size_t>(world));
      run_ranks(world, [&](std::shared_ptr<Communicator> group) {
        NamedTensors tensors = model_tensors();
        ShardedStep step(tensors, group.get(), ZeroStage::zero2);
        files[static_cast<std::size_t>(group->rank())] = sharding::model_shard(step);
      });
      // Rank 0 of 3 holds rows 0-2 of the (7, 3) tensor: its block is 3 rows starting at row 0.
      CHECK(files[0].tensor("a.weight").sizes().vec() == std::vector<std::int64_t>{world == 2 ? 4 : 3, 3});
      CHECK(files[0].get_int("rows/a.weight") == 0);
      CHECK(files[1].get_int("rows/a.weight") == (world == 2 ? 4 : 3));
      // (1,) and 0-d tensors are held by rank 0 alone; the other ranks write nothing for them.
      CHECK(files[0].has_tensor("b.scalar"));
      CHECK_FALSE(files[1].has_tensor("b.scalar"));
      CHECK_FALSE(files[1].has_tensor("b.one"));

      NamedTensors assembled;
      for (const auto& [name, tensor] : model_tensors()) assembled.emplace_back(name, at::zeros_like(tensor).detach());
      sharding::RowsSeen seen;
      for (const StateDict& file : files) sharding::copy_rows(file, assembled, seen, "test");
      const NamedTensors expected = model_tensors();
      for (std::size_t i = 0; i < expected.size(); ++i) {
        CAPTURE(expected[i].first);
        CHECK(assembled[i].second.equal(expected[i].second.detach()));
        CHECK(seen[expected[i].first] == (expected[i].second.dim() == 0 ? 1 : expected[i].second.size(0)));
      }
    }
  }

  TEST_CASE("an optimizer shard saved after 3 Adam steps resumes the next 3 bitwise, at W = 2") {
    run_ranks(2, [&](std::shared_ptr<Communicator> group) {
      NamedTensors straight = model_tensors();
      ShardedStep through(straight, group.get(), ZeroStage::zero2);
      auto adam = adam_over(through);
      steps(through, *adam, straight, 0, 3);
      const StateDict model_file = snapshot(sharding::model_shard(through));
      const StateDict optimizer_file = snapshot(sharding::optimizer_shard(through, *adam));
      steps(through, *adam, straight, 3, 6);

      // A fresh process's view: other starting values, then the saved rows and optimizer state.
      NamedTensors resumed = model_tensors();
      {
        c10::NoGradGuard no_grad;
        for (auto& item : resumed) item.second.zero_();
      }
      ShardedStep step(resumed, group.get(), ZeroStage::zero2);
      auto restored = adam_over(step);
      // This rank's rows from its file; the gather brings the other rank's from its shard.
      sharding::RowsSeen seen;
      sharding::copy_rows(model_file, resumed, seen, "test");
      step.load_parameters();
      step.gather_parameters();
      sharding::load_optimizer_shard(step, *restored, optimizer_file, "test");
      {
        const StateDict back = sharding::optimizer_shard(step, *restored);
        for (const auto& key : optimizer_file.tensor_keys()) {
          CAPTURE(key);
          CHECK(back.tensor(key).equal(optimizer_file.tensor(key)));
        }
        const StateDict rows_back = sharding::model_shard(step);
        for (const auto& key : model_file.tensor_keys()) {
          CAPTURE(key);
          CHECK(rows_back.tensor(key).equal(model_file.tensor(key)));
        }
      }
      steps(step, *restored, resumed, 3, 6);
      for (std::size_t i = 0; i < straight.size(); ++i) {
        CAPTURE(straight[i].first);
        CHECK(resumed[i].second.equal(straight[i].second));
      }
      CHECK(sharding::optimizer_shard(step, *restored).tensor_keys() ==
            sharding::optimizer_shard(through, *adam).tensor_keys());
    });
  }

  TEST_CASE("an unsharded Adam's state is taken apart into each rank's rows; rows of another W are refused") {
    // The unsharded optimizer over the model's own tensors, 2 steps.
    NamedTensors whole = model_tensors();
    std::vector<at::Tensor> parameters;
    for (const auto& item : whole) parameters.push_back(item.second);
    torch::optim::Adam plain(parameters, torch::optim::AdamOptions(0.05));
    for (int k = 0; k < 2; ++k) {
      set_gradients(whole, k);
      plain.step();
    }
    const StateDict unsharded = export_optimizer_state(plain, whole);

    std::vector<StateDict> saved(2);
    run_ranks(2, [&](std::shared_ptr<Communicator> group) {
      const int r = group->rank();
      NamedTensors tensors = model_tensors();
      ShardedStep step(tensors, group.get(), ZeroStage::zero1);
      auto adam = adam_over(step);
      sharding::load_optimizer_shard(step, *adam, unsharded, "test");
      const StateDict mine = sharding::optimizer_shard(step, *adam);
      // Rank r's exp_avg of a.weight is rows [4r, 4r + 4) (rank 1: [4, 7)) of the unsharded one.
      const at::Tensor full = unsharded.tensor("a.weight/exp_avg");
      CHECK(mine.tensor("a.weight/exp_avg").equal(full.narrow(0, r * 4, r == 0 ? 4 : 3)));
      CHECK(mine.tensor("a.bias/exp_avg_sq").equal(unsharded.tensor("a.bias/exp_avg_sq").narrow(0, r * 5, 5)));
      CHECK(mine.tensor("a.weight/step").item<std::int64_t>() == 2);
      saved[static_cast<std::size_t>(r)] = mine;
      // A file written when a rank's shard was one flat tensor per dtype keeps Adam's count once per dtype.
      StateDict flat;
      flat.set_scalars_json(mine.scalars_json());
      for (const std::string& key : mine.tensor_keys())
        if (key.size() < 5 || key.compare(key.size() - 5, 5, "/step") != 0) flat.set_tensor(key, mine.tensor(key));
      flat.set_tensor("shard:Float/step", at::scalar_tensor(2, at::kLong));
      auto again = adam_over(step);
      sharding::load_optimizer_shard(step, *again, flat, "test");
      const StateDict back = sharding::optimizer_shard(step, *again);
      CHECK(back.tensor_keys() == mine.tensor_keys());
      for (const std::string& key : mine.tensor_keys()) CHECK(back.tensor(key).equal(mine.tensor(key)));
    });

    // Rank 0's file of a 2-rank run offered to rank 0 of 3: its rows are not that rank's.
    std::vector<std::string> errors(3);
    run_ranks(3, [&](std::shared_ptr<Communicator> group) {
      NamedTensors tensors = model_tensors();
      ShardedStep step(tensors, group.get(), ZeroStage::zero1);
      auto adam = adam_over(step);
      errors[static_cast<std::size_t>(group->rank())] =
          test::error_text<CheckpointError>([&] { sharding::load_optimizer_shard(step, *adam, saved[0], "ckpt"); });
    });
    CHECK(test::contains(errors[0], "ckpt: optimizer state tensor 'a."));
    CHECK(test::contains(errors[0], "the checkpoint was sharded over another number of ranks"));
  }
}
