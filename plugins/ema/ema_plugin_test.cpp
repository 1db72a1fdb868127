#include "baton_test.h"

#include <cmath>
#include <string>
#include <vector>

#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/modules/linear.h>

#include "ema_test_support.h"

using namespace ema_test;

namespace {

using Steps = std::vector<std::pair<std::int64_t, double>>;

baton::TrainerOptions lasting(Time duration) {
  auto options = quiet_options();
  options.max_duration = duration;
  return options;
}

// Checks, in one place, that the EMA after training is the closed form over the recorded trajectory: updated at
// exactly the batches of `steps` (the first is the initialising copy) with their smoothing.
void check_closed_form(const std::string& toml, Time duration, const Steps& steps) {
  CAPTURE(toml);
  auto t = train_with_ema(toml, lasting(duration));
  CHECK(max_difference(shadow_of(*t.ema.plugin), closed_form_ema(t.trajectory->at_batch, steps)) < 2e-6);
  // The same schedule shifted by one batch must not match: the check can tell the batches apart.
  Steps shifted = steps;
  shifted.back().first -= 1;
  CHECK(max_difference(shadow_of(*t.ema.plugin), closed_form_ema(t.trajectory->at_batch, shifted)) > 1e-4);
}

// Probes the model during each evaluation pass: it runs after the ema plugin (callbacks follow algorithms).
struct EvalProbe : baton::Callback {
  const baton::Plugin* ema = nullptr;
  Weights raw_before;  // the weights before the evaluation point
  int passes_with_ema = 0;
  int passes_with_raw = 0;
  int mismatches = 0;
  void batch_end(baton::State& s, baton::Logger&) override { raw_before = copy_state(*s.facts.model()); }
  void eval_start(baton::State& s, baton::Logger&) override {
    Weights now = copy_state(*s.facts.model());
    if (s.eval_label == "eval_raw" && bitwise_equal(now, raw_before))
      ++passes_with_raw;
    else if (s.eval_label == "eval" && bitwise_equal(now, shadow_of(*ema)))
      ++passes_with_ema;
    else
      ++mismatches;
  }
  void eval_end(baton::State& s, baton::Logger&) override {
    if (!bitwise_equal(copy_state(*s.facts.model()), raw_before)) ++mismatches;  // eval_end of the ema plugin ran first
  }
};

// Evaluates `weights` on the test eval set with a plain trainer (no plugin).
baton::EvalResult evaluate_weights(const Weights& weights) {
  auto trainer = make_trainer(quiet_options());
  {
    c10::NoGradGuard no_grad;
    for (const auto& item : trainer->model().named_parameters(true)) item.value().copy_(weights.at(item.key()));
    for (const auto& item : trainer->model().named_buffers(true)) item.value().copy_(weights.at(item.key()));
  }
  return trainer->evaluate_standalone().at(0);
}

// A linear classifier kept in bfloat16 (the data stays float32): to check an fp32 EMA of low-precision weights.
struct Bf16LinearImpl : torch::nn::Module {
  Bf16LinearImpl() : fc(register_module("fc", torch::nn::Linear(28 * 28, 10))) { to(at::kBFloat16); }
  at::Tensor forward(at::Tensor x) { return fc->forward(x.flatten(1).to(at::kBFloat16)).to(at::kFloat); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Bf16Linear);

}  // namespace

TEST_SUITE("ema_plugin") {
  TEST_CASE("updates happen exactly at the expected batches for every interval and start unit") {
    // 3 batches per epoch. Each schedule written out by hand: (batch, smoothing), the first being the copy made at
    // the first update point at or after ema_start.
    check_closed_form("smoothing = 0.5", Time(2, TimeUnit::epoch),
                      {{1, 0}, {2, 0.5}, {3, 0.5}, {4, 0.5}, {5, 0.5}, {6, 0.5}});
    // half_life 2ba, one update every 2ba: s = 2^(-2/2) = 0.5, updates at batches 2, 4, 6.
    check_closed_form("half_life = \"2ba\"\nupdate_interval = \"2ba\"", Time(2, TimeUnit::epoch),
                      {{2, 0}, {4, 0.5}, {6, 0.5}});
    // Start at batch 3 with updates every 2ba: the first update point at or after it is batch 4.
    check_closed_form("half_life = \"4ba\"\nupdate_interval = \"2ba\"\nema_start = \"3ba\"",
                      Time(2, TimeUnit::epoch), {{4, 0}, {6, std::pow(2.0, -0.5)}});
    // Half of 6 batches: the fraction reaches 0.5 after batch 3.
    check_closed_form("smoothing = 0.5\nema_start = \"0.5dur\"", Time(2, TimeUnit::epoch),
                      {{3, 0}, {4, 0.5}, {5, 0.5}, {6, 0.5}});
    // Per-batch updates from epoch 1: batch 3 still belongs to epoch 0 (the counter moves after it).
    check_closed_form("smoothing = 0.5\nema_start = \"1ep\"", Time(2, TimeUnit::epoch),
                      {{4, 0}, {5, 0.5}, {6, 0.5}});
    // In epochs: at each epoch_end (after batches 3, 6, 9), starting at the first epoch.
    check_closed_form("half_life = \"1ep\"\nupdate_interval = \"1ep\"\nema_start = \"1ep\"", Time(3, TimeUnit::epoch),
                      {{3, 0}, {6, 0.5}, {9, 0.5}});
    // 0.4 of 9 batches: epoch 1 ends at 0.33 (too early), epoch 2 at 0.67.
    check_closed_form("smoothing = 0.5\nupdate_interval = \"1ep\"\nema_start = \"0.4dur\"", Time(3, TimeUnit::epoch),
                      {{6, 0}, {9, 0.5}});
    // Every second epoch of four.
    check_closed_form("smoothing = 0.25\nupdate_interval = \"2ep\"", Time(4, TimeUnit::epoch), {{6, 0}, {12, 0.25}});
  }

  TEST_CASE("warmup schedules follow TensorFlow's and ema-pytorch's formulas") {
    // n = updates so far (the initialising copy is the first).
    Steps tf = {{1, 0}};
    for (int b = 2; b <= 6; ++b) {
      double n = b - 1;
      tf.emplace_back(b, std::min(0.9, (1 + n) / (10 + n)));
    }
    check_closed_form("smoothing = 0.9\nwarmup = \"tf\"", Time(2, TimeUnit::epoch), tf);

    Steps power = {{1, 0}};
    for (int b = 2; b <= 6; ++b) power.emplace_back(b, 1 - std::pow(1.0 + (b - 1), -2.0 / 3.0));  // all below 0.9
    check_closed_form("smoothing = 0.9\nwarmup = \"power\"", Time(2, TimeUnit::epoch), power);

    // inv_gamma 2, power 1, floor 0.5: 1 - 1/(1 + n/2) = 0.333 (floored to 0.5), 0.5, 0.6, 0.667, 0.714.
    Steps clamped = {{1, 0}, {2, 0.5}, {3, 0.5}, {4, 0.6}, {5, 2.0 / 3.0}, {6, 1 - 1 / 3.5}};
    check_closed_form("smoothing = 0.9\nwarmup = \"power\"\ninv_gamma = 2.0\npower = 1.0\nmin_smoothing = 0.5",
                      Time(2, TimeUnit::epoch), clamped);
    // And the target caps the schedule: with s = 0.55, 0.6 and above become 0.55.
    Steps capped = {{1, 0}, {2, 0.5}, {3, 0.5}, {4, 0.55}, {5, 0.55}, {6, 0.55}};
    check_closed_form("smoothing = 0.55\nwarmup = \"power\"\ninv_gamma = 2.0\npower = 1.0\nmin_smoothing = 0.5",
                      Time(2, TimeUnit::epoch), capped);
  }

  TEST_CASE("floating buffers are averaged or copied; integer buffers are always copied; exclude copies") {
    auto averaged = train_with_ema("smoothing = 0.5", lasting(Time(2, TimeUnit::epoch)));
    Weights ema = shadow_of(*averaged.ema.plugin);
    const auto& last = averaged.trajectory->at_batch.at(6);
    // BatchNorm's counter: the count at the last update, int64, not an average truncated.
    REQUIRE(ema.count("features.1.num_batches_tracked"));
    CHECK((ema.at("features.1.num_batches_tracked").scalar_type() == at::kLong));
    CHECK(ema.at("features.1.num_batches_tracked").item<std::int64_t>() == 6);
    CHECK_FALSE(at::equal(ema.at("features.1.running_mean"), last.at("features.1.running_mean")));

    auto copied = train_with_ema("smoothing = 0.5\nbuffers = \"copy\"", lasting(Time(2, TimeUnit::epoch)));
    Weights copy = shadow_of(*copied.ema.plugin);
    const auto& copied_last = copied.trajectory->at_batch.at(6);
    CHECK(at::equal(copy.at("features.1.running_mean"), copied_last.at("features.1.running_mean")));
    CHECK(at::equal(copy.at("features.1.running_var"), copied_last.at("features.1.running_var")));
    CHECK_FALSE(at::equal(copy.at("features.0.weight"), copied_last.at("features.0.weight")));  // still averaged

    auto excluded = train_with_ema("smoothing = 0.5\nexclude = [\"classifier.*\"]", lasting(Time(2, TimeUnit::epoch)));
    Weights kept = shadow_of(*excluded.ema.plugin);
    const auto& excluded_last = excluded.trajectory->at_batch.at(6);
    int classifier_tensors = 0;
    for (const auto& [name, tensor] : kept) {
      if (name.rfind("classifier.", 0) != 0) continue;
      ++classifier_tensors;
      CHECK(at::equal(tensor, excluded_last.at(name)));
    }
    CHECK(classifier_tensors >= 2);
    CHECK_FALSE(at::equal(kept.at("features.0.weight"), excluded_last.at("features.0.weight")));
  }

  TEST_CASE("dtype = \"float32\" keeps an fp32 EMA of bf16 weights; auto keeps the weights' dtype") {
    for (bool fp32 : {true, false}) {
      CAPTURE(fp32);
      at::manual_seed(3);
      Bf16Linear model;
      auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
      auto options = quiet_options();
      options.eval_interval = Time(0, TimeUnit::epoch);
      baton::Trainer trainer(torch::nn::AnyModule(model), optimizer, baton::make_synthetic_dataset(96, 7),
                             baton::make_synthetic_dataset(50, 8), options);
      auto ema = load_ema(std::string("smoothing = 0.5\ndtype = \"") + (fp32 ? "float32" : "auto") + "\"");
      auto trajectory = std::make_shared<TrajectoryRecorder>();
      trainer.add_plugin("ema", ema.plugin);
      trainer.add_plugin("trajectory", trajectory);
      trainer.fit();
      Weights shadow = shadow_of(*ema.plugin);
      CHECK((shadow.at("fc.weight").scalar_type() == (fp32 ? at::kFloat : at::kBFloat16)));
      CHECK((model->fc->weight.scalar_type() == at::kBFloat16));
      Weights expected = closed_form_ema(trajectory->at_batch, {{1, 0}, {2, .5}, {3, .5}, {4, .5}, {5, .5}, {6, .5}});
      // fp32 keeps the average to fp32 rounding; a bf16 EMA rounds every step to 8 bits of mantissa.
      double error = max_difference(shadow, expected);
      if (fp32)
        CHECK(error < 1e-6);
      else
        CHECK(error < 0.02);
    }
  }

  TEST_CASE("evaluation swaps the EMA in and the raw weights back bitwise; eval = both logs both") {
    auto options = quiet_options();
    options.eval_interval = Time(1, TimeUnit::batch);
    auto plain = make_trainer(options);
    auto plain_result = plain->fit();

    auto trainer = make_trainer(options);
    auto ema = load_ema("smoothing = 0.6\neval = \"both\"");
    auto probe = std::make_shared<EvalProbe>();
    probe->ema = ema.plugin.get();
    trainer->add_plugin("ema", ema.plugin);
    trainer->add_plugin("probe", probe);
    auto result = trainer->fit();

    // Training never saw the EMA: the raw trajectory is bitwise the plain run's.
    CHECK(bitwise_equal(copy_state(trainer->model()), copy_state(plain->model())));
    CHECK(probe->mismatches == 0);
    CHECK(probe->passes_with_ema == 6);  // one "eval" pass per batch, the EMA started at batch 1
    CHECK(probe->passes_with_raw == 6);  // and one "eval_raw" pass per batch
    REQUIRE(result.evals.size() == plain_result.evals.size());
    for (std::size_t i = 0; i < result.evals.size(); ++i) {
      const auto& m = result.evals[i].metrics;
      REQUIRE(m.count("eval/loss"));
      REQUIRE(m.count("eval_raw/loss"));
      CHECK(m.at("eval_raw/loss") == plain_result.evals[i].metrics.at("eval/loss"));
      CHECK(m.at("eval_raw/accuracy") == plain_result.evals[i].metrics.at("eval/accuracy"));
    }
    // The last "eval" pass is the EMA: the same numbers as evaluating the final EMA weights separately.
    auto separate = evaluate_weights(shadow_of(*ema.plugin));
    CHECK(result.evals.back().metrics.at("eval/loss") == doctest::Approx(separate.loss).epsilon(1e-6));
    CHECK(result.evals.back().metrics.at("eval/loss") != result.evals.back().metrics.at("eval_raw/loss"));
  }

  TEST_CASE("before ema_start evaluation uses the raw weights; eval = raw never swaps") {
    auto options = quiet_options();
    options.eval_interval = Time(1, TimeUnit::batch);
    options.max_duration = Time(1, TimeUnit::epoch);
    auto plain = make_trainer(options)->fit();
    for (const char* toml : {"smoothing = 0.6\nema_start = \"1ep\"", "smoothing = 0.6\neval = \"raw\""}) {
      CAPTURE(toml);
      auto t = train_with_ema(toml, options);
      REQUIRE(t.result.evals.size() == 3);
      for (int i = 0; i < 3; ++i) CHECK(t.result.evals[i].metrics.at("eval/loss") == plain.evals[i].metrics.at("eval/loss"));
      CHECK(t.result.evals[0].metrics.count("eval_raw/loss") == 0);
    }
  }

  TEST_CASE("checkpoints and the run folder carry ema.safetensors under the model's names") {
    auto dir = baton::test::scratch_dir("ema-export");
    auto options = quiet_options(dir.string());
    auto t = train_with_ema("smoothing = 0.7\nema_start = \"4ba\"", options);
    Weights model = copy_state(t.trainer->model());

    // ep1 (batch 3) is before ema_start: its inference weights are the raw ones, as saved in the checkpoint.
    auto ep1 = to_map(baton::read_safetensors((dir / "checkpoints" / "ep1" / "ema.safetensors").string()).tensors);
    CHECK(bitwise_equal(ep1, t.trajectory->at_batch.at(3)));

    auto ep2 = baton::read_safetensors((dir / "checkpoints" / "ep2" / "ema.safetensors").string());
    auto final_export = baton::read_safetensors((dir / "ema.safetensors").string());
    Weights shadow = shadow_of(*t.ema.plugin);
    std::vector<std::string> model_names;
    for (const auto& item : t.trainer->model().named_parameters(true)) model_names.push_back(item.key());
    for (const auto& item : t.trainer->model().named_buffers(true)) model_names.push_back(item.key());
    std::vector<std::string> file_names;
    for (const auto& [name, tensor] : ep2.tensors) file_names.push_back(name);
    CHECK(file_names == model_names);
    CHECK(bitwise_equal(to_map(ep2.tensors), shadow));
    CHECK(bitwise_equal(to_map(final_export.tensors), shadow));
    CHECK_FALSE(bitwise_equal(shadow, model));
    CHECK(max_difference(shadow, closed_form_ema(t.trajectory->at_batch, {{4, 0}, {5, 0.7}, {6, 0.7}})) < 2e-6);
    // The checkpoint's model section keeps the raw weights (the EMA is only what gets exported).
    CHECK(fs::exists(dir / "model.safetensors"));
    CHECK(bitwise_equal(to_map(baton::read_safetensors((dir / "model.safetensors").string()).tensors), model));
    for (const auto& entry : fs::directory_iterator(dir)) CHECK(entry.path().filename().string()[0] != '.');
  }

  TEST_CASE("a run stopped and resumed ends bitwise identical to an uninterrupted one, EMA included") {
    auto dir = baton::test::scratch_dir("ema-resume");
    const std::string toml = "half_life = \"2ba\"\nema_start = \"0.3dur\"\nwarmup = \"power\"\neval = \"both\"";
    auto options = [&](const std::string& name) {
      auto o = quiet_options((dir / name).string());
      o.max_duration = Time(3, TimeUnit::epoch);
      o.save_interval = Time(1, TimeUnit::batch);
      return o;
    };
    auto whole = train_with_ema(toml, options("whole"));

    struct StopAt : baton::Callback {
      void batch_end(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch == 5) s.request_stop("pause");
      }
    };
    auto first = make_trainer(options("split"));
    auto first_ema = load_ema(toml);
    first->add_plugin("ema", first_ema.plugin);
    first->add_plugin("stop", std::make_shared<StopAt>());
    CHECK(first->fit().end.batch == 5);

    auto resumed_options = options("split");
    resumed_options.resume = "auto";
    auto resumed = train_with_ema(toml, resumed_options);
    CHECK(resumed.result.end.batch == 9);
    CHECK(bitwise_equal(copy_state(resumed.trainer->model()), copy_state(whole.trainer->model())));
    CHECK(bitwise_equal(shadow_of(*resumed.ema.plugin), shadow_of(*whole.ema.plugin)));
    CHECK_FALSE(bitwise_equal(shadow_of(*whole.ema.plugin), copy_state(whole.trainer->model())));
    baton::StateDict a, b;
    whole.ema.plugin->state_dict(a);
    resumed.ema.plugin->state_dict(b);
    CHECK(a.get_int("updates") == b.get_int("updates"));
    CHECK(a.get_int("updates") == 7);  // started at batch 3 (0.3 of 9 batches), then batches 4..9
    CHECK(resumed.result.evals.back().metrics.at("eval/loss") == whole.result.evals.back().metrics.at("eval/loss"));
  }

  TEST_CASE("resuming from a checkpoint without EMA state starts the EMA from the loaded weights, with a warning") {
    auto dir = baton::test::scratch_dir("ema-resume-without");
    auto first_options = quiet_options(dir.string());
    first_options.max_duration = Time(1, TimeUnit::epoch);
    auto first = make_trainer(first_options);
    auto recorder = std::make_shared<TrajectoryRecorder>();
    first->add_plugin("trajectory", recorder);
    first->fit();

    auto second_options = quiet_options(dir.string());
    second_options.resume = (dir / "checkpoints" / "ep1").string();
    auto second = make_trainer(second_options);
    auto ema = load_ema("smoothing = 1.0");  // s = 1: the EMA stays what it started from
    second->add_plugin("ema", ema.plugin);
    second->fit();
    CHECK(warned(*second, "holds no EMA state"));
    CHECK(warned(*second, "starts from the loaded weights"));
    // Floating tensors kept what was loaded (s = 1); the integer counter is copied at every update.
    Weights shadow = shadow_of(*ema.plugin);
    Weights final_weights = copy_state(second->model());
    const Weights& loaded = recorder->at_batch.at(3);
    REQUIRE(shadow.size() == loaded.size());
    for (const auto& [name, tensor] : shadow) {
      CAPTURE(name);
      CHECK(at::equal(tensor, tensor.is_floating_point() ? loaded.at(name) : final_weights.at(name)));
    }
    CHECK_FALSE(at::equal(shadow.at("features.0.weight"), final_weights.at("features.0.weight")));
  }

  TEST_CASE("an EMA that does not match the model is an error naming the tensor") {
    auto trainer = make_trainer(quiet_options());
    auto ema = load_ema("smoothing = 0.9");
    trainer->add_plugin("ema", ema.plugin);
    trainer->evaluate_standalone();  // init builds the EMA
    baton::StateDict good;
    ema.plugin->state_dict(good);

    baton::StateDict wrong_shape = good;
    wrong_shape.set_tensor("shadow/features.0.weight", at::zeros({3, 3}));
    try {
      ema.plugin->load_state_dict(wrong_shape);
      FAIL("a wrong shape was accepted");
    } catch (const baton::CheckpointError& e) {
      CHECK(contains(e.what(), "features.0.weight"));
      CHECK(contains(e.what(), "does not match the model"));
    }

    baton::StateDict missing;
    missing.set_bool("started", true);
    missing.set_int("updates", 1);
    std::string left_out;
    for (const auto& key : good.tensor_keys()) {
      if (left_out.empty() && key.rfind("shadow/classifier.", 0) == 0)
        left_out = key.substr(7);
      else
        missing.set_tensor(key, good.tensor(key));
    }
    REQUIRE_FALSE(left_out.empty());
    try {
      ema.plugin->load_state_dict(missing);
      FAIL("a missing tensor was accepted");
    } catch (const baton::CheckpointError& e) {
      CHECK(contains(e.what(), left_out));
    }
    CHECK_NOTHROW(ema.plugin->load_state_dict(good));
  }

  TEST_CASE("baton eval --weights ema|raw evaluates a checkpoint with either set") {
    auto dir = baton::test::scratch_dir("ema-standalone");
    auto t = train_with_ema("smoothing = 0.6", quiet_options(dir.string()));
    const std::string checkpoint = (dir / "checkpoints" / "ep2").string();
    auto ema_weights = to_map(baton::read_safetensors(checkpoint + "/ema.safetensors").tensors);
    auto expected_ema = evaluate_weights(ema_weights);
    auto expected_raw = evaluate_weights(copy_state(t.trainer->model()));
    REQUIRE(expected_ema.loss != expected_raw.loss);

    for (std::string weights : {"", "ema", "raw"}) {
      CAPTURE(weights);
      auto options = quiet_options();
      options.eval_weights = weights;
      auto evaluator = make_trainer(options);
      auto ema = load_ema("smoothing = 0.6");
      evaluator->add_plugin("ema", ema.plugin);
      auto results = evaluator->evaluate_standalone(checkpoint);
      REQUIRE(results.size() == 1);
      CHECK(results[0].loss == (weights == "raw" ? expected_raw.loss : expected_ema.loss));
      // And the model is left holding the raw weights of the checkpoint.
      CHECK(bitwise_equal(copy_state(evaluator->model()), copy_state(t.trainer->model())));
    }
  }

  TEST_CASE("under trainer.cuda_graphs the EMA names each step's variant, and a replayed update only counts") {
    // What a recording trainer asks of it, on the CPU: capture.active from fit_start; each step's variant read at
    // before_train_batch (after the plugins' batch_start); batch 6's batch_end marked as after a replay.
    struct Probe : baton::Algorithm {
      std::vector<std::string> seen;
      void subscribe(baton::Subscriptions& events) override {
        events.on(Event::fit_start, [](baton::State& s, baton::Logger&) { s.capture.active = true; });
        events.on(Event::before_train_batch, [this](baton::State& s, baton::Logger&) {
          if (!s.capture.uncaptured.empty()) seen.push_back("uncaptured");
          else seen.push_back(s.capture.variant.size() == 1 ? std::to_string(s.capture.variant[0]) : "?");
        });
        events.on(Event::batch_end, [](baton::State& s, baton::Logger&) { s.capture.replayed = s.timestamp().batch == 6; });
      }
    };
    struct ReplayEnd : baton::Algorithm {
      void subscribe(baton::Subscriptions& events) override {
        events.on(Event::batch_end, [](baton::State& s, baton::Logger&) { s.capture.replayed = false; });
      }
    };
    auto probe = std::make_shared<Probe>();
    auto trainer = make_trainer(lasting(Time(8, TimeUnit::batch)));
    baton::LoadedPlugin ema = load_ema("half_life = \"4ba\"\nupdate_interval = \"2ba\"\nema_start = \"3ba\"");
    auto trajectory = std::make_shared<TrajectoryRecorder>();
    trainer->add_plugin("probe", probe);
    trainer->add_plugin("ema", ema.plugin);
    trainer->add_plugin("replay_end", std::make_shared<ReplayEnd>());
    trainer->add_plugin("trajectory", trajectory);
    trainer->fit();
    // Update points at batches 2, 4, 6, 8 (every 2ba); the first at or after 3ba, batch 4, copies the weights.
    // Step k ends at batch k + 1: nothing to record at 1, 2 (before the start), 3, 5, 7; the copy uncaptured; an
    // update at 6 and 8.
    CHECK(probe->seen == std::vector<std::string>{"0", "0", "0", "uncaptured", "0", "1", "0", "1"});
    // Batch 6's update was the graph's: the plugin launched nothing, so the average holds the copy at 4 and the
    // update at 8 (s = 2^(-2/4)), while the count has all three, as a run whose graph ran it would.
    const double s = std::pow(2.0, -0.5);
    CHECK(max_difference(shadow_of(*ema.plugin), closed_form_ema(trajectory->at_batch, {{4, 0}, {8, s}})) < 2e-6);
    CHECK(max_difference(shadow_of(*ema.plugin), closed_form_ema(trajectory->at_batch, {{4, 0}, {6, s}, {8, s}})) >
          1e-4);
    baton::StateDict saved;
    ema.plugin->state_dict(saved);
    CHECK(saved.get_int("updates") == 3);
  }

  TEST_CASE("the EMA declares itself capturable only when its update is one lerp at a fixed smoothing") {
    const auto capturable = [](const std::string& toml) {
      baton::Declarations run;
      load_ema(toml).plugin->declare(run);
      return run.capturable_count() == 1;
    };
    CHECK(capturable("half_life = \"350ba\""));
    CHECK_FALSE(capturable("half_life = \"350ba\"\nwarmup = \"tf\""));
    CHECK_FALSE(capturable("half_life = \"350ba\"\ndevice = \"cpu\""));
    CHECK_FALSE(capturable("half_life = \"350ba\"\nposthoc = { sigma_rels = [0.05, 0.10] }"));
  }
}
