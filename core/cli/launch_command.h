#pragma once
// `baton launch --nproc N [--nnodes M --node-rank R --master-addr A --master-port P] <baton arguments…>`: runs the
// N ranks of this machine of a data-parallel run, as torchrun does: each is this executable with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and MASTER_PORT set. On one machine the address is
// 127.0.0.1 and the port a free one; on several, every node's launcher is given node 0's address and port.
#include <string>
#include <vector>

namespace baton::cli {

struct LaunchOptions {
  int nproc = 1;                  // ranks on this machine
  int nnodes = 1;                 // machines, each with its own launcher and nproc ranks
  int node_rank = 0;              // this machine's place: its ranks are node_rank * nproc … + nproc - 1
  std::string master_addr;        // node 0's address (rank 0 hosts the rendezvous there); 127.0.0.1 by default
  int master_port = 0;            // its port; 0: a free port, for a one-machine run
  std::vector<std::string> args;  // the baton command line each rank runs, e.g. {"train", "cfg.toml"}
  double grace_seconds = 10;      // after SIGTERM, how long a rank may take to exit before SIGKILL
};

/// What is wrong with the options (a usage error, exit 2), or "" when they can run.
std::string launch_usage_error(const LaunchOptions& options);

/// Runs the ranks and returns the exit status: 0 when every rank succeeded, 130 when interrupted (a rank exiting
/// 130 is one that stopped cleanly after a signal: the others are waited for), 1 when a rank failed (the others
/// are ended: SIGTERM, then SIGKILL after the grace period; the failing rank is named on stderr). Each line a rank
/// prints is prefixed "[rank k] " (k the global rank). SIGINT and SIGTERM are forwarded to the ranks; a launcher
/// that is killed outright takes its ranks with it (they get SIGKILL), so the other machines' ranks see a peer exit
/// and fail with an error rather than wait on orphans.
int launch(const LaunchOptions& options);

}  // namespace baton::cli
