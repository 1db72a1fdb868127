#pragma once
// Test helper: W ranks of a process group as W threads of one process, joined over loopback.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "baton/communicator.h"

namespace baton::test {

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Runs `body(shared_ptr<Communicator>)` on `world` ranks, one thread each, joined over loopback; `adjust` may change
// each rank's DistributedEnv before it connects.
template <class Body, class Adjust>
inline void run_ranks(int world, Body body, Adjust adjust) {
  const int port = free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        DistributedEnv env;
        env.rank = rank;
        env.world_size = world;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        adjust(env);
        CommunicatorOptions options;
        options.timeout = std::chrono::milliseconds(20000);
        auto comm = Communicator::connect(env, options);
        body(comm);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) {
    const std::string failure = "rank " + std::to_string(rank) + ": " + errors[rank];
    CHECK_MESSAGE(errors[rank].empty(), failure);
  }
}

template <class Body>
inline void run_ranks(int world, Body body) {
  run_ranks(world, body, [](DistributedEnv&) {});
}

}  // namespace baton::test
