#include "baton_test.h"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "baton/builtin_datasets.h"
#include "baton/trainer.h"
#include "data/sampler.h"
#include "error_text.h"
#include "loader_threads.h"
#include "small_trainer.h"

using baton::Time;
using baton::TimeUnit;
using baton::test::error_text;
using baton::test::loader_threads;
using baton::test::make_trainer;
using baton::test::quiet_options;
using baton::test::same_weights;

namespace {

// The synthetic set, counting the gets and throwing at one sample when asked to.
struct WatchedDataset : baton::Dataset {
  baton::TensorDataset inner;
  std::int64_t fail_at = -1;  // a sample whose batch throws
  mutable std::atomic<int> calls{0};
  WatchedDataset(baton::TensorDataset data, std::string label) : inner(std::move(data)) { name = std::move(label); }
  std::int64_t size() const override { return inner.size(); }
  baton::DataSpec spec() const override { return inner.spec(); }
  baton::Batch get(const at::Tensor& indices) const override {
    calls.fetch_add(1);
    const auto* index = indices.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < indices.numel(); ++i)
      if (index[i] == fail_at) throw std::runtime_error("sample " + std::to_string(fail_at) + " is damaged");
    return inner.get(indices);
  }
};

std::shared_ptr<WatchedDataset> train_set() {
  return std::make_shared<WatchedDataset>(baton::make_synthetic_dataset(96, 7), "synthetic/train");
}
std::shared_ptr<WatchedDataset> eval_set() {
  return std::make_shared<WatchedDataset>(baton::make_synthetic_dataset(50, 8), "synthetic/eval");
}

baton::TrainerOptions loader_options(int workers, int prefetch, const std::string& run_dir = "") {
  auto options = quiet_options(run_dir);
  options.workers = workers;
  options.prefetch = prefetch;
  return options;
}

struct StopAfter : baton::Callback {
  std::int64_t at_batch;
  explicit StopAfter(std::int64_t b) : at_batch(b) {}
  void batch_end(baton::State& s, baton::Logger&) override {
    if (s.timestamp().batch == at_batch) s.request_stop("enough");
  }
};

}  // namespace

TEST_SUITE("trainer data loading") {
  TEST_CASE("training with workers and prefetch gives bitwise the weights and evaluations of workers = 0") {
    auto synchronous = make_trainer(loader_options(0, 0), train_set(), eval_set());
    const auto reference = synchronous->fit();
    for (auto [workers, prefetch] : std::vector<std::pair<int, int>>{{1, 2}, {2, 4}}) {
      CAPTURE(workers);
      auto loaded = make_trainer(loader_options(workers, prefetch), train_set(), eval_set());
      const auto result = loaded->fit();
      CHECK(same_weights(synchronous->model(), loaded->model()));
      REQUIRE(result.evals.size() == reference.evals.size());
      for (std::size_t i = 0; i < result.evals.size(); ++i)
        CHECK(result.evals[i].metrics == reference.evals[i].metrics);
      CHECK(result.end.sample == reference.end.sample);
    }
    CHECK(loader_threads() == 0);
  }

  TEST_CASE("a run resumed mid-epoch with other loader settings ends with the uninterrupted run's weights") {
    auto dir = baton::test::scratch_dir("train-loader-resume");
    auto whole = make_trainer(loader_options(0, 0), train_set(), eval_set());
    whole->fit();

    auto first = loader_options(1, 2, (dir / "split").string());
    first.save_interval = Time(1, TimeUnit::batch);
    first.max_duration = Time(4, TimeUnit::batch);  // batch 1 of epoch 1
    make_trainer(first, train_set(), eval_set())->fit();

    auto second = loader_options(3, 5, (dir / "split").string());
    second.resume = (dir / "split" / "checkpoints" / "ba4").string();
    auto resumed = make_trainer(second, train_set(), eval_set());
    const auto result = resumed->fit();
    CHECK(result.end.batch == 6);
    CHECK(same_weights(whole->model(), resumed->model()));
  }

  TEST_CASE("a get that throws fails the run at its batch, naming the dataset; no loader thread is left") {
    auto data = train_set();
    // The first sample of batch 2 of epoch 0, as the trainer's sampler orders the set (quiet_options' seed).
    const auto options = loader_options(2, 4);
    baton::BatchSampler sampler(baton::SamplerOptions{96, options.batch_size, true, false, options.seed, 0, 1});
    data->fail_at = sampler.batch_indices(0, 2)[0].item<std::int64_t>();
    auto trainer = make_trainer(options, data, eval_set());
    CHECK(error_text([&] { trainer->fit(); }) == "dataset 'synthetic/train', batch 2 of epoch 0 (counted from 0): sample " +
                                                     std::to_string(data->fail_at) + " is damaged");
    // The batches before it were trained on: the failure came at its own batch, not when the workers fetched it.
    CHECK(trainer->state().progress.now.batch == 2);
    CHECK(loader_threads() == 0);
  }

  TEST_CASE("a run stopped early fetches at most prefetch batches past its stop and leaves no loader thread") {
    auto data = train_set();
    auto trainer = make_trainer(loader_options(2, 3), data, nullptr);
    trainer->add_plugin("stopper", std::make_shared<StopAfter>(2));
    const auto result = trainer->fit();
    CHECK(result.end.batch == 2);
    // One more get than batches: at init the trainer reads the first sample for plugins (State::example_batch).
    CHECK(data->calls.load() >= 2 + 1);
    CHECK(data->calls.load() <= 2 + 3 + 1);
    CHECK(loader_threads() == 0);

    // A run that ends where it was asked to fetches nothing past its end.
    auto exact = train_set();
    auto options = loader_options(2, 4);
    options.max_duration = Time(4, TimeUnit::batch);
    options.eval_interval = Time(0, TimeUnit::batch);
    make_trainer(options, exact, nullptr)->fit();
    CHECK(exact->calls.load() == 4 + 1);
  }

  TEST_CASE("evaluation and prediction go through the loader in order") {
    auto eval = eval_set();
    auto options = loader_options(2, 2);
    options.eval_batch_size = 16;
    auto trainer = make_trainer(options, train_set(), eval);
    const auto results = trainer->evaluate_standalone();
    REQUIRE(results.size() == 1);
    CHECK(results[0].samples == 50);
    CHECK(eval->calls.load() == 4);
    auto again = make_trainer(options, train_set(), eval_set());
    const auto predicted = again->predict();
    CHECK(at::equal(predicted.targets, eval->inner.targets));
    CHECK(loader_threads() == 0);
  }

  TEST_CASE("the trainer checks the loader settings") {
    CHECK(error_text([] { make_trainer(loader_options(-1, 2), train_set(), eval_set()); }) ==
          "trainer: workers: expected an integer in [0, 256], got -1");
    CHECK(error_text([] { make_trainer(loader_options(4, 2), train_set(), eval_set()); }) ==
          "trainer: prefetch: expected at least workers (4: each worker fetches one of the batches ahead), got 2");
    // Left at its default, prefetch is two per worker, as in a config file: 4 workers need no prefetch setting.
    CHECK(baton::TrainerOptions().prefetch == 0);
    auto four = make_trainer(loader_options(4, baton::TrainerOptions().prefetch), train_set(), eval_set());
    CHECK(four->fit().end.batch > 0);
    CHECK(error_text([] { make_trainer(loader_options(1, -1), train_set(), eval_set()); }) ==
          "trainer: prefetch: expected an integer >= 0 (0: two per worker), got -1");
  }
}
