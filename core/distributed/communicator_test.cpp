#include "baton_test.h"

#include <chrono>
#include <map>

#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include "baton/error.h"
#include "baton/communicator.h"
#include "distributed/c10d_compat.h"
#ifdef BATON_HAVE_NCCL
#include "distributed/nccl_group.h"
#endif
#include "error_text.h"
#include "loopback_ranks.h"

using namespace baton;
using baton::test::error_text;
using baton::test::free_port;
using baton::test::run_ranks;

namespace {

DistributedEnv env_of(const std::map<std::string, std::string>& vars) {
  return read_distributed_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::vector<double> values_of(const at::Tensor& t) {
  at::Tensor d = t.to(at::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

std::string env_error(const std::map<std::string, std::string>& vars) {
  try {
    env_of(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("no variables: a single process, no process group") {
    DistributedEnv env = env_of({});
    CHECK(env.rank == 0);
    CHECK(env.world_size == 1);
    CHECK(Communicator::connect(env, CommunicatorOptions{}) == nullptr);
    CHECK(env_of({{"WORLD_SIZE", "1"}}).world_size == 1);
  }

  TEST_CASE("torchrun's variables are read and checked") {
    DistributedEnv env = env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                                 {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
    CHECK(env.rank == 2);
    CHECK(env.world_size == 4);
    CHECK(env.local_rank == 0);
    CHECK(env.master_addr == "10.0.0.1");
    CHECK(env.master_port == 29500);
    std::map<std::string, std::string> base{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", "29500"}};
    CHECK(env_of(base).local_rank == 1);  // defaults to RANK
    auto without = [&](const std::string& name) {
      auto vars = base;
      vars.erase(name);
      return env_error(vars);
    };
    CHECK(without("RANK").find("RANK is not set") != std::string::npos);
    CHECK(without("MASTER_ADDR").find("MASTER_ADDR is not set") != std::string::npos);
    CHECK(without("MASTER_PORT").find("MASTER_PORT is not set") != std::string::npos);
    auto with = [&](const std::string& name, const std::string& value) {
      auto vars = base;
      vars[name] = value;
      return env_error(vars);
    };
    CHECK(with("RANK", "2") == "distributed run: RANK=\"2\" is not an integer in [0, 1]");
    CHECK(with("RANK", "x") == "distributed run: RANK=\"x\" is not an integer in [0, 1]");
    CHECK(with("MASTER_PORT", "70000") == "distributed run: MASTER_PORT=\"70000\" is not an integer in [1, 65535]");
    CHECK(with("WORLD_SIZE", "0").find("WORLD_SIZE=\"0\"") != std::string::npos);
  }

  TEST_CASE("torchrun's agent store: every rank is its client, under the attempt's prefix") {
    std::map<std::string, std::string> vars{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                                            {"MASTER_PORT", "29500"}};
    CHECK_FALSE(env_of(vars).agent_store);
    vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
    CHECK_FALSE(env_of(vars).agent_store);
    vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    vars["TORCHELASTIC_RESTART_COUNT"] = "3";
    DistributedEnv env = env_of(vars);
    CHECK(env.agent_store);
    CHECK(env.restart_count == 3);
    vars["TORCHELASTIC_RESTART_COUNT"] = "-1";
    CHECK(env_error(vars).find("TORCHELASTIC_RESTART_COUNT=\"-1\"") != std::string::npos);

    // The agent's store holds the port: a rank 0 that tried to serve it too would fail to bind.
    c10d::TCPStoreOptions agent_options = c10d_compat::tcp_store_options();
    agent_options.port = static_cast<std::uint16_t>(free_port());
    agent_options.isServer = true;
    agent_options.waitWorkers = false;
    agent_options.timeout = std::chrono::milliseconds(20000);
    auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", agent_options);
    run_ranks(
        2,
        [](std::shared_ptr<Communicator> comm) {
          std::vector<double> sums = comm->sum({1.0 + comm->rank()});
          CHECK(sums == std::vector<double>{3.0});
        },
        [&](DistributedEnv& rank_env) {
          rank_env.master_port = agent_options.port;
          rank_env.agent_store = true;
          rank_env.restart_count = 3;
        });
  }

  TEST_CASE("nccl is refused clearly by a LibTorch without NCCL, or on a machine without a GPU, before rendezvous") {
    if (at::hasCUDA()) return;  // a GPU machine runs NCCL for real (scripts/gpu-check.sh)
    DistributedEnv env;
    env.world_size = 2;
    env.master_addr = "127.0.0.1";
    env.master_port = free_port();
    CommunicatorOptions options;
    options.backend = "nccl";
    options.timeout = std::chrono::seconds(60);  // rank 1 never comes: a rendezvous would wait this long
    const auto start = std::chrono::steady_clock::now();
#ifdef BATON_HAVE_NCCL
    const char* reason = "needs a CUDA device on every rank, and rank 0 sees none";
#else
    const char* reason = "built on a LibTorch without NCCL";
#endif
    CHECK_THROWS_WITH_AS(Communicator::connect(env, options), doctest::Contains(reason), Error);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  }

  TEST_CASE("a one-rank NCCL group reduces and broadcasts a CUDA tensor (on a machine with a GPU)") {
#ifdef BATON_HAVE_NCCL
    if (!at::hasCUDA()) {
      MESSAGE("no CUDA device: the NCCL group is not created here (scripts/gpu-check.sh runs this on a GPU)");
      return;
    }
    c10d::TCPStoreOptions store_options = c10d_compat::tcp_store_options();
    store_options.port = static_cast<std::uint16_t>(free_port());
    store_options.isServer = true;
    store_options.numWorkers = 1;
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
    auto group = distributed_detail::make_nccl_group(store, 0, 1, 0, std::chrono::seconds(60));
    std::vector<at::Tensor> tensors{at::full({1000}, 2.5, at::TensorOptions().device(at::kCUDA))};
    group->allreduce(tensors)->wait();
    group->broadcast(tensors)->wait();
    // One rank: the sum and the broadcast leave the values as they were, on the GPU.
    CHECK(tensors[0].is_cuda());
    CHECK(tensors[0].sum().item<double>() == doctest::Approx(2500.0));
    MESSAGE("one-rank NCCL group on cuda:0: allreduce and broadcast done");
#else
    MESSAGE("this build has no NCCL backend");
#endif
  }

  TEST_CASE("collectives on two ranks over loopback") {
    run_ranks(2, [](std::shared_ptr<Communicator> group) {
      Communicator& comm = *group;
      const int r = comm.rank();
      CHECK(comm.world_size() == 2);

      // broadcast: rank 1 takes rank 0's values, also into a leaf that requires grad (a parameter)
      std::vector<at::Tensor> params{at::full({2, 3}, 1.0 + r).requires_grad_(), at::full({4}, 10.0 * (r + 1))};
      comm.broadcast(params);
      CHECK(params[0].sum().item<double>() == doctest::Approx(6 * 1.0));
      CHECK(params[1].sum().item<double>() == doctest::Approx(4 * 10.0));

      // average with a bucket of 16 bytes: several buckets, a mixed dtype, an undefined tensor skipped
      std::vector<at::Tensor> grads{at::full({3}, r == 0 ? 1.0f : 3.0f), at::Tensor(),
                                    at::full({2, 2}, r == 0 ? -2.0f : 6.0f), at::full({5}, r == 0 ? 0.5 : 1.5, at::kDouble),
                                    at::full({1}, r == 0 ? 7.0f : 8.0f)};
      comm.average(grads, 16);
      CHECK(grads[0].eq(2.0f).all().item<bool>());   // (1 + 3) / 2
      CHECK_FALSE(grads[1].defined());
      CHECK(grads[2].eq(2.0f).all().item<bool>());   // (-2 + 6) / 2
      CHECK(grads[3].eq(1.0).all().item<bool>());    // (0.5 + 1.5) / 2, double
      CHECK((grads[3].scalar_type() == at::kDouble));
      CHECK(grads[4].eq(7.5f).all().item<bool>());
      CHECK((grads[2].sizes() == at::IntArrayRef({2, 2})));

      std::vector<double> sums = comm.sum({1.5 * (r + 1), 10.0});
      CHECK(sums == std::vector<double>{4.5, 20.0});
      CHECK(comm.any(r == 1));
      CHECK_FALSE(comm.any(false));
      comm.barrier();
    });
  }

  TEST_CASE("reduce_scatter over Gloo at 2, 3 and 4 ranks: sums, means, float32 and bfloat16, one collective each") {
    // Rank r contributes input[i] = i * (r + 1), i in [0, 3W): chunks of 3. Element i summed over the ranks is
    // i * (1 + 2 + ... + W) = i * W(W+1)/2: i * 3 at W = 2, i * 6 at W = 3, i * 10 at W = 4; the mean is
    // i * (W+1)/2: i * 1.5, i * 2, i * 2.5. Rank r receives i = 3r, 3r+1, 3r+2. Every value (at most 11 * 10 = 110,
    // and 27.5 = 11011.1 in binary) has at most 8 significant bits, so bfloat16 holds them exactly.
    const std::map<int, std::vector<std::vector<double>>> sums{
        {2, {{0, 3, 6}, {9, 12, 15}}},
        {3, {{0, 6, 12}, {18, 24, 30}, {36, 42, 48}}},
        {4, {{0, 10, 20}, {30, 40, 50}, {60, 70, 80}, {90, 100, 110}}}};
    const std::map<int, std::vector<std::vector<double>>> means{
        {2, {{0, 1.5, 3}, {4.5, 6, 7.5}}},
        {3, {{0, 2, 4}, {6, 8, 10}, {12, 14, 16}}},
        {4, {{0, 2.5, 5}, {7.5, 10, 12.5}, {15, 17.5, 20}, {22.5, 25, 27.5}}}};
    for (int world : {2, 3, 4}) {
      CAPTURE(world);
      run_ranks(world, [&](std::shared_ptr<Communicator> group) {
        Communicator& comm = *group;
        const int r = comm.rank();
        for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
          at::Tensor input = (at::arange(3 * world, at::kFloat) * (r + 1)).to(dtype);
          const std::int64_t before = comm.collectives();
          at::Tensor sum = comm.reduce_scatter(input);
          CHECK(comm.collectives() == before + 1);
          at::Tensor mean = comm.reduce_scatter(input, true);
          CHECK(comm.collectives() == before + 2);
          CHECK((sum.scalar_type() == dtype));
          CHECK((mean.scalar_type() == dtype));
          CHECK(values_of(sum) == sums.at(world)[r]);
          CHECK(values_of(mean) == means.at(world)[r]);
          CHECK(values_of(input) == values_of((at::arange(3 * world, at::kFloat) * (r + 1))));  // left untouched
        }

        // bfloat16 accumulates in fp32: at 3 ranks, 256 + 1 + 1 in bf16 steps would be 256 (257 rounds to even,
        // 256, whose neighbours are 2 apart), while the fp32 sum 258 is itself a bf16 value.
        if (world == 3) {
          at::Tensor input = at::full({3}, r == 0 ? 256.0 : 1.0, at::kBFloat16);
          CHECK(values_of(comm.reduce_scatter(input)) == std::vector<double>{258});
        }

        // Refused before any communication: no collective counted, the ranks stay in step.
        const std::int64_t before = comm.collectives();
        const std::string w = std::to_string(world);
        const std::string odd = std::to_string(3 * world + 1);
        CHECK(error_text([&] { comm.reduce_scatter(at::zeros({3 * world + 1})); }) ==
              "reduce_scatter: the input's " + odd + " elements do not split into " + w +
                  " equal chunks, one per rank (" + odd + " is not a multiple of the world size " + w + ")");
        CHECK(error_text([&] { comm.reduce_scatter(at::zeros({world, 3})); }) ==
              "reduce_scatter: the input must be 1-D (world size " + w + " x chunk elements), not of shape [" + w +
                  ", 3] (2-D)");
        CHECK(error_text([&] { comm.reduce_scatter(at::zeros({world}, at::kLong), true); }) ==
              "reduce_scatter: the mean of an integer tensor (Long) would be truncated; reduce its sum instead");
        CHECK(comm.collectives() == before);
        // Integers sum exactly; an empty input needs no communication.
        CHECK(values_of(comm.reduce_scatter(at::full({2 * world}, r + 1, at::kLong))) ==
              std::vector<double>(2, world * (world + 1) / 2));
        CHECK(comm.reduce_scatter(at::zeros({0})).numel() == 0);
        CHECK(comm.collectives() == before + 1);
      });
    }
  }

  TEST_CASE("all_gather and reduce-scatters left in flight, over Gloo at 2, 3 and 4 ranks") {
    for (int world : {2, 3, 4}) {
      CAPTURE(world);
      run_ranks(world, [&](std::shared_ptr<Communicator> group) {
        Communicator& comm = *group;
        const int r = comm.rank();
        // all_gather: rank r's shard is [10 r, ..., 10 r + 4] (exact in bfloat16); the result is every rank's in
        // rank order, for a float, a bfloat16 and an integer shard, one collective each.
        for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
          const std::int64_t before = comm.collectives();
          at::Tensor gathered = comm.all_gather((at::arange(5, at::kLong) + 10 * r).to(dtype));
          CHECK(comm.collectives() == before + 1);
          CHECK((gathered.scalar_type() == dtype));
          std::vector<double> expected;
          for (int k = 0; k < world; ++k)
            for (int i = 0; i < 5; ++i) expected.push_back(10.0 * k + i);
          CHECK(values_of(gathered) == expected);
        }
        // Three reduce-scatters started before any is finished (a sharded backward keeps one in flight while it
        // computes the next bucket): each gives the sum (or mean) by hand; each is counted when started.
        std::vector<at::Tensor> inputs;
        for (int k = 0; k < 3; ++k) inputs.push_back(at::arange(4 * world, at::kFloat) * (r + 1) + k);
        const std::int64_t before = comm.collectives();
        std::vector<PendingReduceScatter> pending;
        for (int k = 0; k < 3; ++k) pending.push_back(comm.start_reduce_scatter(inputs[k], /*mean=*/k == 1));
        CHECK(comm.collectives() == before + 3);
        std::vector<at::Tensor> results;
        for (auto& p : pending) results.push_back(p.finish());
        CHECK(comm.collectives() == before + 3);
        for (int k = 0; k < 3; ++k) {
          // Element i of chunk r summed over the ranks: i (1 + ... + W) + k W; the mean divides by W.
          std::vector<double> expected;
          for (int i = 4 * r; i < 4 * r + 4; ++i) {
            const double sum = i * world * (world + 1) / 2.0 + k * world;
            expected.push_back(k == 1 ? sum / world : sum);
          }
          CHECK(values_of(results[static_cast<std::size_t>(k)]) == expected);
        }
        CHECK(error_text([&] { pending[0].finish(); }) ==
              "reduce_scatter: finish() on a reduce-scatter that was never started or already finished");
      });
    }
  }

  TEST_CASE("a peer that never arrives is reported within the timeout") {
    DistributedEnv env;
    env.rank = 0;
    env.world_size = 2;
    env.master_addr = "127.0.0.1";
    env.master_port = free_port();
    CommunicatorOptions options;
    options.timeout = std::chrono::milliseconds(2000);
    auto started = std::chrono::steady_clock::now();
    std::string message;
    try {
      Communicator::connect(env, options);
    } catch (const Error& e) {
      message = e.what();
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    INFO(message);
    CHECK(message.find("rank 0 of 2") != std::string::npos);
    CHECK(message.find("127.0.0.1") != std::string::npos);
    CHECK(seconds < 15);
  }
}
