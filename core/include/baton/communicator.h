#pragma once
// Data-parallel communication: the rendezvous from torchrun's variables and the few collectives training and a
// sharded EMA need, on a c10d process group (Gloo). c10d stays inside the library: this header needs only ATen's
// Tensor. The trainer owns one (TrainerOptions::communicator) and lends it to plugins as RunFacts::communicator (State::facts).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/export.h"

namespace baton {

/// torchrun's variables. Without WORLD_SIZE (or with WORLD_SIZE=1) the run is a single process.
struct BATON_API DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this machine (LOCAL_WORLD_SIZE; default WORLD_SIZE)
  std::string master_addr;
  int master_port = 0;
  /// torchrun's agent already hosts the TCPStore at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True):
  /// every rank, rank 0 included, joins it as a client, under the key prefix of its restart attempt
  /// (TORCHELASTIC_RESTART_COUNT).
  bool agent_store = false;
  int restart_count = 0;
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE and
/// TORCHELASTIC_RESTART_COUNT through `lookup` (null when unset). Throws Error naming the variable that is missing or
/// not a valid number.
BATON_API DistributedEnv read_distributed_env(const std::function<const char*(const char*)>& lookup);
/// The same from the process environment.
BATON_API DistributedEnv read_distributed_env();

struct BATON_API CommunicatorOptions {
  /// "gloo" (CPU tensors), or "nccl" (CUDA tensors; device LOCAL_RANK becomes this process's current device). A
  /// build on a LibTorch without NCCL refuses "nccl".
  std::string backend = "gloo";
  std::chrono::milliseconds timeout{60000};  // rendezvous and every collective
};

/// A reduce-scatter started by Communicator::start_reduce_scatter and not yet waited for: the collective runs on the
/// backend's threads while the caller goes on (a sharded step's backward computes the next bucket's gradients).
/// finish() waits for it and returns what Communicator::reduce_scatter returns; every rank finishes its reduces in
/// the order it started them. Dropped unfinished, the collective still completes (its tensors stay with it).
class BATON_API PendingReduceScatter {
 public:
  PendingReduceScatter();
  ~PendingReduceScatter();
  PendingReduceScatter(PendingReduceScatter&&) noexcept;
  PendingReduceScatter& operator=(PendingReduceScatter&&) noexcept;
  /// Waits (once) and returns this rank's chunk; throws Error as reduce_scatter does when a peer fails.
  at::Tensor finish();

 private:
  friend class Communicator;
  struct State;
  std::unique_ptr<State> state_;
};

class BATON_API Communicator {
 public:
  static constexpr std::size_t kDefaultBucketBytes = std::size_t{25} << 20;

  /// Joins the process group described by `env`; null for a world of one (no process group at all).
  static std::shared_ptr<Communicator> connect(const DistributedEnv& env, const CommunicatorOptions& options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int world_size() const;
  /// The device of the tensors the collectives take: "cpu" for Gloo, "cuda:<LOCAL_RANK>" for NCCL.
  std::string device() const;

  /// Every rank's tensors take `root`'s values (in place).
  void broadcast(const std::vector<at::Tensor>& tensors, int root = 0);
  /// Replaces each tensor by its mean over the ranks: tensors are flattened into buckets of about `bucket_bytes`
  /// (one allreduce each) and copied back. Undefined tensors are skipped.
  void average(const std::vector<at::Tensor>& tensors, std::size_t bucket_bytes = kDefaultBucketBytes);
  /// Element-wise sums over the ranks (metrics: sums and counts).
  std::vector<double> sum(const std::vector<double>& values);
  /// True on every rank when `flag` is true on any.
  bool any(bool flag);
  void barrier();
  /// Every rank's `shard` (1-D, the same size on every rank) concatenated in rank order.
  at::Tensor all_gather(const at::Tensor& shard);
  /// The reduce-scatter: `input` is 1-D with world_size() * chunk elements, the same size on every rank; returns
  /// this rank's chunk r, the element-wise sum over the ranks of input[r * chunk, (r + 1) * chunk), or their mean
  /// when `mean` (floating dtypes only). Each rank sends and receives (W - 1) / W of the input's bytes, half of
  /// what an all-reduce moves. One collective; an empty input returns an empty tensor with no communication (every
  /// rank has the same size, so all skip alike). Throws Error when `input` is not 1-D or its size is not a
  /// multiple of the world size.
  at::Tensor reduce_scatter(const at::Tensor& input, bool mean = false);
  /// The same reduce-scatter, started and not waited for (PendingReduceScatter::finish). Input errors throw here.
  PendingReduceScatter start_reduce_scatter(const at::Tensor& input, bool mean = false);
  /// Collectives issued so far by this rank (for tests and benchmarks); one left in flight counts when started.
  std::int64_t collectives() const;

 private:
  friend class PendingReduceScatter;  // finishes its collective through Impl
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
