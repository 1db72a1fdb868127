// Post-hoc EMA with tensors: the tracker against closed-form power-function averages (any update interval),
// snapshot files, resume, and the plugin's configuration errors.
#include "baton_test.h"

#include <cmath>
#include <string>
#include <vector>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "baton/posthoc.h"
#include "ema_test_support.h"

using namespace ema_test;
namespace ph = baton::posthoc;

namespace {

// The power-function EMA written out by hand: the weights x_k of update time t_k count
// (t_k^(γ+1) − t_(k−1)^(γ+1)) / t_n^(γ+1), the profile (γ+1) τ^γ / t_n^(γ+1) integrated over [t_(k−1), t_k].
Weights closed_form_power_ema(const std::map<std::int64_t, Weights>& at_batch, const std::vector<std::int64_t>& times,
                              double gamma) {
  Weights e;
  const double end = std::pow(static_cast<double>(times.back()), gamma + 1);
  double previous = 0;
  for (std::int64_t t : times) {
    double now = std::pow(static_cast<double>(t), gamma + 1);
    double weight = (now - previous) / end;
    previous = now;
    for (const auto& [name, w] : at_batch.at(t)) {
      if (!w.is_floating_point())
        e[name] = w.clone();
      else
        e[name] = e.count(name) ? e[name] + w.to(at::kDouble) * weight : w.to(at::kDouble) * weight;
    }
  }
  return e;
}

Weights profile_of(const baton::Plugin& plugin, int index) {
  baton::StateDict state;
  plugin.state_dict(state);
  const std::string prefix = "posthoc/" + std::to_string(index) + "/";
  Weights out;
  for (const auto& key : state.tensor_keys())
    if (key.rfind(prefix, 0) == 0) out[key.substr(prefix.size())] = state.tensor(key);
  return out;
}

baton::TrainerOptions batches(std::int64_t count, const std::string& run_dir = "") {
  auto o = quiet_options(run_dir);
  o.max_duration = Time(count, TimeUnit::batch);
  return o;
}

}  // namespace

TEST_SUITE("ema_plugin") {
  TEST_CASE("posthoc: the plugin's profiles are the closed-form power EMA for update intervals 1 and 4") {
    for (int interval : {1, 4}) {
      CAPTURE(interval);
      const std::string every = std::to_string(interval) + "ba";
      auto run = train_with_ema("half_life = \"" + every + "\"\nupdate_interval = \"" + every +
                           "\"\nposthoc = { sigma_rels = [0.05, 0.10] }",
                       batches(24));
      std::vector<std::int64_t> times;
      for (std::int64_t t = interval; t <= 24; t += interval) times.push_back(t);
      for (int i = 0; i < 2; ++i) {
        double gamma = ph::gamma_from_sigma_rel(i == 0 ? 0.05 : 0.10);
        Weights profile = profile_of(*run.ema.plugin, i);
        REQUIRE(!profile.empty());
        CHECK(max_difference(profile, closed_form_power_ema(run.trajectory->at_batch, times, gamma)) < 2e-6);
        if (interval > 1) {
          // ema-pytorch's β = (1 − 1/t)^(γ+1) per update ignores the 4 batches between updates: another average.
          std::vector<std::pair<std::int64_t, double>> per_call{{times.front(), 0.0}};
          for (std::size_t k = 1; k < times.size(); ++k)
            per_call.emplace_back(times[k], std::pow(1.0 - 1.0 / static_cast<double>(times[k]), gamma + 1));
          CHECK(max_difference(profile, closed_form_ema(run.trajectory->at_batch, per_call)) > 1e-4);
        }
      }
    }
  }

  TEST_CASE("posthoc: snapshots carry time, gamma and sigma_rel under the model's names; resume is exact") {
    auto dir = baton::test::scratch_dir("posthoc-run");
    const std::string toml =
        "half_life = \"4ba\"\nupdate_interval = \"2ba\"\n"
        "posthoc = { sigma_rels = [0.05, 0.10], snapshot_every = \"1ep\", dtype = \"float32\" }";
    auto whole = train_with_ema(toml, batches(9, (dir / "whole").string()));
    // Epochs end at batches 3, 6, 9; the profiles were last updated at 2, 6 and 8; fit_end adds nothing new.
    for (const char* name : {"sigma0.05_0000000002", "sigma0.05_0000000006", "sigma0.1_0000000008"})
      CHECK_MESSAGE(fs::exists(dir / "whole" / "posthoc" / (std::string(name) + ".safetensors")), name);
    auto file = baton::read_safetensors((dir / "whole" / "posthoc" / "sigma0.1_0000000008.safetensors").string());
    CHECK(file.metadata.at("baton.posthoc.t") == "8");
    CHECK(std::stod(file.metadata.at("baton.posthoc.sigma_rel")) == 0.10);
    CHECK(std::stod(file.metadata.at("baton.posthoc.gamma")) == doctest::Approx(6.94).epsilon(1e-3));
    Weights model = copy_state(whole.trainer->model());
    Weights stored = to_map(file.tensors);
    CHECK(stored.size() == model.size());
    for (const auto& [name, tensor] : model) CHECK_MESSAGE(stored.count(name) == 1, name);
    CHECK(bitwise_equal(stored, profile_of(*whole.ema.plugin, 1)));

    struct StopAt : baton::Callback {
      void batch_end(baton::State& s, baton::Logger&) override {
        if (s.timestamp().batch == 5) s.request_stop("pause");
      }
    };
    auto split_options = batches(9, (dir / "split").string());
    split_options.save_interval = Time(1, TimeUnit::batch);
    auto first = make_trainer(split_options);
    auto first_ema = load_ema(toml);
    first->add_plugin("ema", first_ema.plugin);
    first->add_plugin("stop", std::make_shared<StopAt>());
    CHECK(first->fit().end.batch == 5);
    split_options.resume = "auto";
    auto resumed = train_with_ema(toml, split_options);
    for (int i = 0; i < 2; ++i) CHECK(bitwise_equal(profile_of(*resumed.ema.plugin, i), profile_of(*whole.ema.plugin, i)));
    CHECK_FALSE(bitwise_equal(profile_of(*whole.ema.plugin, 0), profile_of(*whole.ema.plugin, 1)));
    baton::StateDict state;
    resumed.ema.plugin->state_dict(state);
    CHECK(state.get_int("posthoc.time") == 8);
    CHECK(baton::read_safetensors((dir / "split" / "posthoc" / "sigma0.05_0000000008.safetensors").string()).tensors.size() ==
          file.tensors.size());
  }

  TEST_CASE("posthoc: resuming without profiles starts them from the loaded weights; other sigma_rels are refused") {
    auto dir = baton::test::scratch_dir("posthoc-resume-other");
    const std::string plain = "half_life = \"4ba\"";
    const std::string tracked = plain + "\nposthoc = { sigma_rels = [0.05, 0.10] }";
    auto first = train_with_ema(plain, batches(3, (dir / "plain").string()));
    auto options = batches(6, (dir / "plain").string());
    options.resume = "auto";
    auto resumed = train_with_ema(tracked, options);
    CHECK(warned(*resumed.trainer, "holds no post-hoc EMA profiles"));
    // Started at batch 3 from the weights then, as if they had been the weights since batch 0: the power weights
    // of update times 3, 4, 5, 6.
    std::map<std::int64_t, Weights> at_batch = resumed.trajectory->at_batch;
    at_batch[3] = first.trajectory->at_batch.at(3);
    for (int i = 0; i < 2; ++i) {
      double gamma = ph::gamma_from_sigma_rel(i == 0 ? 0.05 : 0.10);
      CHECK(max_difference(profile_of(*resumed.ema.plugin, i), closed_form_power_ema(at_batch, {3, 4, 5, 6}, gamma)) <
            2e-6);
    }

    train_with_ema(tracked, batches(3, (dir / "tracked").string()));
    auto other = batches(6, (dir / "tracked").string());
    other.resume = "auto";
    auto trainer = make_trainer(other);
    auto ema = load_ema(plain + "\nposthoc = { sigma_rels = [0.05, 0.2] }");
    trainer->add_plugin("ema", ema.plugin);
    CHECK_THROWS_WITH(trainer->fit(), doctest::Contains("differ from posthoc.sigma_rels (sigma0.05, sigma0.2)"));
  }

  TEST_CASE("posthoc: configuration errors name the key and what was expected") {
    CHECK(contains(config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05] }"),
                                "posthoc.sigma_rels: expected at least two"));
    CHECK(contains(config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05, 0.3] }"),
                                "each sigma_rel must lie in (0, 0.2887]"));
    CHECK(contains(config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05, 0.05] }"),
                                "listed twice"));
    CHECK(contains(
        config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05, 0.1], snapshot_every = \"2sp\" }"),
        "snapshot_every"));
    CHECK(contains(
        config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05, 0.1], dtype = \"half\" }"),
        "expected one of \"auto\", \"float32\""));
    CHECK(contains(
        config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05, 0.1], every = \"1ep\" }"), "every"));
    CHECK(config_error("half_life = \"4ba\"\nposthoc = { sigma_rels = [0.05, 0.1] }").empty());
  }
}
