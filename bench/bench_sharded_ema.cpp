// Sharded EMA memory and communication for W = 2 ranks (two threads of this process joined over loopback Gloo): the
// EMA bytes each rank holds against the full EMA, and the collectives issued per update (targets <= 1/W + 1 %, 0).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "baton/communicator.h"
#include "baton/ema.h"

namespace {

constexpr int kWorld = 2;
constexpr int kUpdates = 200;

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return 29517;
  ::close(fd);
  return ntohs(addr.sin_port);
}

struct RankResult {
  double bytes_ratio = 0;
  double collectives_per_update = 0;
  double update_ms = 0;
  std::string error;
};

RankResult run_rank(int rank, int port) {
  RankResult result;
  try {
    baton::DistributedEnv env;
    env.rank = rank;
    env.world_size = kWorld;
    env.master_addr = "127.0.0.1";
    env.master_port = port;
    auto comm = baton::Communicator::connect(env, baton::CommunicatorOptions{});
    // An mlp of Fashion-MNIST size, 1.3 M parameters.
    torch::nn::Sequential model(torch::nn::Linear(784, 1024), torch::nn::Linear(1024, 512), torch::nn::Linear(512, 10));
    comm->broadcast(model->parameters());
    baton::EmaOptions options;
    options.smoothing = 0.999;
    options.threads = 1;  // the two ranks share this machine's cores
    options.shard_over = comm;
    baton::ExponentialMovingAverage ema(*model, options);
    std::int64_t before = comm->collectives();
    auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < kUpdates; ++i) ema.update(*model);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    result.collectives_per_update = static_cast<double>(comm->collectives() - before) / kUpdates;
    result.bytes_ratio = static_cast<double>(ema.bytes()) / static_cast<double>(ema.full_bytes());
    result.update_ms = 1000 * seconds / kUpdates;
    ema.state_dict();  // the full EMA is still available (one allgather), as for a checkpoint
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

}  // namespace

int main() {
  const int port = free_port();
  std::vector<RankResult> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) threads.emplace_back([&, r] { results[r] = run_rank(r, port); });
  for (auto& t : threads) t.join();
  double ratio = 0, collectives = 0;
  for (int r = 0; r < kWorld; ++r) {
    if (!results[r].error.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", r, results[r].error.c_str());
      return 1;
    }
    std::printf("rank %d: EMA bytes / full EMA bytes = %.6f, collectives per update = %.0f, update %.3f ms\n", r,
                results[r].bytes_ratio, results[r].collectives_per_update, results[r].update_ms);
    ratio = std::max(ratio, results[r].bytes_ratio);
    collectives = std::max(collectives, results[r].collectives_per_update);
  }
  std::printf("RESULT ema_bytes_per_rank_ratio=%.6f collectives_per_update=%.0f\n", ratio, collectives);
  return 0;
}
