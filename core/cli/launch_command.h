#pragma once
// `baton launch --nproc N <baton arguments…>`: runs N ranks of a data-parallel run on this machine, as torchrun
// does: each is this executable with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and
// MASTER_PORT (a free port) set.
#include <string>
#include <vector>

namespace baton::cli {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> args;  // the baton command line each rank runs, e.g. {"train", "cfg.toml"}
  double grace_seconds = 10;      // after SIGTERM, how long a rank may take to exit before SIGKILL
};

/// Runs the ranks and returns the exit status: 0 when every rank succeeded, 130 when interrupted (a rank exiting
/// 130 is one that stopped cleanly after a signal: the others are waited for), 1 when a rank failed (the others
/// are ended: SIGTERM, then SIGKILL after the grace period; the failing rank is named on stderr). Each line a rank
/// prints is prefixed "[rank k] ". SIGINT and SIGTERM are forwarded to the ranks.
int launch(const LaunchOptions& options);

}  // namespace baton::cli
