#pragma once
// `baton checkpoint info FOLDER`: what a checkpoint holds (its time, the world size, mode and batch that wrote it, its
// files, each rank's shard files) and what a resume at W ranks would read of its shard files on each rank against
// the bytes that rank takes, computed from the files' headers without reading their tensors; --verify checks every
// file's size and crc32.
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace baton::cli {

struct CheckpointArgs {
  std::string folder;
  std::vector<int> worlds;  // --world; default: 1, the writer's and twice the writer's
  bool verify = false;
};

/// Adds `checkpoint` and its `info` subcommand to `app`.
CLI::App* add_checkpoint_subcommand(CLI::App& app, CheckpointArgs& args);

/// Runs it: 0 on success; throws baton errors (a damaged checkpoint: CheckpointError naming the file).
int run_checkpoint(const CheckpointArgs& args);

}  // namespace baton::cli
