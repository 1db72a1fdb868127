#include "data/prefetch_loader.h"

#include <pthread.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "baton/error.h"
#include "data/sampler.h"

namespace baton {
namespace {

// Dataset::get runs its ATen operations on one thread, in a worker and in the caller's thread alike. In a worker,
// because LibTorch's OpenMP gives every thread that starts a parallel region a team of its own: each worker would
// bring as many threads as there are cores, spinning beside the training step's team on the same cores. In the
// caller's thread (workers = 0), so that a dataset whose get reduces (a per-batch mean) rounds exactly as it does
// in a worker, and a run stays bitwise the same whatever `workers` is. OpenMP's thread count is a per-thread
// setting: this touches neither the training thread's count nor at::set_num_threads' process-wide one.
class OneIntraOpThread {
 public:
  OneIntraOpThread() {
#ifdef _OPENMP
    // LibTorch sets a thread's OpenMP count at the thread's first parallel call (a lazy per-thread init); run that
    // init now, or it would set the count back later. Both: the inline lazy_init's flag is this library's copy,
    // and LibTorch 2.x keeps its own inside get_num_threads (a worker then ran get on 2 threads on Debian 13).
    at::internal::lazy_init_num_threads();
    (void)at::get_num_threads();
    saved_ = omp_get_max_threads();
    omp_set_num_threads(1);
#endif
  }
  ~OneIntraOpThread() {
#ifdef _OPENMP
    omp_set_num_threads(saved_);
#endif
  }
  OneIntraOpThread(const OneIntraOpThread&) = delete;
  OneIntraOpThread& operator=(const OneIntraOpThread&) = delete;

 private:
  int saved_ = 1;
};

// What c10's errors say without their C++ backtrace, which is noise in a message about a dataset.
std::string message_of(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// A thread running `body`. Taking a std::function keeps the loader's own types out of std::thread's and
// std::vector's template instantiations, which libbaton would otherwise export as weak baton:: symbols.
std::thread start_thread(std::function<void()> body) { return std::thread(std::move(body)); }

}  // namespace

BatchPlan sampler_plan(const BatchSampler& sampler, std::int64_t epoch, std::int64_t batch_in_epoch,
                       std::int64_t count) {
  const std::int64_t per_epoch = sampler.batches_per_epoch();
  const std::int64_t first = epoch * per_epoch + batch_in_epoch;
  BatchPlan plan;
  plan.count = count;
  // The copy's permutation cache is its own; the plan calls it one batch at a time (BatchPlan::indices).
  plan.indices = [copy = sampler, first, per_epoch](std::int64_t k) {
    return copy.batch_indices((first + k) / per_epoch, (first + k) % per_epoch);
  };
  plan.describe = [first, per_epoch](std::int64_t k) {
    return "batch " + std::to_string((first + k) % per_epoch) + " of epoch " + std::to_string((first + k) / per_epoch) +
           " (counted from 0)";
  };
  return plan;
}

BatchPlan sequential_plan(std::int64_t begin, std::int64_t end, std::int64_t batch_size) {
  if (batch_size < 1) throw Error("loader: batch size must be at least 1, got " + std::to_string(batch_size));
  BatchPlan plan;
  plan.count = end > begin ? (end - begin + batch_size - 1) / batch_size : 0;
  plan.indices = [begin, end, batch_size](std::int64_t k) {
    const std::int64_t from = begin + k * batch_size;
    return at::arange(from, std::min(end, from + batch_size), at::kLong);
  };
  plan.describe = [begin, end, batch_size](std::int64_t k) {
    const std::int64_t from = begin + k * batch_size;
    return "rows " + std::to_string(from) + " to " + std::to_string(std::min(end, from + batch_size) - 1);
  };
  return plan;
}

struct PrefetchLoader::Impl {
  // One fetched batch, or the error its fetch ended with.
  struct Slot {
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };

  Impl(const Dataset& data_in, BatchPlan plan_in, PrefetchOptions options_in)
      : data(data_in), plan(std::move(plan_in)), options(options_in), pin(options.device.is_cuda()) {
    if (options.workers < 0) throw Error("loader: workers must be >= 0, got " + std::to_string(options.workers));
    if (options.workers > 0 && options.prefetch < options.workers)
      throw Error("loader: prefetch (" + std::to_string(options.prefetch) + ") must be at least workers (" +
                  std::to_string(options.workers) + "): each worker fetches one of the batches ahead");
    if (!plan.indices) throw Error("loader: the plan has no indices function");
  }

  // The dataset's batch, pinned for a CUDA device. The copy into pinned memory is made here, on the worker, so the
  // consumer's only copy is the asynchronous one to the device.
  Batch fetch(const at::Tensor& indices) const {
    Batch batch = data.get(indices);
    if (pin)
      for (auto& field : batch) field.second = field.second.pin_memory();
    return batch;
  }

  [[noreturn]] void rethrow(std::exception_ptr error, std::int64_t k) const {
    const std::string which = plan.describe ? plan.describe(k) : "batch " + std::to_string(k);
    const std::string name = data.name.empty() ? "the dataset" : "dataset '" + data.name + "'";
    throw Error(name + ", " + which + ": " + message_of(std::move(error)));
  }

  Batch next_synchronous() {
    const std::int64_t k = taken++;
    try {
      // As on a worker: no autograd graph (GradMode is per thread), one intra-op thread.
      c10::NoGradGuard no_grad;
      OneIntraOpThread one_thread;
      return fetch(plan.indices(k));
    } catch (...) {
      rethrow(std::current_exception(), k);
    }
  }

  void work() {
    pthread_setname_np(pthread_self(), "baton-loader");
    // Grad mode is thread-local and on by default in a new thread: without this, a get that computes on tensors
    // requiring grad would record a graph no one backpropagates. Autocast, also thread-local, is off here.
    c10::NoGradGuard no_grad;
    OneIntraOpThread one_thread;
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      // A batch may be claimed while fewer than `prefetch` are ahead of the consumer, fetched or being fetched.
      claim.wait(lock, [&] { return stopping || (claimed < plan.count && claimed < taken + options.prefetch); });
      if (stopping) return;
      const std::int64_t k = claimed++;
      Slot& slot = slots[static_cast<std::size_t>(k % options.prefetch)];
      // Indices in claim order, under the lock: the plan's state is not shared by two threads at once.
      at::Tensor indices;
      std::exception_ptr error;
      try {
        indices = plan.indices(k);
      } catch (...) {
        error = std::current_exception();
      }
      lock.unlock();
      Batch batch;
      if (!error) {
        try {
          batch = fetch(indices);
        } catch (...) {
          error = std::current_exception();
        }
      }
      lock.lock();
      slot.batch = std::move(batch);
      slot.error = std::move(error);
      slot.ready = true;
      ready.notify_all();
    }
  }

  Batch next() {
    if (options.workers == 0) return next_synchronous();
    std::unique_lock<std::mutex> lock(mutex);
    const std::int64_t k = taken;
    Slot& slot = slots[static_cast<std::size_t>(k % options.prefetch)];
    ready.wait(lock, [&] { return slot.ready; });
    Slot done = std::move(slot);
    slot = Slot{};
    taken += 1;
    lock.unlock();
    claim.notify_one();  // a place ahead has opened
    if (done.error) rethrow(std::move(done.error), k);
    return std::move(done.batch);
  }

  void start() {
    if (options.workers == 0) return;
    slots.resize(static_cast<std::size_t>(options.prefetch));
    threads.reserve(static_cast<std::size_t>(options.workers));
    try {
      for (int i = 0; i < options.workers; ++i) threads.push_back(start_thread([this] { work(); }));
    } catch (...) {
      stop();
      throw;
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    claim.notify_all();
    for (auto& thread : threads) thread.join();
    threads.clear();
  }

  const Dataset& data;
  BatchPlan plan;
  PrefetchOptions options;
  bool pin;

  mutable std::mutex mutex;  // guards everything below but `threads`
  std::condition_variable claim;  // workers wait for a batch to claim (or the stop)
  std::condition_variable ready;  // the consumer waits for its batch
  std::vector<Slot> slots;        // batch k is in slots[k % prefetch]
  std::int64_t claimed = 0;       // batches claimed by workers: 0 .. claimed-1
  std::int64_t taken = 0;         // batches handed to the consumer: 0 .. taken-1
  bool stopping = false;
  std::vector<std::thread> threads;
};

PrefetchLoader::PrefetchLoader(const Dataset& data, BatchPlan plan, PrefetchOptions options)
    : impl_(std::make_unique<Impl>(data, std::move(plan), options)) {
  impl_->start();
}

PrefetchLoader::~PrefetchLoader() { impl_->stop(); }

Batch PrefetchLoader::next() {
  if (done())
    throw Error("loader: all " + std::to_string(impl_->plan.count) + " batches of the plan were taken already");
  return impl_->next();
}

std::int64_t PrefetchLoader::position() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->taken;
}

bool PrefetchLoader::done() const { return position() >= impl_->plan.count; }

Batch to_device(const Batch& batch, at::Device device) {
  Batch out;
  for (const auto& [name, t] : batch) {
    const bool non_blocking = device.is_cuda() && t.is_pinned();
    out.set(name, t.to(at::TensorOptions().device(device), non_blocking));
  }
  return out;
}

}  // namespace baton
