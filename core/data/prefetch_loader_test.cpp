#include "baton_test.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <c10/core/GradMode.h>

#include "baton/error.h"
#include "data/prefetch_loader.h"
#include "data/sampler.h"
#include "error_text.h"
#include "loader_threads.h"

using namespace baton;
using baton::test::error_text;
using baton::test::loader_threads;

namespace {

// Long enough never to be reached on a working loader; reaching it fails the test instead of hanging it.
constexpr auto kGiveUp = std::chrono::seconds(20);

// Sample i is the row [i, i] with target i, so a batch shows which indices made it.
struct RowDataset : Dataset {
  std::int64_t rows = 0;
  explicit RowDataset(std::int64_t n, std::string label = "rows") : rows(n) { name = std::move(label); }
  std::int64_t size() const override { return rows; }
  DataSpec spec() const override { return DataSpec{{2}, {}, 0, {}}; }
  Batch get(const at::Tensor& indices) const override {
    calls.fetch_add(1);
    before_get(indices);
    Batch batch;
    batch.set("targets", indices.clone());
    batch.set("inputs", indices.to(at::kFloat).unsqueeze(1).repeat({1, 2}));
    return batch;
  }
  virtual void before_get(const at::Tensor&) const {}
  mutable std::atomic<int> calls{0};
};

// Takes longer on some batches than on others, so that with several workers later batches are often ready first.
struct UnevenDataset : RowDataset {
  using RowDataset::RowDataset;
  void before_get(const at::Tensor& indices) const override {
    const auto first = indices.numel() > 0 ? indices.data_ptr<std::int64_t>()[0] : 0;
    std::this_thread::sleep_for(std::chrono::microseconds(300 * (first % 4 == 0 ? 3 : 0)));
  }
};

// Each get waits until the gate opens (or kGiveUp passes, which it records).
struct GateDataset : RowDataset {
  using RowDataset::RowDataset;
  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  mutable int in_flight = 0;
  mutable int max_in_flight = 0;
  mutable bool open = false;
  mutable bool gave_up = false;
  // Opens by itself once this many gets are in flight at once (0: only open() opens it).
  int open_at = 0;

  void before_get(const at::Tensor&) const override {
    std::unique_lock<std::mutex> lock(mutex);
    in_flight += 1;
    max_in_flight = std::max(max_in_flight, in_flight);
    if (open_at > 0 && in_flight >= open_at) open = true;
    changed.notify_all();
    if (!changed.wait_for(lock, kGiveUp, [&] { return open; })) gave_up = true;
    in_flight -= 1;
  }
  void open_gate() const {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
    changed.notify_all();
  }
  bool wait_in_flight(int n) const {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, kGiveUp, [&] { return in_flight >= n; });
  }
};

std::vector<at::Tensor> drain(PrefetchLoader& loader) {
  std::vector<at::Tensor> out;
  while (!loader.done()) out.push_back(loader.next().targets());
  return out;
}

PrefetchOptions with(int workers, int prefetch) {
  PrefetchOptions o;
  o.workers = workers;
  o.prefetch = prefetch;
  return o;
}

}  // namespace

TEST_SUITE("prefetch loader") {
  TEST_CASE("batches come in sampler order, the same for any workers and prefetch, across epochs") {
    // 103 samples in batches of 10: 11 per epoch, the last of 3; 30 batches from the start cross two boundaries.
    UnevenDataset data(103);
    BatchSampler sampler(SamplerOptions{103, 10, true, false, 7, 0, 1});
    std::vector<at::Tensor> expected;
    for (std::int64_t k = 0; k < 30; ++k) expected.push_back(sampler.batch_indices(k / 11, k % 11));
    for (auto [workers, prefetch] : std::vector<std::pair<int, int>>{{0, 0}, {1, 1}, {1, 3}, {2, 2}, {3, 8}, {4, 4}}) {
      CAPTURE(workers);
      CAPTURE(prefetch);
      PrefetchLoader loader(data, sampler_plan(sampler, 0, 0, 30), with(workers, prefetch));
      const auto got = drain(loader);
      REQUIRE(got.size() == expected.size());
      for (std::size_t k = 0; k < got.size(); ++k) {
        CAPTURE(k);
        CHECK(at::equal(got[k], expected[k]));
      }
    }
  }

  TEST_CASE("a loader started mid-epoch (a resume) continues the sampler's sequence into the next epoch") {
    RowDataset data(103);
    BatchSampler sampler(SamplerOptions{103, 10, true, false, 3, 0, 1});
    PrefetchLoader loader(data, sampler_plan(sampler, 2, 7, 6), with(2, 3));
    const auto got = drain(loader);
    const std::vector<std::pair<int, int>> positions{{2, 7}, {2, 8}, {2, 9}, {2, 10}, {3, 0}, {3, 1}};
    REQUIRE(got.size() == positions.size());
    for (std::size_t k = 0; k < got.size(); ++k)
      CHECK(at::equal(got[k], sampler.batch_indices(positions[k].first, positions[k].second)));
    CHECK(got[3].numel() == 3);  // the epoch's short last batch
    CHECK(loader.position() == 6);
  }

  TEST_CASE("the sequential plan gives rows in order, the last batch short") {
    RowDataset data(25);
    PrefetchLoader loader(data, sequential_plan(5, 25, 8), with(2, 2));
    const auto got = drain(loader);
    REQUIRE(got.size() == 3);
    CHECK(got[0][0].item<std::int64_t>() == 5);
    CHECK(got[2].numel() == 4);
    CHECK(got[2][3].item<std::int64_t>() == 24);
    CHECK(sequential_plan(3, 3, 8).count == 0);
  }

  TEST_CASE("a loader fetches exactly the plan's batches, never more than prefetch ahead of the consumer") {
    struct Bounded : RowDataset {
      using RowDataset::RowDataset;
      std::atomic<int> asked{0};  // next() calls begun by the test
      mutable std::atomic<bool> too_far{false};
      int prefetch = 3;
      void before_get(const at::Tensor&) const override {
        // calls counts this get; the loader may have at most `prefetch` batches ahead of those handed out.
        if (calls.load() > asked.load() + prefetch) too_far = true;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    } data(1000);
    {
      PrefetchLoader loader(data, sequential_plan(0, 1000, 10), with(2, 3));
      for (int k = 0; k < 20; ++k) {
        data.asked += 1;
        loader.next();
      }
    }
    CHECK_FALSE(data.too_far.load());
    CHECK(data.calls.load() <= 20 + 3);

    RowDataset small(100);
    {
      PrefetchLoader loader(small, sequential_plan(0, 50, 10), with(3, 8));
      CHECK(drain(loader).size() == 5);
      CHECK(error_text([&] { loader.next(); }).find("all 5 batches") != std::string::npos);
    }
    CHECK(small.calls.load() == 5);  // nothing fetched past the plan's end
  }

  TEST_CASE("an exception from get surfaces at its batch, naming the dataset, and later batches still come") {
    struct Failing : RowDataset {
      using RowDataset::RowDataset;
      void before_get(const at::Tensor& indices) const override {
        if (indices.data_ptr<std::int64_t>()[0] == 30) throw std::runtime_error("sector 30 unreadable");
      }
    } data(100, "disk/train");
    std::vector<std::string> messages;
    for (auto [workers, prefetch] : std::vector<std::pair<int, int>>{{0, 0}, {1, 2}, {3, 6}}) {
      CAPTURE(workers);
      PrefetchLoader loader(data, sequential_plan(0, 100, 10), with(workers, prefetch));
      for (int k = 0; k < 3; ++k) CHECK(loader.next().targets()[0].item<std::int64_t>() == 10 * k);
      messages.push_back(error_text([&] { loader.next(); }));
      CHECK(loader.position() == 4);
      CHECK(loader.next().targets()[0].item<std::int64_t>() == 40);
    }
    CHECK(messages[0] == "dataset 'disk/train', rows 30 to 39: sector 30 unreadable");
    CHECK(messages[1] == messages[0]);
    CHECK(messages[2] == messages[0]);

    // A sampler position that cannot be drawn is reported at its batch too.
    RowDataset rows(20);
    BatchPlan plan;
    plan.count = 2;
    plan.indices = [](std::int64_t k) -> at::Tensor {
      if (k == 1) throw Error("no such position");
      return at::ones({1}, at::kLong);
    };
    PrefetchLoader loader(rows, plan, with(1, 2));
    loader.next();
    CHECK(error_text([&] { loader.next(); }) == "dataset 'rows', batch 1: no such position");
  }

  TEST_CASE("destroying a loader whose gets are blocked waits for them only, then leaves no thread behind") {
    GateDataset data(1000);
    auto loader = std::make_unique<PrefetchLoader>(data, sequential_plan(0, 1000, 10), with(2, 4));
    REQUIRE(data.wait_in_flight(2));
    CHECK(loader_threads() == 2);
    auto destroyed = std::async(std::launch::async, [&] { loader.reset(); });
    data.open_gate();
    REQUIRE(destroyed.wait_for(kGiveUp) == std::future_status::ready);
    CHECK_FALSE(data.gave_up);
    CHECK(data.calls.load() <= 4);  // within prefetch: the rest of the 100 batches were never asked for
    CHECK(loader_threads() == 0);

    // Mid-stream, after some batches were taken, with nothing blocked.
    RowDataset rows(1000);
    {
      PrefetchLoader partial(rows, sequential_plan(0, 1000, 10), with(3, 6));
      for (int k = 0; k < 7; ++k) partial.next();
    }
    CHECK(rows.calls.load() <= 7 + 6);
    CHECK(loader_threads() == 0);
  }

  TEST_CASE("workers fetch in parallel: two gets are in flight at once") {
    // The first two gets wait for each other; one worker alone would wait until kGiveUp and fail.
    GateDataset data(100);
    data.open_at = 2;
    PrefetchLoader loader(data, sequential_plan(0, 100, 10), with(2, 2));
    CHECK(drain(loader).size() == 10);
    CHECK_FALSE(data.gave_up);
    CHECK(data.max_in_flight >= 2);
  }

  TEST_CASE("get runs without autograd and on one intra-op thread, in a worker and in the caller alike") {
    struct Observer : RowDataset {
      using RowDataset::RowDataset;
      mutable std::mutex mutex;
      mutable std::vector<bool> grad;
      mutable std::vector<int> threads;
      void before_get(const at::Tensor&) const override {
        std::lock_guard<std::mutex> lock(mutex);
        grad.push_back(c10::GradMode::is_enabled());
        threads.push_back(at::get_num_threads());
      }
    } data(40);
    const int before = at::get_num_threads();
    at::set_num_threads(2);
    for (int workers : {0, 2}) {
      PrefetchLoader loader(data, sequential_plan(0, 40, 10), with(workers, 2));
      drain(loader);
      CHECK(at::get_num_threads() == 2);  // the caller's count is back after a synchronous get
    }
    at::set_num_threads(before);
    REQUIRE(data.grad.size() == 8);
    for (std::size_t i = 0; i < data.grad.size(); ++i) {
      CAPTURE(i);
      CHECK_FALSE(data.grad[i]);
      CHECK(data.threads[i] == 1);
    }
    CHECK(c10::GradMode::is_enabled());
  }

  TEST_CASE("bad options are errors; to_device to the CPU copies nothing") {
    RowDataset data(10);
    CHECK(error_text([&] { PrefetchLoader loader(data, sequential_plan(0, 10, 5), with(-1, 2)); }) ==
          "loader: workers must be >= 0, got -1");
    CHECK(error_text([&] { PrefetchLoader loader(data, sequential_plan(0, 10, 5), with(3, 2)); }) ==
          "loader: prefetch (2) must be at least workers (3): each worker fetches one of the batches ahead");
    const Batch batch = data.get(at::ones({2}, at::kLong));
    const Batch moved = to_device(batch, at::Device(at::kCPU));
    CHECK(moved.inputs().data_ptr() == batch.inputs().data_ptr());
    CHECK_FALSE(to_device(Batch::of(batch.inputs(), at::Tensor()), at::Device(at::kCPU)).has("targets"));
  }
}
