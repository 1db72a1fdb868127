#include "baton/communicator.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include <ATen/Context.h>
#include <ATen/ops/add.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/tensor.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "baton/error.h"
#include "distributed/c10d_compat.h"
#ifdef BATON_HAVE_NCCL
#include "distributed/nccl_group.h"
#endif

namespace baton {
namespace {

std::string shape_text(at::IntArrayRef sizes) {
  std::string text = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "]";
}

std::string seconds_text(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count() / 1000) + " s";
}

// c10's what() carries a C++ backtrace; users need only the message.
std::string message_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

int parse_int(const std::function<const char*(const char*)>& lookup, const char* name, bool required, int fallback,
              long min, long max) {
  const char* text = lookup(name);
  if (text == nullptr || *text == '\0') {
    if (required)
      throw Error(std::string("distributed run: the environment variable ") + name +
                  " is not set (a launcher such as `baton launch` or torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, "
                  "MASTER_ADDR and MASTER_PORT)");
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max)
    throw Error(std::string("distributed run: ") + name + "=\"" + text + "\" is not an integer in [" +
                std::to_string(min) + ", " + std::to_string(max) + "]");
  return static_cast<int>(value);
}

bool is_loopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address == "localhost" || address == "::1";
}

// The interface Gloo binds: GLOO_SOCKET_IFNAME when set (as in PyTorch), the loopback address for a one-machine
// run, otherwise the address this machine's hostname resolves to.
std::shared_ptr<::gloo::transport::Device> make_device(const std::string& master_addr) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface != nullptr && *interface != '\0')
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  if (is_loopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname(master_addr);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

DistributedEnv read_distributed_env(const std::function<const char*(const char*)>& lookup) {
  DistributedEnv env;
  env.world_size = parse_int(lookup, "WORLD_SIZE", false, 1, 1, 1 << 20);
  if (env.world_size == 1) return env;
  env.rank = parse_int(lookup, "RANK", true, 0, 0, env.world_size - 1);
  env.local_rank = parse_int(lookup, "LOCAL_RANK", false, env.rank, 0, env.world_size - 1);
  env.local_world_size = parse_int(lookup, "LOCAL_WORLD_SIZE", false, env.world_size, 1, env.world_size);
  const char* addr = lookup("MASTER_ADDR");
  if (addr == nullptr || *addr == '\0')
    throw Error("distributed run: the environment variable MASTER_ADDR is not set (the address of rank 0's machine)");
  env.master_addr = addr;
  env.master_port = parse_int(lookup, "MASTER_PORT", true, 0, 1, 65535);
  // torchrun (LibTorch 1.9 and later) hosts the store in its agent and says so; Python's rendezvous reads the same
  // variable, with the same spelling of true.
  const char* agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != nullptr && std::string(agent) == "True";
  if (env.agent_store) env.restart_count = parse_int(lookup, "TORCHELASTIC_RESTART_COUNT", false, 0, 0, 1 << 20);
  return env;
}

DistributedEnv read_distributed_env() {
  return read_distributed_env([](const char* name) -> const char* { return std::getenv(name); });
}

struct Communicator::Impl {
  int rank = 0;
  int world_size = 1;
  std::chrono::milliseconds timeout{0};
  c10::Device device{c10::kCPU};  // where the collectives' own tensors (sums, flags) live: NCCL reduces on the GPU
  std::int64_t collectives = 0;
  bool nccl = false;  // the group is NCCL's (it has a native reduce-scatter), else Gloo's
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d_compat::Group> group;  // the one backend this process uses

  // Waits for a collective; a peer that died or hung becomes an error that says so, within the timeout.
  // `counted`: the collective was counted when it was started (one left in flight).
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what, bool counted = false) {
    if (!counted) ++collectives;
    try {
      work->wait();
    } catch (const std::exception& e) {
      throw Error(std::string("distributed ") + what + " failed on rank " + std::to_string(rank) + " of " +
                  std::to_string(world_size) + " (a peer rank exited or did not answer within " +
                  seconds_text(timeout) + "): " + message_of(e));
    }
  }

  void allreduce(at::Tensor& flat) {
    std::vector<at::Tensor> list{flat};
    wait(group->allreduce(list), "allreduce");
  }

  void broadcast(at::Tensor& flat, int root) {
    std::vector<at::Tensor> list{flat};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    wait(group->broadcast(list, options), "broadcast");
  }

  // Runs `op` on consecutive runs of same-dtype, same-device tensors of about `bucket_bytes`, flattened into one
  // tensor each, then copies the results back.
  template <class Op>
  void bucketed(const std::vector<at::Tensor>& tensors, std::size_t bucket_bytes, Op op) {
    c10::NoGradGuard no_grad;  // the tensors may be parameters: their values change, not their autograd history
    std::vector<at::Tensor> bucket;
    std::size_t bytes = 0;
    auto flush = [&] {
      if (bucket.empty()) return;
      std::vector<at::Tensor> flat_parts;
      for (const auto& t : bucket) flat_parts.push_back(t.reshape({-1}));
      at::Tensor flat = at::cat(flat_parts);
      op(flat);
      std::int64_t offset = 0;
      for (auto& t : bucket) {
        t.copy_(flat.slice(0, offset, offset + t.numel()).view(t.sizes()));
        offset += t.numel();
      }
      bucket.clear();
      bytes = 0;
    };
    for (const auto& t : tensors) {
      if (!t.defined()) continue;
      if (!bucket.empty() && (bucket.front().scalar_type() != t.scalar_type() ||
                              bucket.front().device() != t.device() || bytes >= bucket_bytes))
        flush();
      bucket.push_back(t);
      bytes += t.numel() * t.element_size();
    }
    flush();
  }
};

std::shared_ptr<Communicator> Communicator::connect(const DistributedEnv& env, const CommunicatorOptions& options) {
  if (env.world_size <= 1) return nullptr;
#ifndef BATON_HAVE_NCCL
  if (options.backend == "nccl")
    throw Error(std::string("[distributed] backend = \"nccl\": this baton is built on a LibTorch without NCCL") +
                (at::hasCUDA() ? "" : " or CUDA") +
                "; use backend = \"gloo\", or build baton against a CUDA LibTorch (cmake -DTorch_DIR=...)");
#endif
  if (options.backend != "gloo" && options.backend != "nccl")
    throw Error("[distributed] backend = \"" + options.backend + "\": expected \"gloo\" or \"nccl\"");
  // Before the rendezvous: a rank that cannot run NCCL says so at once instead of after every rank has joined
  // (a CUDA LibTorch on a machine without a GPU runs CPU tensors, and Gloo, but no NCCL group).
  if (options.backend == "nccl" && !at::hasCUDA())
    throw Error("[distributed] backend = \"nccl\" needs a CUDA device on every rank, and rank " +
                std::to_string(env.rank) + " sees none (this LibTorch has CUDA, this machine no visible GPU); use "
                "backend = \"gloo\" to run on the CPU");
  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  impl->world_size = env.world_size;
  impl->timeout = options.timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions store_options = c10d_compat::tcp_store_options();
    store_options.port = static_cast<std::uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0 && !env.agent_store;  // under torchrun the agent is the server
    store_options.numWorkers = static_cast<std::size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    impl->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    // The agent's store outlives restarts: each attempt's keys live under their own prefix, as Python's ranks do.
    if (env.agent_store)
      impl->store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count),
                                                           impl->store);
  } catch (const std::exception& e) {
    throw Error("distributed rendezvous at MASTER_ADDR:MASTER_PORT = " + where + " failed on rank " +
                std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " (waited up to " +
                seconds_text(options.timeout) + "): " + message_of(e));
  }
#ifdef BATON_HAVE_NCCL
  if (options.backend == "nccl") {
    try {
      impl->group = distributed_detail::make_nccl_group(impl->store, env.rank, env.world_size, env.local_rank,
                                                       options.timeout);
    } catch (const std::exception& e) {
      throw Error("distributed: creating the NCCL process group (rendezvous at " + where + ") failed on rank " +
                  std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " on cuda:" +
                  std::to_string(env.local_rank) + ": " + message_of(e));
    }
    impl->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
    impl->nccl = true;
    return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
  }
#endif
  try {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(make_device(env.master_addr));
    impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, env.rank, env.world_size, gloo_options);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("distributed: creating the Gloo process group (rendezvous at " + where + ") failed on rank " +
                std::to_string(env.rank) + " of " + std::to_string(env.world_size) + " (waited up to " +
                seconds_text(options.timeout) + " for every rank): " + message_of(e));
  }
  return std::shared_ptr<Communicator>(new Communicator(std::move(impl)));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank; }
int Communicator::world_size() const { return impl_->world_size; }
std::string Communicator::device() const { return impl_->device.str(); }

void Communicator::broadcast(const std::vector<at::Tensor>& tensors, int root) {
  impl_->bucketed(tensors, kDefaultBucketBytes, [&](at::Tensor& flat) { impl_->broadcast(flat, root); });
}

void Communicator::average(const std::vector<at::Tensor>& tensors, std::size_t bucket_bytes) {
  const double ranks = static_cast<double>(impl_->world_size);
  impl_->bucketed(tensors, bucket_bytes, [&](at::Tensor& flat) {
    impl_->allreduce(flat);
    flat.div_(ranks);
  });
}

std::vector<double> Communicator::sum(const std::vector<double>& values) {
  if (values.empty()) return {};
  at::Tensor flat = at::tensor(values, at::TensorOptions().dtype(at::kDouble)).to(impl_->device);
  impl_->allreduce(flat);
  flat = flat.cpu();
  const double* data = flat.data_ptr<double>();
  return std::vector<double>(data, data + values.size());
}

bool Communicator::any(bool flag) { return sum({flag ? 1.0 : 0.0}).front() > 0; }

void Communicator::barrier() { impl_->wait(impl_->group->barrier(), "barrier"); }

at::Tensor Communicator::all_gather(const at::Tensor& shard) {
  // Gathered as bytes: an allgather only moves data, and Gloo does not take every dtype (bf16). Each rank's part
  // is received straight into its place in the result (views of one buffer), not into W tensors joined after: a
  // copy of the whole gathered size saved (a sharded step gathers every parameter each step).
  at::Tensor input = shard.contiguous().reshape({-1}).view(at::kByte);
  const std::int64_t bytes = input.numel();
  const int world = impl_->world_size;
  at::Tensor gathered = at::empty({world * bytes}, input.options());
  if (impl_->nccl) {
    std::vector<at::Tensor> inputs{input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < world; ++r) outputs[0].push_back(gathered.narrow(0, r * bytes, bytes));
    impl_->wait(impl_->group->allgather(outputs, inputs), "allgather");
    return gathered.view(shard.scalar_type());
  }
  // Gloo: an all-to-all whose every chunk is this rank's shard. Gloo's own allgather gathers into a flat buffer of
  // its own and copies it out, over a ring; the all-to-all exchanges the same bytes pairwise and took 0.7-0.9 x its
  // time for 2-8 MB shards at 2 and 4 ranks (LibTorch 1.13 and 2.15 alike), the copy of the shard into each chunk
  // included. Its buffers are the size of allgather's own.
  at::Tensor send = at::empty({world * bytes}, input.options());
  if (input.is_cpu()) {
    const auto* source = static_cast<const char*>(input.data_ptr());
    auto* target = static_cast<char*>(send.data_ptr());
    for (int r = 0; r < world; ++r) std::memcpy(target + r * bytes, source, static_cast<std::size_t>(bytes));
  } else {
    for (int r = 0; r < world; ++r) send.narrow(0, r * bytes, bytes).copy_(input);
  }
  std::vector<std::int64_t> equal_splits;
  impl_->wait(impl_->group->alltoall_base(gathered, send, equal_splits, equal_splits), "allgather");
  return gathered.view(shard.scalar_type());
}

struct PendingReduceScatter::State {
  Communicator::Impl* impl = nullptr;
  c10::intrusive_ptr<c10d::Work> work;  // null when there was nothing to send (`result` is the answer)
  at::Tensor send;                      // kept alive until the collective is done
  at::Tensor result;                    // NCCL: this rank's chunk (summed in place); Gloo: every rank's chunk r
  at::ScalarType dtype = at::kFloat;
  int world = 1;
  std::int64_t chunk = 0;
  bool mean = false;
  bool sum_parts = false;  // Gloo: `result` holds the W parts, summed here
};

PendingReduceScatter::PendingReduceScatter() = default;
PendingReduceScatter::~PendingReduceScatter() = default;
PendingReduceScatter::PendingReduceScatter(PendingReduceScatter&&) noexcept = default;
PendingReduceScatter& PendingReduceScatter::operator=(PendingReduceScatter&&) noexcept = default;

at::Tensor PendingReduceScatter::finish() {
  if (!state_) throw Error("reduce_scatter: finish() on a reduce-scatter that was never started or already finished");
  const std::unique_ptr<State> state = std::move(state_);
  c10::NoGradGuard no_grad;
  if (!state->work) return state->result;
  state->impl->wait(state->work, "reduce_scatter", /*counted=*/true);
  const int world = state->world;
  if (!state->sum_parts) {
    if (state->mean) state->result.div_(static_cast<double>(world));
    return state->result;
  }
  at::Tensor parts = state->result.view(state->dtype).view({world, state->chunk});
  // Summed in rank order, one element-wise add per rank: the same rounding on every platform and LibTorch version
  // (a reduction kernel's order may change between versions). bf16 and half accumulate in fp32 and round once at
  // the end (the mean too): summing in the narrow type would round after every add, so the result would lose bits
  // with each rank; fp32 carries 16 more mantissa bits than bf16, so a sum of a few ranks' values rounds only once.
  const at::ScalarType dtype = state->dtype;
  const bool narrow = dtype == at::kBFloat16 || dtype == at::kHalf;
  // The first add writes a new tensor (one pass over two parts rather than a copy and then an add).
  at::Tensor sum = narrow ? parts[0].to(at::kFloat) : world > 1 ? at::add(parts[0], parts[1]) : parts[0].clone();
  for (int r = narrow ? 1 : 2; r < world; ++r) sum.add_(parts[r]);
  if (state->mean) sum.div_(static_cast<double>(world));
  return narrow ? sum.to(dtype) : sum;
}

at::Tensor Communicator::reduce_scatter(const at::Tensor& input, bool mean) {
  return start_reduce_scatter(input, mean).finish();
}

PendingReduceScatter Communicator::start_reduce_scatter(const at::Tensor& input, bool mean) {
  const int world = impl_->world_size;
  if (input.dim() != 1)
    throw Error("reduce_scatter: the input must be 1-D (world size " + std::to_string(world) +
                " x chunk elements), not of shape " + shape_text(input.sizes()) + " (" +
                std::to_string(input.dim()) + "-D)");
  const std::int64_t numel = input.numel();
  if (numel % world != 0)
    throw Error("reduce_scatter: the input's " + std::to_string(numel) + " elements do not split into " +
                std::to_string(world) + " equal chunks, one per rank (" + std::to_string(numel) +
                " is not a multiple of the world size " + std::to_string(world) + ")");
  const at::ScalarType dtype = input.scalar_type();
  if (dtype == at::kBool || c10::isComplexType(dtype))
    throw Error(std::string("reduce_scatter: cannot sum a tensor of dtype ") + c10::toString(dtype));
  if (mean && !c10::isFloatingType(dtype))
    throw Error(std::string("reduce_scatter: the mean of an integer tensor (") + c10::toString(dtype) +
                ") would be truncated; reduce its sum instead");
  PendingReduceScatter pending;
  pending.state_ = std::make_unique<PendingReduceScatter::State>();
  PendingReduceScatter::State& state = *pending.state_;
  state.impl = impl_.get();
  state.dtype = dtype;
  state.world = world;
  state.chunk = numel / world;
  state.mean = mean;
  c10::NoGradGuard no_grad;  // gradients are reduced as values, outside any autograd graph
  if (state.chunk == 0) {
    state.result = at::empty({0}, input.options());
    return pending;
  }
  at::Tensor flat = input.contiguous();
#ifdef BATON_HAVE_NCCL
  if (impl_->nccl) {
    // NCCL's own ring reduce-scatter, named _reduce_scatter_base in every LibTorch baton builds on (see
    // c10d_compat.h). The mean is the sum divided afterwards, as average() does.
    state.send = flat;
    state.result = at::empty({state.chunk}, input.options());
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    state.work = impl_->group->_reduce_scatter_base(state.result, flat, options);
    ++impl_->collectives;
    return pending;
  }
#endif
  // Gloo has no reduce-scatter of its own worth using (1.13 throws; 2.x all-reduces the whole input, twice the
  // bytes, and sums only), so: an all-to-all sends chunk j to rank j and brings every rank's chunk r here, then a
  // local sum (in finish). Moved as bytes, since the all-to-all only moves data and Gloo does not take every dtype
  // (bf16); equal splits (empty split lists) cut the byte view at chunk boundaries because its size is world x
  // chunk x element size.
  state.send = flat.view(at::kByte);
  state.result = at::empty_like(state.send);
  state.sum_parts = true;
  std::vector<std::int64_t> equal_splits;
  state.work = impl_->group->alltoall_base(state.result, state.send, equal_splits, equal_splits);
  ++impl_->collectives;
  return pending;
}

std::int64_t Communicator::collectives() const { return impl_->collectives; }

}  // namespace baton
