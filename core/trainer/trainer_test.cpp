#include "baton_test.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/Context.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/inverse.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/sgd.h>

#include "baton/components.h"
#include "baton/trainer.h"
#include "checkpoint/checkpoint_store.h"
#include "trainer/cuda_graph.h"
#include "config/config.h"  // eval_set_name_problem
#include "memory/cpu_cache.h"
#include "baton/builtin_datasets.h"
#include "baton/models.h"
#include "baton/safetensors.h"
#include "small_trainer.h"

namespace fs = std::filesystem;
using baton::Event;
using baton::Time;
using baton::TimeUnit;

// What the trainer takes (baton/model.h): modules with a tensor-to-tensor forward, Sequential included; an LSTM's
// forward returns a tuple and is refused at compile time.
static_assert(std::is_convertible_v<torch::nn::Sequential, baton::Model>);
static_assert(std::is_convertible_v<torch::nn::Linear, baton::Model>);
static_assert(std::is_convertible_v<std::shared_ptr<torch::nn::LinearImpl>, baton::Model>);
static_assert(std::is_convertible_v<torch::nn::AnyModule, baton::Model>);
static_assert(!std::is_convertible_v<torch::nn::LSTM, baton::Model>);

using baton::test::make_trainer;
using baton::test::same_weights;
using baton::test::quiet_options;

namespace {

// Records every event it sees (it matches all of them).
struct Recorder : baton::Algorithm {
  std::vector<std::string> events;
  bool match(Event, const baton::State&) override { return true; }
  void apply(Event e, baton::State&, baton::Logger&) override { events.emplace_back(baton::event_name(e)); }
};

// Counts batches and keeps the count in checkpoints.
struct Counter : baton::Algorithm {
  std::int64_t batches = 0;
  bool loaded_empty = false;
  bool match(Event e, const baton::State&) override { return e == Event::batch_end; }
  void apply(Event, baton::State&, baton::Logger&) override { ++batches; }
  void state_dict(baton::StateDict& out) const override { out.set_int("batches", batches); }
  void load_state_dict(const baton::StateDict& in) override {
    loaded_empty = !in.has("batches");
    if (!loaded_empty) batches = in.get_int("batches");
  }
};

struct ThrowAtBatch : baton::Algorithm {
  std::int64_t at_batch;
  explicit ThrowAtBatch(std::int64_t b) : at_batch(b) {}
  bool match(Event e, const baton::State& s) override { return e == Event::batch_end && s.timestamp().batch == at_batch; }
  void apply(Event, baton::State&, baton::Logger&) override { throw std::runtime_error("exploded"); }
};

struct StopAtBatch : baton::Callback {
  std::int64_t at_batch;
  explicit StopAtBatch(std::int64_t b) : at_batch(b) {}
  void batch_end(baton::State& s, baton::Logger&) override {
    if (s.timestamp().batch == at_batch) s.request_stop("enough");
  }
};

// Asks for a stop at the evaluation after batch `at_batch`, as an early stopper does, and adds a file of its own to
// every checkpoint written through the checkpoint events.
struct StopInEvaluation : baton::Callback {
  std::int64_t at_batch;
  int files_added = 0;
  explicit StopInEvaluation(std::int64_t b) : at_batch(b) {}
  void eval_after_all(baton::State& s, baton::Logger&) override {
    if (s.timestamp().batch == at_batch) s.request_stop("no improvement");
  }
  void on_checkpoint(baton::State& s) {
    if (!s.checkpoint) return;
    baton::StateDict content;
    content.set_int("batch", s.timestamp().batch);
    s.checkpoint->add_tensors_file("stopper.safetensors", content);
    ++files_added;
  }
  void batch_checkpoint(baton::State& s, baton::Logger&) override { on_checkpoint(s); }
  void epoch_checkpoint(baton::State& s, baton::Logger&) override { on_checkpoint(s); }
};

struct EndWatcher : baton::Callback {
  bool fit_end_seen = false;
  bool closed = false;
  void fit_end(baton::State&, baton::Logger&) override { fit_end_seen = true; }
  void close() override { closed = true; }
};



std::vector<std::string> train_batch_events() {
  return {"before_dataloader", "after_dataloader", "batch_start",   "before_train_batch", "before_forward",
          "after_forward",     "before_loss",      "after_loss",    "before_backward",    "after_backward",
          "after_train_batch", "batch_end"};
}

}  // namespace

TEST_SUITE("trainer") {
  TEST_CASE("the trainer's passes (State::passes) run in their windows only, and say where they may run") {
    // Calls each pass where it is not allowed and keeps the messages; the allowed calls are the sam and swa
    // plugins' tests.
    struct Misplaced : baton::Callback {
      std::vector<std::string> errors;
      void attempt(const std::function<void()>& call) {
        try {
          call();
          errors.emplace_back("no error");
        } catch (const baton::Error& e) {
          errors.emplace_back(e.what());
        }
      }
      void before_train_batch(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch != 0) return;
        attempt([&] { s.facts.passes()->recompute_gradients(); });
        attempt([&] { s.facts.passes()->forward_training_data(); });
      }
      void batch_end(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch == 1) attempt([&] { s.facts.passes()->recompute_gradients(); });
      }
    };
    auto trainer = make_trainer(quiet_options());
    auto misplaced = std::make_shared<Misplaced>();
    trainer->add_plugin("misplaced", misplaced);
    CHECK(trainer->state().facts.passes() != nullptr);
    CHECK(trainer->state().facts.plugins() == std::vector<std::string>{"misplaced"});
    trainer->fit();
    REQUIRE(misplaced->errors.size() == 3);
    CHECK(misplaced->errors[0].find("only available at after_train_batch") != std::string::npos);
    CHECK(misplaced->errors[1].find("outside a training step") != std::string::npos);
    CHECK(misplaced->errors[2].find("only available at after_train_batch") != std::string::npos);
  }

  TEST_CASE("a fit fires the events in Composer's order, evaluation between batch_end and batch_checkpoint") {
    auto options = quiet_options();
    options.max_duration = Time(1, TimeUnit::epoch);
    auto trainer = make_trainer(options);
    auto recorder = std::make_shared<Recorder>();
    trainer->add_plugin("recorder", recorder);
    trainer->fit();

    // Expected sequence written out by hand: 3 batches, then (eval_interval in ep) the evaluation between
    // epoch_end and epoch_checkpoint: 50 samples in batches of 50 is one eval batch.
    std::vector<std::string> expected = {"init", "fit_start", "iteration_start", "epoch_start"};
    for (int b = 0; b < 3; ++b) {
      for (const auto& e : train_batch_events()) expected.push_back(e);
      expected.push_back("batch_checkpoint");
    }
    expected.push_back("epoch_end");
    for (const char* e : {"eval_before_all", "eval_start", "eval_batch_start", "eval_before_forward",
                          "eval_after_forward", "eval_batch_end", "eval_end", "eval_after_all"})
      expected.push_back(e);
    for (const char* e : {"epoch_checkpoint", "iteration_end", "iteration_checkpoint", "fit_end"})
      expected.push_back(e);
    CHECK(recorder->events == expected);
  }

  TEST_CASE("an interval in batches evaluates between batch_end and batch_checkpoint") {
    auto options = quiet_options();
    options.max_duration = Time(2, TimeUnit::batch);
    options.eval_interval = Time(2, TimeUnit::batch);
    auto trainer = make_trainer(options);
    auto recorder = std::make_shared<Recorder>();
    trainer->add_plugin("recorder", recorder);
    auto result = trainer->fit();
    std::vector<std::string> expected = {"init", "fit_start", "iteration_start", "epoch_start"};
    for (int b = 0; b < 2; ++b) {
      for (const auto& e : train_batch_events()) expected.push_back(e);
      if (b == 1)
        for (const char* e : {"eval_before_all", "eval_start", "eval_batch_start", "eval_before_forward",
                              "eval_after_forward", "eval_batch_end", "eval_end", "eval_after_all"})
          expected.push_back(e);
      expected.push_back("batch_checkpoint");
    }
    expected.push_back("fit_end");  // the run ends inside the epoch: no epoch_end
    CHECK(recorder->events == expected);
    REQUIRE(result.evals.size() == 1);  // no second, final evaluation at the same batch
    CHECK(result.evals[0].at.batch == 2);
  }

  TEST_CASE("trainer.cuda_graphs is refused on the CPU, and a LibTorch without CUDA records nothing") {
    auto options = quiet_options();
    options.cuda_graphs = true;
    try {
      make_trainer(options);
      FAIL("expected the CPU run to be refused");
    } catch (const baton::Error& e) {
      CHECK(std::string(e.what()).find("trainer: cuda_graphs: expected false on the device \"cpu\" (a CUDA graph "
                                       "records GPU work") == 0);
    }
    if (!baton::GraphRecorder::available())
      CHECK_THROWS_WITH_AS(baton::GraphRecorder(c10::Device("cuda")),
                           doctest::Contains("this baton's LibTorch was built without CUDA"), baton::Error);
  }

  TEST_CASE("trainer.cpu_allocator: the cache serves a fit's large tensors and is given back at its end") {
    using baton::memory::cpu_cache_stats;
    auto cached = quiet_options();
    cached.max_duration = Time(1, TimeUnit::epoch);
    auto system = cached;
    system.cpu_allocator = "system";
    auto with_system = make_trainer(system);
    const auto before = cpu_cache_stats();
    with_system->fit();
    CHECK_FALSE(baton::memory::cpu_cache_on());
    CHECK(cpu_cache_stats().reused == before.reused);
    CHECK(cpu_cache_stats().resized == before.resized);

    auto with_cache = make_trainer(cached);
    with_cache->fit();
    CHECK(baton::memory::cpu_cache_on());
    const auto after = cpu_cache_stats();
    CHECK(after.reused + after.resized > before.reused + before.resized);  // a freed block served another tensor
    CHECK(after.cached_bytes == 0);  // given back at the end of the fit
    CHECK(same_weights(with_system->model(), with_cache->model()));  // memory, not arithmetic
    auto compact = cached;
    compact.cpu_allocator = "compact";
    auto with_compact = make_trainer(compact);
    with_compact->fit();
    CHECK(baton::memory::cpu_cache_on());
    CHECK(same_weights(with_system->model(), with_compact->model()));
  }

  TEST_CASE("resume after an epoch ends bitwise identical to an uninterrupted run") {
    auto dir = baton::test::scratch_dir("trainer-resume-epoch");
    auto whole = make_trainer(quiet_options((dir / "whole").string()));
    whole->fit();

    auto first = quiet_options((dir / "split").string());
    first.max_duration = Time(1, TimeUnit::epoch);
    make_trainer(first)->fit();
    REQUIRE(fs::exists(dir / "split" / "checkpoints" / "ep1" / "meta.json"));

    auto second = quiet_options((dir / "split").string());
    second.resume = "auto";
    auto resumed = make_trainer(second);
    auto result = resumed->fit();
    CHECK(result.end.epoch == 2);
    CHECK(result.end.batch == 6);
    CHECK(same_weights(whole->model(), resumed->model()));
  }

  TEST_CASE("resume in the middle of an epoch is exact too, plugin state included") {
    auto dir = baton::test::scratch_dir("trainer-resume-batch");
    auto options = quiet_options((dir / "whole").string());
    options.save_interval = Time(1, TimeUnit::batch);
    auto whole = make_trainer(options);
    auto whole_counter = std::make_shared<Counter>();
    whole->add_plugin("counter", whole_counter);
    whole->fit();
    CHECK(whole_counter->batches == 6);

    auto first = quiet_options((dir / "split").string());
    first.save_interval = Time(1, TimeUnit::batch);
    first.max_duration = Time(4, TimeUnit::batch);  // stops inside epoch 2
    make_trainer(first)->fit();

    auto second = quiet_options((dir / "split").string());
    second.save_interval = Time(1, TimeUnit::batch);
    second.resume = (dir / "split" / "checkpoints" / "ba4").string();
    auto resumed = make_trainer(second);
    auto counter = std::make_shared<Counter>();
    resumed->add_plugin("counter", counter);
    resumed->fit();
    CHECK(counter->loaded_empty);  // the first half ran without the plugin
    CHECK(counter->batches == 2);
    CHECK(same_weights(whole->model(), resumed->model()));

    // And the plugin's own state comes back from a checkpoint that has it.
    auto third = quiet_options((dir / "whole").string());
    third.resume = (dir / "whole" / "checkpoints" / "ba5").string();
    third.save_interval = Time(0, TimeUnit::batch);
    auto again = make_trainer(third);
    auto restored = std::make_shared<Counter>();
    again->add_plugin("counter", restored);
    again->fit();
    CHECK_FALSE(restored->loaded_empty);
    CHECK(restored->batches == 6);
  }

  TEST_CASE("a plugin's exception names plugin and event; fit_end and close still run; checkpoints intact") {
    auto dir = baton::test::scratch_dir("trainer-plugin-throws");
    auto options = quiet_options(dir.string());
    options.save_interval = Time(1, TimeUnit::batch);
    auto trainer = make_trainer(options);
    auto watcher = std::make_shared<EndWatcher>();
    trainer->add_plugin("thrower", std::make_shared<ThrowAtBatch>(3));
    trainer->add_plugin("watcher", watcher);
    try {
      trainer->fit();
      FAIL("fit should have thrown");
    } catch (const baton::PluginError& e) {
      CHECK(std::string(e.what()) == "plugin 'thrower' failed on event batch_end: exploded");
    }
    CHECK(watcher->fit_end_seen);
    CHECK(watcher->closed);
    auto last = (dir / "checkpoints" / "ba2").string();
    CHECK_NOTHROW(baton::verify_checkpoint(last));
    CHECK_FALSE(fs::exists(dir / "checkpoints" / "ba3"));
    CHECK_FALSE(fs::exists(dir / "model.safetensors"));  // no export of a failed run
  }

  TEST_CASE("a plugin can stop the run; it ends with a checkpoint at that batch") {
    auto dir = baton::test::scratch_dir("trainer-stop");
    auto trainer = make_trainer(quiet_options(dir.string()));
    auto watcher = std::make_shared<EndWatcher>();
    trainer->add_plugin("stopper", std::make_shared<StopAtBatch>(2));
    trainer->add_plugin("watcher", watcher);
    auto result = trainer->fit();
    CHECK(result.stop_reason == "enough");
    CHECK(result.end.batch == 2);
    CHECK(watcher->fit_end_seen);
    CHECK(result.last_checkpoint == (dir / "checkpoints" / "ba2").string());
    CHECK_NOTHROW(baton::verify_checkpoint(result.last_checkpoint));
  }

  TEST_CASE("loggers that record it are told how the run ended, and open with the config as logged") {
    // A destination that keeps what it is told.
    struct Ends final : baton::LoggerDestination, baton::RunEndRecorder {
      std::string config;
      bool has_logger = false;
      std::vector<baton::RunEnd> ends;
      int closed = 0;
      void open(const baton::LoggerContext& context) override {
        config = context.config_text;
        has_logger = context.logger != nullptr;
      }
      void log_metrics(const baton::Timestamp&, const std::vector<std::pair<std::string, double>>&) override {}
      void run_ended(const baton::RunEnd& end) override { ends.push_back(end); }
      void close() override { ++closed; }
    };
    const auto run = [](const std::string& name, const std::string& logged,
                        std::shared_ptr<baton::Plugin> plugin) -> std::shared_ptr<Ends> {
      auto options = quiet_options(baton::test::scratch_dir(name).string());
      options.config_text = "seed = 1\n";
      options.logged_config_text = logged;
      auto ends = std::make_shared<Ends>();
      options.loggers = {ends};
      auto trainer = make_trainer(options);
      if (plugin) trainer->add_plugin("p", plugin);
      try {
        trainer->fit();
      } catch (const baton::PluginError&) {
      }
      REQUIRE(ends->ends.size() == 1);
      CHECK(ends->closed == 1);
      CHECK(ends->has_logger);
      return ends;
    };
    const auto done = run("trainer-end-done", "seed = 1\nbatch_size = 4\n", nullptr);
    CHECK_FALSE(done->ends[0].failed);
    CHECK_FALSE(done->ends[0].interrupted);
    CHECK(done->ends[0].message.empty());
    CHECK(done->config == "seed = 1\nbatch_size = 4\n");  // the logged text, defaults filled in
    const auto stopped = run("trainer-end-stopped", "", std::make_shared<StopAtBatch>(2));
    CHECK_FALSE(stopped->ends[0].failed);
    CHECK_FALSE(stopped->ends[0].interrupted);
    CHECK(stopped->ends[0].message == "enough");  // the stopper's reason
    CHECK(stopped->config == "seed = 1\n");      // no logged text: the config as stored
    const auto failed = run("trainer-end-failed", "", std::make_shared<ThrowAtBatch>(3));
    CHECK(failed->ends[0].failed);
    CHECK(failed->ends[0].message == "plugin 'p' failed on event batch_end: exploded");
  }

  TEST_CASE("a stop asked for during an evaluation ends the run with a checkpoint taken through its events") {
    // An early stopper acts at eval_after_all; the save is not due at this batch (saves every epoch), yet the
    // run's last checkpoint must still fire batch_checkpoint, so plugins add their files (ema.safetensors) to it.
    for (const char* unit : {"ba", "ep"}) {
      CAPTURE(unit);
      auto dir = baton::test::scratch_dir(std::string("trainer-stop-in-eval-") + unit);
      auto options = quiet_options(dir.string());
      const bool in_batches = std::string(unit) == "ba";
      options.eval_interval = in_batches ? Time(2, TimeUnit::batch) : Time(1, TimeUnit::epoch);
      options.save_interval = in_batches ? Time(1, TimeUnit::epoch) : Time(2, TimeUnit::epoch);
      options.max_duration = Time(3, TimeUnit::epoch);
      auto trainer = make_trainer(options);
      auto stopper = std::make_shared<StopInEvaluation>(in_batches ? 2 : 3);  // batch 3 ends epoch 1
      trainer->add_plugin("stopper", stopper);
      auto result = trainer->fit();
      CHECK(result.stop_cause == baton::StopCause::plugin);
      CHECK(result.end.batch == (in_batches ? 2 : 3));
      const auto expected = dir / "checkpoints" / (in_batches ? "ba2" : "ep1");
      CHECK(result.last_checkpoint == expected.string());
      CHECK(fs::exists(expected / "stopper.safetensors"));
      CHECK(stopper->files_added == 1);
    }
  }

  TEST_CASE("--resume auto skips a corrupt newest checkpoint with a warning; an explicit corrupt one fails") {
    auto dir = baton::test::scratch_dir("trainer-resume-corrupt");
    auto options = quiet_options(dir.string());
    make_trainer(options)->fit();
    auto ep2 = dir / "checkpoints" / "ep2" / "state.safetensors";
    REQUIRE(fs::exists(ep2));
    {
      std::fstream f(ep2, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(fs::file_size(ep2) - 3));
      f.put('\x55');
    }
    auto resume_auto = quiet_options(dir.string());
    resume_auto.resume = "auto";
    resume_auto.max_duration = Time(3, TimeUnit::epoch);
    auto trainer = make_trainer(resume_auto);
    auto result = trainer->fit();
    CHECK(result.end.epoch == 3);
    bool warned = false;
    for (const auto& w : trainer->warnings()) warned = warned || w.find("ep2") != std::string::npos;
    CHECK(warned);

    auto explicit_path = quiet_options((dir / "other").string());
    explicit_path.resume = (dir / "checkpoints" / "ep1").string();
    // ep1 is intact: loading it works. Now truncate it and try again.
    auto ep1_state = dir / "checkpoints" / "ep1" / "state.safetensors";
    fs::resize_file(ep1_state, fs::file_size(ep1_state) / 2);
    auto broken = make_trainer(explicit_path);
    CHECK_THROWS_AS(broken->fit(), baton::CheckpointError);
  }
}
