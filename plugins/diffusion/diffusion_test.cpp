// The diffusion example: the schedules, noising, DDPM loss and DDIM sampler against hand computations; the Frechet
// distance against its defining properties and against numpy/scipy; the plugin library (denoiser, fd, sample grids)
// in whole runs of `baton train`, resumed bitwise, and its fd on two ranks against one.
#include "baton_test.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <nlohmann/json.hpp>

#include "baton/models.h"
#include "baton/safetensors.h"
#include "baton_command.h"
#include "denoiser.h"
#include "diffusion_math.h"
#include "diffusion_test_support.h"

namespace fs = std::filesystem;
using namespace baton_diffusion;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The product formula of alpha_bar written out here, independently of alphas_bar().
double linear_alpha_bar(std::int64_t t, std::int64_t steps) {
  double product = 1;
  for (std::int64_t s = 1; s <= t; ++s) product *= 1 - (1e-4 + (0.02 - 1e-4) * double(s - 1) / double(steps - 1));
  return product;
}

double cosine_f(double t, double steps) {
  const double c = std::cos((t / steps + 0.008) / 1.008 * std::acos(-1.0) / 2);
  return c * c;
}

FeatureSums sums_of(const at::Tensor& features, std::int64_t batch) {
  // Added batch by batch, as the metric does.
  FeatureSums s;
  const at::Tensor f = features.to(at::kDouble);
  s.sum = at::zeros({f.size(1)}, at::kDouble);
  s.outer = at::zeros({f.size(1), f.size(1)}, at::kDouble);
  for (std::int64_t i = 0; i < f.size(0); i += batch) {
    const at::Tensor part = f.slice(0, i, std::min(f.size(0), i + batch));
    s.count += static_cast<double>(part.size(0));
    s.sum.add_(part.sum(0));
    s.outer.add_(part.t().matmul(part));
  }
  return s;
}

// Correlated features: Gaussian rows times a mixing matrix, plus an offset.
at::Tensor features(std::int64_t n, std::int64_t d, std::uint64_t seed, double offset) {
  auto g = at::detail::createCPUGenerator(seed);
  const at::Tensor mix = at::randn({d, d}, g, at::TensorOptions().dtype(at::kDouble));
  return at::randn({n, d}, g, at::TensorOptions().dtype(at::kDouble)).matmul(mix).add(offset);
}

using Result = baton::test::CommandResult;
using baton::test::run_baton;
using baton::test::run_in;

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::vector<double> logged(const fs::path& metrics, const std::string& name) {
  std::ifstream in(metrics);
  std::string line;
  std::vector<double> values;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains(name) && record[name].is_number()) values.push_back(record[name].get<double>());
  }
  return values;
}

using diffusion_test::write_classifier;

std::string tiny_config(const std::string& name, const std::string& duration) {
  return diffusion_test::tiny_config(name, duration, BATON_PLUGIN_FILE);
}

// The fd that `baton eval` prints for a pass ("checkpoint <folder>: eval fd 3.4465 (32 samples)"), as printed.
std::string printed_fd(const std::string& text, const std::string& pass) {
  std::smatch m;
  const std::regex pattern("checkpoint \\S+: " + pass + " fd ([-+0-9.eE]+) \\(32 samples\\)");
  return std::regex_search(text, m, pattern) ? m[1].str() : "";
}

}  // namespace

TEST_SUITE("diffusion") {
  TEST_CASE("the linear and cosine schedules give alpha_bar as the papers define it") {
    const auto linear = alphas_bar(Schedule::linear, 1000);
    REQUIRE(linear.size() == 1001);
    CHECK(linear[0] == 1.0);
    CHECK(linear[1] == doctest::Approx(0.9999).epsilon(1e-12));
    CHECK(linear[10] == doctest::Approx(linear_alpha_bar(10, 1000)).epsilon(1e-12));
    // DDPM's endpoint (numpy: cumprod(1 - linspace(1e-4, 0.02, 1000))[-1] = 4.035829765375676e-05).
    CHECK(linear[1000] == doctest::Approx(4.035829765375676e-05).epsilon(1e-9));
    const auto cosine = alphas_bar(Schedule::cosine, 1000);
    for (std::int64_t t : {1, 250, 500, 900})
      CHECK(cosine[t] == doctest::Approx(cosine_f(t, 1000) / cosine_f(0, 1000)).epsilon(1e-9));
    // At t = T, f(T) = 0 would make beta 1; it is clipped to 0.999, so one part in a thousand survives.
    CHECK(cosine[1000] == doctest::Approx(cosine[999] * 0.001).epsilon(1e-9));
  }

  TEST_CASE("noising: x_t = sqrt(ab_t) x_0 + sqrt(1 - ab_t) eps, per sample") {
    const auto ab = alphas_bar(Schedule::linear, 1000);
    const at::Tensor x0 = at::tensor({0.5, -1.0, 0.25, 0.75}, at::kDouble).view({2, 1, 1, 2});
    const at::Tensor eps = at::tensor({1.0, 2.0, -0.5, 0.0}, at::kDouble).view({2, 1, 1, 2});
    const at::Tensor t = at::tensor({10, 700}, at::kLong);
    const at::Tensor x_t = noised(x0, t, eps, ab);
    const double a10 = linear_alpha_bar(10, 1000), a700 = linear_alpha_bar(700, 1000);
    const std::vector<double> expected = {std::sqrt(a10) * 0.5 + std::sqrt(1 - a10) * 1.0,
                                          std::sqrt(a10) * -1.0 + std::sqrt(1 - a10) * 2.0,
                                          std::sqrt(a700) * 0.25 + std::sqrt(1 - a700) * -0.5,
                                          std::sqrt(a700) * 0.75};
    const at::Tensor flat = x_t.flatten();
    for (int i = 0; i < 4; ++i) CHECK(flat[i].item<double>() == doctest::Approx(expected[i]).epsilon(1e-12));
  }

  TEST_CASE("the DDPM loss is the mean squared error of the predicted noise on the hand-noised batch") {
    DenoiserSettings settings;
    settings.timesteps = 50;
    settings.base = 8;
    settings.pixel_mean = 0.25;
    settings.pixel_std = 0.5;
    auto g = at::detail::createCPUGenerator(21);
    at::manual_seed(4);
    baton::Model model = make_denoiser(settings, {1, 8, 8}, [&g]() -> at::Generator& { return g; });
    const at::Tensor images = at::rand({6, 1, 8, 8}, at::detail::createCPUGenerator(2));  // pixels in [0, 1]
    const baton::Batch batch{{"inputs", images.sub(0.25).div(0.5)}};
    g.set_current_seed(99);
    const baton::Outputs outputs = model.forward(batch);
    const double loss = model.loss()(outputs, batch).item<double>();

    // The same draws from the same seed: t ~ U{1..50} per sample, then eps ~ N(0, I).
    auto replay = at::detail::createCPUGenerator(99);
    const at::Tensor t = at::randint(1, 51, {6}, replay, at::TensorOptions().dtype(at::kLong));
    const at::Tensor eps = at::randn({6, 1, 8, 8}, replay);
    CHECK(outputs["noise"].equal(eps));
    CHECK(t.min().item<std::int64_t>() >= 1);
    // x_0 in [-1, 1] (pixels * 2 - 1), noised by hand with the schedule's product formula.
    at::Tensor x_t = at::zeros({6, 1, 8, 8});
    for (std::int64_t i = 0; i < 6; ++i) {
      const double ab = linear_alpha_bar(t[i].item<std::int64_t>(), 50);
      x_t[i] = images[i].mul(2).sub(1).mul(std::sqrt(ab)).add(eps[i].mul(std::sqrt(1 - ab)));
    }
    auto net = std::dynamic_pointer_cast<UNetImpl>(model.ptr());
    REQUIRE(net);
    const at::Tensor prediction = net->forward(x_t, t);
    CHECK(at::allclose(outputs["prediction"], prediction, 1e-5, 1e-6));
    const double expected = prediction.to(at::kDouble).sub(eps.to(at::kDouble)).pow(2).mean().item<double>();
    CHECK(loss == doctest::Approx(expected).epsilon(1e-5));
  }

  TEST_CASE("DDIM with a model that predicts the true noise recovers x_0 exactly") {
    for (const auto schedule : {Schedule::linear, Schedule::cosine}) {
      for (const std::int64_t count : {1, 7, 50}) {
        CAPTURE(count);
        const auto ab = alphas_bar(schedule, 1000);
        auto g = at::detail::createCPUGenerator(5);
        const at::Tensor x0 = at::rand({3, 1, 4, 4}, g, at::TensorOptions().dtype(at::kDouble)).mul(2).sub(1);
        const at::Tensor x_T = at::randn({3, 1, 4, 4}, g, at::TensorOptions().dtype(at::kDouble));
        int calls = 0;
        // The oracle: the noise that makes x_t from this x_0 at t, eps = (x_t - sqrt(ab_t) x_0) / sqrt(1 - ab_t).
        const NoisePredictor oracle = [&](const at::Tensor& x, const at::Tensor& t) {
          ++calls;
          const double a = ab[t[0].item<std::int64_t>()];
          return x.sub(x0.mul(std::sqrt(a))).div(std::sqrt(1 - a));
        };
        const at::Tensor sample = ddim_sample(x_T, ab, count, oracle, /*clip=*/false);
        CHECK(calls == count);
        CHECK(sample.sub(x0).abs().max().item<double>() < 1e-9);
        // A predictor of zero noise ends elsewhere: the test can fail.
        const NoisePredictor blind = [](const at::Tensor& x, const at::Tensor&) { return at::zeros_like(x); };
        CHECK(ddim_sample(x_T, ab, count, blind, false).sub(x0).abs().max().item<double>() > 0.1);
      }
    }
    const auto taus = ddim_timesteps(1000, 5);
    // 1 + 999 i / 4 for i = 4..0, rounded half away from zero: 1000, 750.25, 500.5, 250.75, 1.
    CHECK(taus == std::vector<std::int64_t>{1000, 750, 501, 251, 1});
  }

  TEST_CASE("FD(x, x) = 0, a shift c of every feature adds d c^2, and FD grows with the shift") {
    const at::Tensor f = features(500, 6, 1, 0.0);
    const FeatureSums same = sums_of(f, 64);
    CHECK(std::abs(frechet_distance(same, same)) < 1e-8);
    double previous = 0;
    for (const double c : {0.25, 0.5, 1.0, 2.0}) {
      CAPTURE(c);
      const double fd = frechet_distance(same, sums_of(f.add(c), 100));
      CHECK(fd == doctest::Approx(6 * c * c).epsilon(1e-7));
      CHECK(fd > previous);
      previous = fd;
    }
    // A scaled copy: same mean, covariance 4x: Tr(S + 4S - 2 * 2S) = Tr(S).
    const at::Tensor centred = f.sub(f.mean(0));
    const FeatureSums scaled = sums_of(centred.mul(2), 500);
    const double trace = centred.t().matmul(centred).trace().item<double>() / 499;
    CHECK(frechet_distance(sums_of(centred, 500), scaled) == doctest::Approx(trace).epsilon(1e-7));
  }

  TEST_CASE("the Frechet distance matches numpy/scipy on fixed features" *
            doctest::skip(baton::test::without_debian())) {
    const auto dir = baton::test::scratch_dir("diffusion-fd-python");
    const at::Tensor real = features(400, 12, 2, 0.0);
    const at::Tensor generated = features(300, 12, 3, 0.3).mul(0.8);
    const auto save = [&](const at::Tensor& f, const fs::path& path) {
      std::ofstream out(path);
      out.precision(17);
      for (std::int64_t i = 0; i < f.size(0); ++i) {
        for (std::int64_t j = 0; j < f.size(1); ++j) out << (j ? " " : "") << f[i][j].item<double>();
        out << "\n";
      }
    };
    save(real, dir / "real.txt");
    save(generated, dir / "generated.txt");
    const double ours = frechet_distance(sums_of(real, 64), sums_of(generated, 50));
    const Result python = run_in(dir, baton::test::shell_quote(BATON_PYTHON) + " " +
                                          baton::test::shell_quote(std::string(BATON_SOURCE_DIR) +
                                                                   "/plugins/diffusion/fd_reference.py") +
                                          " real.txt generated.txt");
    INFO(python.err);
    REQUIRE(python.status == 0);
    const double reference = std::stod(python.out);
    CHECK(reference > 1.0);
    CHECK(ours == doctest::Approx(reference).epsilon(1e-9));
  }
}

TEST_SUITE("diffusion_cli") {
  TEST_CASE("a small diffusion run trains with EMA and raw fd, writes both grids, and resumes bitwise") {
    const auto dir = baton::test::scratch_dir("diffusion-resume");
    write_classifier(dir);
    write(dir / "whole.toml", tiny_config("whole", "8ba"));
    const Result whole = run_baton(dir, {"train", "whole.toml"});
    INFO(whole.err);
    REQUIRE(whole.status == 0);
    const auto ema_fd = logged(dir / "runs/whole/metrics.jsonl", "eval/fd");
    const auto raw_fd = logged(dir / "runs/whole/metrics.jsonl", "eval_raw/fd");
    REQUIRE(ema_fd.size() == 2);
    REQUIRE(raw_fd.size() == 2);
    CHECK(ema_fd.back() > 0);
    // Two weight sets, the same noise: different samples, so different distances.
    CHECK(ema_fd.back() != raw_fd.back());
    CHECK(logged(dir / "runs/whole/metrics.jsonl", "eval/loss").empty());  // a sampler logs no eval loss
    for (const char* grid : {"eval_ba8.png", "eval_raw_ba8.png", "eval_ba4.png"}) {
      CAPTURE(grid);
      const std::string png = baton::test::read_bytes(dir / "runs/whole/samples" / grid);
      REQUIRE(png.size() > 8);
      CHECK(png.substr(1, 3) == "PNG");
    }

    write(dir / "parted.toml", tiny_config("parted", "4ba"));
    REQUIRE(run_baton(dir, {"train", "parted.toml"}).status == 0);
    write(dir / "parted.toml", tiny_config("parted", "8ba"));
    const Result resumed = run_baton(dir, {"train", "parted.toml", "--resume", "auto"});
    INFO(resumed.err);
    REQUIRE(resumed.status == 0);
    for (const char* file : {"model.safetensors", "ema.safetensors"}) {
      CAPTURE(file);
      const auto a = baton::read_safetensors((dir / "runs/whole" / file).string());
      const auto b = baton::read_safetensors((dir / "runs/parted" / file).string());
      REQUIRE(a.tensors.size() == b.tensors.size());
      for (std::size_t i = 0; i < a.tensors.size(); ++i) {
        CHECK(a.tensors[i].first == b.tensors[i].first);
        CHECK(a.tensors[i].second.equal(b.tensors[i].second));
      }
    }
    CHECK(logged(dir / "runs/parted/metrics.jsonl", "eval/fd").back() == ema_fd.back());

    // The fd metric names what is missing and what to do.
    std::string missing_config = tiny_config("missing", "4ba");
    missing_config.replace(missing_config.find("classifier.safetensors"), 22, "nothing.safetensors");
    write(dir / "missing.toml", missing_config);
    const Result missing = run_baton(dir, {"check", "missing.toml"});
    CHECK(missing.status == 2);
    CHECK(contains(missing.err, "no file 'nothing.safetensors': train the classifier first"));
  }

  TEST_CASE("fd on two ranks equals fd on one") {
    const auto dir = baton::test::scratch_dir("diffusion-ranks");
    write_classifier(dir);
    write(dir / "run.toml", tiny_config("run", "4ba"));
    const Result train = run_baton(dir, {"train", "run.toml"});
    INFO(train.err);
    REQUIRE(train.status == 0);
    const Result one = run_baton(dir, {"eval", "run.toml", "--checkpoint", "runs/run/checkpoints/ba4"});
    INFO(one.out);
    INFO(one.err);
    REQUIRE(one.status == 0);
    const Result two =
        run_baton(dir, {"launch", "--nproc", "2", "eval", "run.toml", "--checkpoint", "runs/run/checkpoints/ba4"});
    INFO(two.out);
    INFO(two.err);
    REQUIRE(two.status == 0);
    // Each rank samples its half from the same seeds (its batches begin at the same samples as one rank's) and the
    // ranks add their sums: the distance over all 32 samples, equal to the printed digits (rank 0's 16 alone, or
    // other noise, give another value: EMA and raw weights on the same noise already differ in the first digits).
    for (const char* pass : {"eval", "eval_raw"}) {
      CAPTURE(pass);
      const std::string fd1 = printed_fd(one.out + one.err, pass), fd2 = printed_fd(two.out + two.err, pass);
      REQUIRE(!fd1.empty());
      CHECK(std::stod(fd1) > 0);
      CHECK(fd2 == fd1);
    }
    CHECK(printed_fd(one.out + one.err, "eval") != printed_fd(one.out + one.err, "eval_raw"));
  }
}
