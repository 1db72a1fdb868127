// The model contract on batches that are not {inputs, targets}: named fields of any dtype, models of several inputs
// and outputs, models with their own loss, losses that read more of the batch, step randomness that resumes
// bitwise. In process (the Trainer from C++) and as a user runs it (baton train / launch from TOML), with the
// components of tests/fixtures/plugins/fixture_any_batch.cpp.
#include "baton_test.h"

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "baton/plugin_loader.h"
#include "baton/safetensors.h"
#include "baton/trainer.h"
#include "baton_command.h"
#include "error_text.h"
#include "tensor_values.h"

namespace fs = std::filesystem;
using baton::test::error_text;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using Result = baton::test::CommandResult;
using baton::test::run_baton;

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// The last value of a metric in a run's metrics.jsonl; NaN when it was never logged.
double last_logged(const fs::path& metrics, const std::string& name) {
  std::ifstream in(metrics);
  std::string line;
  double value = std::nan("");
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains(name) && record[name].is_number()) value = record[name].get<double>();
  }
  return value;
}

// Two inputs x [N, 2] and t [N, 1]; the class is whether x0 * t > 0, which neither input decides alone.
baton::TensorDataset two_input_data(std::int64_t n, std::uint64_t seed, const std::string& name) {
  auto generator = at::detail::createCPUGenerator(seed);
  baton::TensorDataset data;
  data.name = name;
  data.num_classes = 2;
  const at::Tensor x = at::randn({n, 2}, generator);
  const at::Tensor t = at::randn({n, 1}, generator);
  data.targets = x.select(1, 0).mul(t.select(1, 0)).gt(0).to(at::kLong);
  data.fields.set("x", x);
  data.fields.set("t", t);
  return data;
}

// A user's module whose forward takes two tensors.
struct TwoInputImpl : torch::nn::Module {
  TwoInputImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(3, 32), torch::nn::Tanh(),
                                                         torch::nn::Linear(32, 2)))) {}
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t) { return net->forward(at::cat({x, t}, 1)); }
  torch::nn::Sequential net;
};
TORCH_MODULE(TwoInput);

baton::TrainerOptions quiet(const std::string& run_dir, const std::string& duration) {
  baton::TrainerOptions o;
  o.max_duration = baton::Time::parse(duration);
  o.eval_interval = baton::Time::parse("1ep");
  o.save_interval = baton::Time::parse("1ep");
  o.batch_size = 32;
  o.eval_batch_size = 100;
  o.quiet = true;
  o.progress = false;
  o.run_dir = run_dir;
  o.seed = 7;
  o.precision = baton::Precision::fp32;  // the expected values are float32 ones, whatever the CPU
  return o;
}

std::shared_ptr<baton::Plugin> load_ema(const std::string& keys) {
  static baton::PluginLoader loader;
  return loader.load(BATON_EMA_PLUGIN, baton::PluginConfig::from_toml(keys, "ema")).plugin;
}

// The fixture library's components, registered in this process once.
void register_fixture_components() {
  static bool done = false;
  if (done) return;
  baton::PluginLoader().register_components(std::string(BATON_TEST_PLUGIN_DIR) + "/fixture_any_batch.so");
  done = true;
}

baton::Model fixture_model(const std::string& name, const std::string& keys, const baton::DataSpec& spec) {
  register_fixture_components();
  const auto* entry = baton::components().models.find(name);
  REQUIRE(entry != nullptr);
  return entry->factory(baton::PluginConfig::from_toml(keys, name), spec);
}

}  // namespace

TEST_SUITE("any_batch") {
  TEST_CASE("a batch names its fields, and a missing one is an error naming those it has") {
    baton::Batch batch{{"x", at::zeros({4, 2})}, {"mask", at::zeros({4}, at::kBool)}};
    CHECK(batch.size() == 4);
    CHECK(batch.names() == std::vector<std::string>{"x", "mask"});
    const std::string message = error_text([&] { (void)batch.targets(); });
    CHECK(contains(message, "the batch has no field 'targets'"));
    CHECK(contains(message, "x [4, 2] Float, mask [4] Bool"));
    const baton::Batch half = batch.slice(1, 3);
    CHECK(half.size() == 2);
    CHECK((half["mask"].scalar_type() == at::kBool));
    baton::Outputs outputs{{"pred", at::zeros({4, 3})}, {"aux", at::zeros({})}};
    CHECK(outputs.main().size(1) == 3);  // no field "outputs": the first is the main one
    CHECK(baton::Outputs(at::zeros({2})).names() == std::vector<std::string>{"outputs"});
  }

  TEST_CASE("a model whose forward takes two tensors trains from C++, its EMA evaluated and exported") {
    const auto dir = baton::test::scratch_dir("any-batch-two-input");
    at::manual_seed(3);
    TwoInput net;
    // Converting the user's module is one line: which fields feed which argument.
    baton::Model model(net, [net](const baton::Batch& b) mutable { return net->forward(b["x"], b["t"]); });
    auto optimizer = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    baton::Trainer trainer(model, optimizer, two_input_data(800, 1, "two/train"), two_input_data(400, 2, "two/eval"),
                           quiet((dir / "run").string(), "12ep"));
    trainer.add_plugin("ema", load_ema("half_life = \"50ba\"\nema_start = \"2ep\"\neval = \"both\""));
    const baton::FitResult result = trainer.fit();
    REQUIRE(!result.evals.empty());
    const auto& last = result.evals.back().metrics;
    // Neither input alone decides the class (about 0.5 accuracy); both together do.
    CHECK(last.at("eval/accuracy") > 0.9);
    CHECK(last.at("eval_raw/accuracy") > 0.9);
    // The EMA is its own weight set: its loss differs from the raw weights'.
    CHECK(last.at("eval/loss") != last.at("eval_raw/loss"));
    // ema.safetensors holds the averaged weights under the module's own names, and they are not the raw ones.
    const auto ema = baton::read_safetensors((dir / "run" / "ema.safetensors").string());
    std::vector<std::string> names;
    for (const auto& [name, t] : ema.tensors) names.push_back(name);
    CHECK(names == std::vector<std::string>{"net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"});
    CHECK_FALSE(ema.tensors.front().second.equal(net->named_parameters()["net.0.weight"].detach()));
  }

  TEST_CASE("a model with two outputs computes its own loss, and refuses another") {
    baton::TensorDataset data;
    auto generator = at::detail::createCPUGenerator(5);
    data.inputs = at::randn({64, 3}, generator);
    data.targets = at::randint(0, 2, {64}, generator);
    data.num_classes = 2;
    at::manual_seed(1);
    baton::Model model = fixture_model("two_head", "penalty = 0.5", data.spec());
    // lr 0: the first batch's logged loss is the model's own loss on the untrained weights, over the whole set.
    auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.0));
    baton::TrainerOptions options = quiet("", "1ba");
    options.batch_size = 64;
    options.log_interval = baton::Time::parse("1ba");
    double cross_entropy = 0, penalty = 0;
    {
      c10::NoGradGuard no_grad;
      const auto params = model.ptr()->named_parameters();
      const at::Tensor w = params["linear.weight"], b = params["linear.bias"];
      cross_entropy = at::cross_entropy_loss(data.inputs.matmul(w.t()).add(b), data.targets).item<double>();
      penalty = 0.5 * w.pow(2).sum().item<double>();
    }
    baton::Trainer trainer(model, optimizer, data, baton::TensorDataset(), options);
    trainer.fit();
    CHECK(trainer.state().metrics.at("train/loss") == doctest::Approx(cross_entropy + penalty).epsilon(1e-6));
    // Cross entropy alone would log less: the auxiliary output is part of the loss.
    CHECK(penalty > 1e-3);
    options.loss = [](const baton::Outputs& o, const baton::Batch&) { return o.main().sum(); };
    CHECK(contains(error_text([&] { baton::Trainer(model, optimizer, data, baton::TensorDataset(), options); }),
                   "the model computes its own loss"));
  }

  TEST_CASE("step randomness: a model that draws noise in its forward resumes bitwise") {
    const auto dir = baton::test::scratch_dir("any-batch-step-random");
    baton::TensorDataset data;
    auto generator = at::detail::createCPUGenerator(9);
    data.inputs = at::randn({96, 4}, generator);
    data.targets = data.inputs.sum(1, true);
    const auto train = [&](const std::string& run, const std::string& duration, const std::string& resume,
                           std::uint64_t seed) {
      at::manual_seed(2);
      baton::Model model = fixture_model("noisy_linear", "scale = 1.0", data.spec());
      auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.05));
      baton::TrainerOptions options = quiet((dir / run).string(), duration);
      options.resume = resume;
      options.seed = seed;
      baton::Trainer trainer(model, optimizer, data, data, options);
      trainer.fit();
      return baton::test::copy_state(model.module());
    };
    const auto whole = train("whole", "4ep", "", 7);
    train("parted", "2ep", "", 7);
    const auto resumed = train("parted", "4ep", "auto", 7);
    CHECK(baton::test::bitwise_equal(whole, resumed));
    // The run's seed decides the noise (and the data order): another ends elsewhere.
    const auto other = train("other", "4ep", "", 8);
    CHECK_FALSE(baton::test::bitwise_equal(whole, other));
  }

  TEST_CASE("a model that draws from the step generator in every mode passes the check and the probe") {
    // `baton check` runs the forward once on the first batch, and plugins probe the model at init: neither is a
    // training step, and both draw as the run's batch 0 would.
    const auto dir = baton::test::scratch_dir("any-batch-step-random-check");
    baton::TensorDataset data;
    auto generator = at::detail::createCPUGenerator(9);
    data.inputs = at::randn({32, 4}, generator);
    data.targets = data.inputs.sum(1, true);
    baton::Model model = fixture_model("noisy_linear", "scale = 1.0\nalways = true", data.spec());
    auto optimizer = std::make_shared<torch::optim::SGD>(model.ptr()->parameters(), torch::optim::SGDOptions(0.05));
    baton::Trainer trainer(model, optimizer, data, data, quiet(dir.string(), "1ep"));
    CHECK_NOTHROW(trainer.check());
    const baton::Batch example = trainer.state().facts.example_batch();
    REQUIRE(trainer.state().facts.can_probe());
    const baton::Outputs first = trainer.state().facts.probe_forward(example);
    const baton::Outputs again = trainer.state().facts.probe_forward(example);
    // Noise was drawn (the output is not the linear layer's alone), from the same seed both times.
    at::Tensor weight, bias;
    for (const auto& p : model.ptr()->named_parameters()) (p.key() == "linear.weight" ? weight : bias) = p.value();
    const at::Tensor plain = example.inputs().matmul(weight.t()).add(bias).detach();
    CHECK((first.main() - plain).abs().max().item<double>() > 1e-3);
    CHECK(at::equal(first.main(), again.main()));
  }

  TEST_CASE("outside a step there is no step generator") {
    CHECK(contains(error_text([] { (void)baton::step_generator(); }), "no training, evaluation or prediction step"));
  }
}

TEST_SUITE("any_batch_cli") {
  // tokens [N, 6] int64 in [0, 20); the class is whether token 3 occurs. A bag of embeddings learns it; the model
  // refuses anything but int64 ids, so a run that learns proves the field kept its dtype end to end.
  TEST_CASE("int64 token ids stay int64 through the safetensors dataset, and a text classifier learns from them") {
    const auto dir = baton::test::scratch_dir("any-batch-tokens");
    auto generator = at::detail::createCPUGenerator(4);
    const at::Tensor tokens = at::randint(0, 20, {1200, 6}, generator);
    const at::Tensor labels = tokens.eq(3).any(1).to(at::kLong);
    baton::write_safetensors((dir / "text.safetensors").string(), {{"tokens", tokens}, {"labels", labels}});
    write(dir / "text.toml", R"([run]
name = "text"
dir = "runs"
[data]
name = "safetensors"
path = "text.safetensors"
inputs = "tokens"
targets = "labels"
float_fields = []
batch_size = 50
[model]
name = "token_bag"
vocab = 20
[optimizer]
name = "adam"
lr = 0.02
[trainer]
precision = "fp32"
max_duration = "8ep"
progress = false
[[plugins]]
path = ")" + std::string(BATON_TEST_PLUGIN_DIR) + R"(/fixture_any_batch.so"
)");
    const Result r = run_baton(dir, {"train", "text.toml"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(last_logged(dir / "runs/text/metrics.jsonl", "eval/accuracy") > 0.95);

    // The same data with the default float_fields: the ids arrive as float32 and the model says so.
    std::string text = baton::test::read_bytes(dir / "text.toml");
    text.replace(text.find("float_fields = []\n"), 18, "");
    write(dir / "float.toml", text);
    const Result floats = run_baton(dir, {"train", "float.toml"});
    CHECK(floats.status != 0);
    CHECK(contains(floats.err, "token_bag: expected int64 token ids, got Float"));
  }

  // x = rows of 3 features, targets y = x . (1, -2, 0.5), but a third of the training rows have y replaced by 100
  // and are masked out. The masked loss fits the true map; plain mse on the same batches is dragged off it.
  TEST_CASE("a dataset of three fields trains with a masked loss from a plugin, on one rank and on two") {
    const auto dir = baton::test::scratch_dir("any-batch-masked");
    auto generator = at::detail::createCPUGenerator(6);
    const at::Tensor x = at::randn({600, 3}, generator);
    at::Tensor y = x.matmul(at::tensor({1.0, -2.0, 0.5}, at::kDouble).to(at::kFloat)).unsqueeze(1);
    const at::Tensor clean = y.clone();
    const at::Tensor mask = at::arange(600).remainder(3).ne(0);
    y.masked_fill_(mask.logical_not().unsqueeze(1), 100.0);
    baton::write_safetensors((dir / "train.safetensors").string(), {{"x", x}, {"y", y}, {"mask", mask}});
    baton::write_safetensors((dir / "eval.safetensors").string(),
                             {{"x", x.slice(0, 0, 200)}, {"y", clean.slice(0, 0, 200)}, {"mask", at::ones({200}, at::kBool)}});
    const auto config = [&](const std::string& name, const std::string& loss) {
      return R"([run]
name = ")" + name + R"("
dir = "runs"
[data]
name = "safetensors"
path = "train.safetensors"
eval_path = "eval.safetensors"
inputs = "x"
targets = "y"
fields = ["mask"]
batch_size = 50
[model]
name = "mlp"
widths = []
[optimizer]
name = "sgd"
lr = 0.05
[loss]
name = ")" + loss + R"("
[trainer]
precision = "fp32"
max_duration = "15ep"
progress = false
[[plugins]]
path = ")" + std::string(BATON_TEST_PLUGIN_DIR) + R"(/fixture_any_batch.so"
)";
    };
    write(dir / "masked.toml", config("masked", "masked_mse"));
    write(dir / "plain.toml", config("plain", "mse"));
    const Result masked = run_baton(dir, {"train", "masked.toml"});
    INFO(masked.err);
    REQUIRE(masked.status == 0);
    const Result plain = run_baton(dir, {"train", "plain.toml"});
    REQUIRE(plain.status == 0);
    const double masked_mae = last_logged(dir / "runs/masked/metrics.jsonl", "eval/mae");
    const double plain_mae = last_logged(dir / "runs/plain/metrics.jsonl", "eval/mae");
    CHECK(masked_mae < 0.05);
    CHECK(plain_mae > 5.0);

    // Two ranks split every field of the same batches.
    write(dir / "masked2.toml", config("masked2", "masked_mse"));
    const Result two = run_baton(dir, {"launch", "--nproc", "2", "train", "masked2.toml"});
    INFO(two.err);
    REQUIRE(two.status == 0);
    CHECK(last_logged(dir / "runs/masked2/metrics.jsonl", "eval/mae") < 0.05);

    // A loss naming a field the data lacks is refused before training, at its key.
    std::string missing = config("missing", "masked_mse");
    missing.replace(missing.find("fields = [\"mask\"]\n"), 18, "");
    write(dir / "missing.toml", missing);
    const Result check = run_baton(dir, {"check", "missing.toml"});
    CHECK(check.status == 2);
    CHECK(contains(check.err, "the data has no field 'mask' (its fields: inputs, targets)"));
  }

  // A GAN from TOML: two sub-modules with an optimizer each and the model's own training step, the EMA following
  // the generator alone (G_ema), evaluated by the distance of its samples from the data's circle.
  TEST_CASE("a GAN trains from TOML with the EMA of its generator, and resumes bitwise with both optimizers") {
    const auto dir = baton::test::scratch_dir("any-batch-gan");
    const auto config = [&](const std::string& name, const std::string& duration) {
      return R"([run]
name = ")" + name + R"("
dir = "runs"
[data]
name = "ring_2d"
size = 2000
batch_size = 50
metrics = ["ring_error"]
[model]
name = "gan_2d"
lr = 0.002
[trainer]
precision = "fp32"
max_duration = ")" + duration + R"("
progress = false
[checkpoint]
save_interval = "2ep"
[[plugins]]
name = "ema"
module = "generator"
half_life = "40ba"
eval = "both"
[[plugins]]
path = ")" + std::string(BATON_TEST_PLUGIN_DIR) + R"(/fixture_any_batch.so"
)";
    };
    write(dir / "whole.toml", config("whole", "16ep"));
    const Result whole = run_baton(dir, {"train", "whole.toml"});
    INFO(whole.err);
    REQUIRE(whole.status == 0);
    // The generator learns the circle: its samples start far from it and end near it, the EMA's and the raw ones.
    // A GAN's raw generator oscillates (each player chases the other); its average does not: over the second half
    // the EMA's error rises less in sum than the raw weights' does.
    std::ifstream in(dir / "runs/whole/metrics.jsonl");
    std::string line;
    std::vector<double> ema_curve, raw_curve;
    int lr_records = 0;
    while (std::getline(in, line)) {
      const auto record = nlohmann::json::parse(line);
      if (record.contains("train/loss")) {
        // Each optimizer's learning rate under its name ([model] lr, no schedule).
        REQUIRE(record.contains("lr/generator"));
        REQUIRE(record.contains("lr/discriminator"));
        CHECK(record["lr/generator"].get<double>() == doctest::Approx(0.002));
        CHECK(record["lr/discriminator"].get<double>() == doctest::Approx(0.002));
        ++lr_records;
        // The step's own losses (StepContext::log), averaged over the same batches as their sum.
        REQUIRE(record.contains("train/d_loss"));
        REQUIRE(record.contains("train/g_loss"));
        CHECK(record["train/d_loss"].get<double>() + record["train/g_loss"].get<double>() ==
              doctest::Approx(record["train/loss"].get<double>()).epsilon(1e-5));
        CHECK(record["train/d_loss"].get<double>() > 0);
      }
      if (record.contains("eval/ring_error")) ema_curve.push_back(record["eval/ring_error"].get<double>());
      if (record.contains("eval_raw/ring_error")) raw_curve.push_back(record["eval_raw/ring_error"].get<double>());
    }
    REQUIRE(ema_curve.size() == 16);
    REQUIRE(raw_curve.size() == 16);
    CHECK(lr_records >= 16);
    CHECK(ema_curve.back() < 0.12);
    CHECK(raw_curve.back() < 0.25);
    CHECK(ema_curve.back() < raw_curve.front() / 4);
    const auto rises = [](const std::vector<double>& curve) {
      double sum = 0;
      for (std::size_t i = curve.size() / 2; i < curve.size(); ++i) sum += std::max(0.0, curve[i] - curve[i - 1]);
      return sum;
    };
    CHECK(rises(ema_curve) < rises(raw_curve));
    // G_ema alone is exported: the generator's own tensor names, nothing of the discriminator.
    const auto ema = baton::read_safetensors((dir / "runs/whole/ema.safetensors").string());
    std::vector<std::string> names;
    for (const auto& [name, t] : ema.tensors) names.push_back(name);
    CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"});

    // Stopped at 8 epochs and resumed to 16: both modules, both optimizers and the EMA end bitwise as above.
    write(dir / "parted.toml", config("parted", "8ep"));
    REQUIRE(run_baton(dir, {"train", "parted.toml"}).status == 0);
    write(dir / "parted.toml", config("parted", "16ep"));
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
    const auto checkpoint = baton::read_safetensors((dir / "runs/parted/checkpoints/ep8/state.safetensors").string());
    // Each optimizer under its name, none as plain "optimizer".
    bool discriminator_state = false, generator_state = false, unnamed = false;
    for (const auto& [name, t] : checkpoint.tensors) {
      discriminator_state = discriminator_state || name.rfind("optimizer.discriminator/", 0) == 0;
      generator_state = generator_state || name.rfind("optimizer.generator/", 0) == 0;
      unnamed = unnamed || name.rfind("optimizer/", 0) == 0;
    }
    CHECK(discriminator_state);
    CHECK(generator_state);
    CHECK_FALSE(unnamed);

    // The model brings its optimizers: an [optimizer] table is refused at its key.
    std::string with_optimizer = config("refused", "1ep") + "[optimizer]\nname = \"sgd\"\n";
    write(dir / "refused.toml", with_optimizer);
    const Result refused = run_baton(dir, {"check", "refused.toml"});
    CHECK(refused.status == 2);
    CHECK(contains(refused.err, "model 'gan_2d' brings its own optimizers, so [optimizer] would be ignored"));
  }

  // A TorchScript module with forward(x, t), built in C++ (torch::jit::Module::define) and saved as Python's
  // torch.jit.save would, trained from TOML with the batch fields named in [model] inputs, with the EMA.
  TEST_CASE("a TorchScript model of two inputs trains from TOML with the EMA, exported under its names") {
    const auto dir = baton::test::scratch_dir("any-batch-torchscript");
    at::manual_seed(8);
    torch::jit::Module module("TwoInputNet");
    // Trainable, as Python's parameters are.
    module.register_parameter("w1", at::randn({3, 32}).mul_(0.5).requires_grad_(), false);
    module.register_parameter("b1", at::zeros({32}).requires_grad_(), false);
    module.register_parameter("w2", at::randn({32, 2}).mul_(0.2).requires_grad_(), false);
    module.register_parameter("b2", at::zeros({2}).requires_grad_(), false);
    module.define(R"(
def forward(self, x, t):
    h = torch.tanh(torch.cat([x, t], 1).matmul(self.w1) + self.b1)
    return h.matmul(self.w2) + self.b2
)");
    module.save((dir / "two_input.pt").string());
    baton::TensorDataset data = two_input_data(800, 1, "two");
    baton::write_safetensors((dir / "two.safetensors").string(),
                             {{"x", data.fields["x"]}, {"t", data.fields["t"]}, {"y", data.targets}});
    write(dir / "two.toml", R"([run]
name = "two"
dir = "runs"
[data]
name = "safetensors"
path = "two.safetensors"
inputs = ""
targets = "y"
fields = ["x", "t"]
batch_size = 32
[model]
torchscript = "two_input.pt"
inputs = ["x", "t"]
[optimizer]
name = "sgd"
lr = 0.1
momentum = 0.9
[trainer]
precision = "fp32"
max_duration = "12ep"
progress = false
[[plugins]]
name = "ema"
half_life = "50ba"
ema_start = "2ep"
eval = "both"
)");
    const Result r = run_baton(dir, {"train", "two.toml"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(last_logged(dir / "runs/two/metrics.jsonl", "eval/accuracy") > 0.9);
    CHECK(last_logged(dir / "runs/two/metrics.jsonl", "eval_raw/accuracy") > 0.9);
    const auto ema = baton::read_safetensors((dir / "runs/two/ema.safetensors").string());
    std::vector<std::string> names;
    for (const auto& [name, t] : ema.tensors) names.push_back(name);
    CHECK(names == std::vector<std::string>{"w1", "b1", "w2", "b2"});

    // A field the data does not have is an error at [model] inputs.
    std::string wrong = baton::test::read_bytes(dir / "two.toml");
    wrong.replace(wrong.find("inputs = [\"x\", \"t\"]"), 19, "inputs = [\"x\", \"s\"]");
    write(dir / "wrong.toml", wrong);
    const Result bad = run_baton(dir, {"check", "wrong.toml"});
    CHECK(bad.status == 2);
    CHECK(contains(bad.err, "the data has no field 's' (its fields: targets, x, t)"));
  }
}
