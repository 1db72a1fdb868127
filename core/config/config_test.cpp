#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/config_test_support.h"

// ConfigError, Override, RunConfig, Time, TimeUnit and the helpers.
using namespace baton::config_test;

TEST_SUITE("config") {
  TEST_CASE("an empty file gives every default") {
    const RunConfig c = parse("");
    CHECK(c.source == "cfg.toml");
    CHECK(c.run.name == "baton");
    CHECK(c.run.dir == "runs");
    CHECK(c.settings.seed == 42);
    CHECK(c.data.name == "fashion-mnist");
    CHECK(c.settings.batch_size == 128);
    CHECK(c.settings.eval_batch_size == 1000);
    CHECK(c.model.name == "convnet");
    CHECK(c.optimizer.name == "sgd");
    CHECK(c.scheduler.name == "constant");
    CHECK(c.loss.name.empty());  // the data decides: cross_entropy for classes, mse for values
    CHECK(c.data.config.keys().empty());
    CHECK(c.settings.max_duration == Time(1, TimeUnit::epoch));
    CHECK(c.settings.eval_interval == Time(1, TimeUnit::epoch));
    CHECK(c.settings.device == "cpu");
    CHECK(c.settings.threads == 0);
    CHECK(c.settings.log_interval == Time(50, TimeUnit::batch));
    CHECK(c.settings.microbatch_size == 0);
    CHECK(c.settings.precision == baton::Precision::automatic);  // issue 41: "auto", resolved on the device
    CHECK(c.settings.progress);
    CHECK(c.settings.save_interval == Time(1, TimeUnit::epoch));
    CHECK(c.settings.keep_last == 0);
    CHECK(c.settings.checkpoint_dir == "runs/baton/checkpoints");
    CHECK(c.distributed.backend == "gloo");
    CHECK(c.distributed.timeout_seconds == 60);
    CHECK(c.plugins.empty());
    CHECK(c.plugin_search_paths.empty());
    CHECK_FALSE(c.allow_insecure_plugins);
  }

  TEST_CASE("every key is read") {
    const RunConfig c = parse(R"(
[run]
name = "exp"
dir = "out"
seed = 7
[data]
name = "mnist"
path = "data/mnist"
batch_size = 64
eval_batch_size = 200
train_subset = 1000
[model]
name = "mlp"
widths = [300, 100, 50]
[optimizer]
name = "adamw"
lr = 1
weight_decay = 0.01
momentum = 0
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
[scheduler]
name = "cosine"
warmup = "0.1dur"
min_lr_ratio = 0.1
[loss]
name = "smooth_l1"
beta = 0.5
[trainer]
max_duration = "3000sp"
eval_interval = "100ba"
device = "cuda:1"
threads = 2
log_interval = "10ba"
progress = false
microbatch_size = 8
precision = "amp_fp16"
[checkpoint]
save_interval = "200ba"
keep_last = 3
dir = "ckpt"
[plugin_search]
paths = ["/opt/plugins"]
allow_insecure = true
)");
    CHECK(c.run.name == "exp");
    CHECK(c.run.dir == "out");
    CHECK(c.settings.seed == 7);
    CHECK(c.data.name == "mnist");
    CHECK(c.settings.batch_size == 64);
    CHECK(c.settings.eval_batch_size == 200);
    // A component section's own keys wait in its view for the component, with their locations recorded.
    CHECK(c.data.config.keys() == std::vector<std::string>{"name", "path", "batch_size", "eval_batch_size",
                                                           "train_subset"});
    CHECK(c.data.config.get<std::string>("path") == "data/mnist");
    CHECK(c.where("data.train_subset").line == 11);
    CHECK(c.model.name == "mlp");
    CHECK(c.model.config.get<std::vector<std::int64_t>>("widths") == std::vector<std::int64_t>{300, 100, 50});
    CHECK(c.optimizer.name == "adamw");
    CHECK(c.optimizer.config.get<double>("lr") == 1.0);  // an integer where a float is expected
    CHECK(c.scheduler.name == "cosine");
    CHECK(c.scheduler.config.get<baton::Time>("warmup").str() == "0.1dur");
    CHECK(c.loss.name == "smooth_l1");
    CHECK(c.loss.config.get<double>("beta") == 0.5);
    CHECK(c.settings.max_duration.str() == "3000sp");
    CHECK(c.settings.eval_interval.str() == "100ba");
    CHECK(c.settings.device == "cuda:1");
    CHECK(c.settings.threads == 2);
    CHECK(c.settings.log_interval.str() == "10ba");
    CHECK(c.settings.microbatch_size == 8);
    CHECK(c.settings.precision == baton::Precision::amp_fp16);
    CHECK_FALSE(c.settings.progress);
    CHECK(c.settings.save_interval.str() == "200ba");
    CHECK(c.settings.keep_last == 3);
    CHECK(c.settings.checkpoint_dir == "ckpt");
    CHECK(c.plugin_search_paths == std::vector<std::string>{"/opt/plugins"});
    CHECK(c.allow_insecure_plugins);
  }

  TEST_CASE("trainer.precision: the three names; amp_fp16 only on a CUDA device, reported at the key") {
    CHECK(parse("[trainer]\nprecision = \"amp_bf16\"\n").settings.precision == baton::Precision::amp_bf16);
    CHECK(parse("[trainer]\nprecision = \"amp_fp16\"\ndevice = \"cuda\"\n").settings.precision == baton::Precision::amp_fp16);
    Failure bad = failure("[trainer]\nprecision = \"bf16\"\n");
    CHECK(bad.key == "trainer.precision");
    CHECK(contains(bad.what, "amp_bf16"));
    Failure cpu = failure("[trainer]\ndevice = \"cpu\"\nprecision = \"amp_fp16\"\n");
    CHECK(cpu.key == "trainer.precision");
    CHECK(cpu.line == 3);
    CHECK(contains(cpu.what, "amp_fp16 needs a CUDA device"));
    // An override moves the run to the CPU: the same error, at the key the file set.
    Failure moved = failure("[trainer]\ndevice = \"cuda\"\nprecision = \"amp_fp16\"\n", {"trainer.device=cpu"});
    CHECK(moved.key == "trainer.precision");
  }

  TEST_CASE("trainer.cuda_graphs: refused at the key where a recorded step cannot be, before anything runs") {
    CHECK_FALSE(parse("[trainer]\ndevice = \"cuda\"\n").settings.cuda_graphs);
    CHECK(parse("[trainer]\ndevice = \"cuda:1\"\ncuda_graphs = true\nprecision = \"amp_bf16\"\n").settings.cuda_graphs);
    Failure cpu = failure("[trainer]\ncuda_graphs = true\n");
    CHECK(cpu.key == "trainer.cuda_graphs");
    CHECK(cpu.line == 2);
    CHECK(contains(cpu.what, "expected false on the device \"cpu\" (a CUDA graph records GPU work"));
    Failure fp16 = failure("[trainer]\ndevice = \"cuda\"\nprecision = \"amp_fp16\"\ncuda_graphs = true\n");
    CHECK(fp16.key == "trainer.cuda_graphs");
    CHECK(contains(fp16.what, "loss scaler decides on the host"));
    Failure micro =
        failure("[data]\nbatch_size = 64\n[trainer]\ndevice = \"cuda\"\nmicrobatch_size = 16\ncuda_graphs = true\n");
    CHECK(contains(micro.what, "microbatch_size 16"));
    // microbatch_size at or above the batch is the whole batch: one forward and backward, recordable.
    CHECK(parse("[data]\nbatch_size = 64\n[trainer]\ndevice = \"cuda\"\nmicrobatch_size = 64\ncuda_graphs = true\n")
              .settings.cuda_graphs);
    Failure sharded =
        failure("[trainer]\ndevice = \"cuda\"\ncuda_graphs = true\n[distributed]\nsharding = \"zero2\"\n");
    CHECK(contains(sharded.what, "under distributed.sharding"));
  }

  TEST_CASE("the checkpoint folder follows the run's") {
    CHECK(parse("[run]\ndir = \"r\"\nname = \"n\"").settings.checkpoint_dir == "r/n/checkpoints");
  }

  TEST_CASE("a TOML syntax error gives the parser's line, column and description") {
    const Failure f = failure("[run]\nname = \"x\"\n[data\nbatch_size = 1\n");
    CHECK(f.line == 3);
    CHECK(f.column == 6);
    CHECK(contains(f.what, "cfg.toml:3:6: "));
    CHECK(contains(f.what, "expected ']'"));
    const Failure twice = failure("[run]\nseed = 1\nseed = 2\n");
    CHECK(twice.line == 3);
    CHECK(contains(twice.what, "cfg.toml:3:"));
    CHECK(contains(twice.what, "seed"));
  }

  TEST_CASE("unknown sections and keys are reported at the key") {
    const Failure section = failure("[run]\nseed = 1\n\n[trainr]\nmax_duration = \"1ep\"\n");
    CHECK(section.what.rfind("cfg.toml:4:2: trainr: unknown section; expected one of run, data,", 0) == 0);
    const Failure key = failure("[run]\nseed = 1\n  nmae = \"x\"\n");
    CHECK(key.what == "cfg.toml:3:3: run.nmae: unknown key 'nmae' for [run]; it reads dir, name, seed");
    const Failure top = failure("seed = 1\n");
    CHECK(top.what.rfind("cfg.toml:1:1: seed: unknown section", 0) == 0);
    const Failure search = failure("[plugin_search]\npath = [\"x\"]\n");
    CHECK(search.what.rfind("cfg.toml:2:1: plugin_search.path: unknown key", 0) == 0);
  }

  TEST_CASE("wrong types name what was expected and what was found") {
    CHECK(failure("[data]\nbatch_size = \"big\"\n").what ==
          "cfg.toml:2:14: data.batch_size: expected an integer, got string \"big\"");
    // A float is never taken for an integer, not even 2.0.
    CHECK(failure("[data]\nbatch_size = 2.0\n").what ==
          "cfg.toml:2:14: data.batch_size: expected an integer, got float 2.0");
    CHECK(failure("[trainer]\nprogress = 1\n").what ==
          "cfg.toml:2:12: trainer.progress: expected a boolean, got integer 1");
    CHECK(failure("[run]\nname = 5\n").what == "cfg.toml:2:8: run.name: expected a string, got integer 5");
    CHECK(failure("run = 3\n").what == "cfg.toml:1:7: run: expected a table, got integer 3");
    CHECK(failure("[model]\nname = 64\n").what == "cfg.toml:2:8: model.name: expected a string, got integer 64");
    CHECK(failure("[plugin_search]\npaths = \"dir\"\n").what ==
          "cfg.toml:2:9: plugin_search.paths: expected an array of strings, got string \"dir\"");
    CHECK(failure("[plugin_search]\nallow_insecure = \"yes\"\n").what ==
          "cfg.toml:2:18: plugin_search.allow_insecure: expected a boolean, got string \"yes\"");
    CHECK(failure("[trainer]\nthreads = nan\n").what ==
          "cfg.toml:2:11: trainer.threads: expected an integer, got float nan");
  }

  TEST_CASE("out-of-range values and unknown choices") {
    CHECK(failure("[data]\nbatch_size = 0\n").what ==
          "cfg.toml:2:14: data.batch_size: expected an integer >= 1, got integer 0");
    CHECK(failure("[checkpoint]\nkeep_last = -1\n").what ==
          "cfg.toml:2:13: checkpoint.keep_last: expected an integer >= 0, got integer -1");
    // The components' own keys are checked when they are built: core/components/components_test.cpp.
    CHECK(failure("[data]\ndataset = \"cifar\"\n").what ==
          "cfg.toml:2:11: data.dataset: the dataset is chosen with [data] name = \"...\" (the key was renamed)");
    CHECK(failure("[trainer]\ndevice = \"gpu\"\n").what ==
          "cfg.toml:2:10: trainer.device: expected \"cpu\", \"cuda\" or \"cuda:N\", got string \"gpu\"");
    CHECK(failure("[trainer]\ndevice = \"cuda:x\"\n").key == "trainer.device");
    CHECK(parse("[trainer]\ndevice = \"cuda\"\n").settings.device == "cuda");
    CHECK(failure("[trainer]\nthreads = -2\n").key == "trainer.threads");
    CHECK(failure("[run]\nname = \"\"\n").what ==
          "cfg.toml:2:8: run.name: expected a non-empty string, got string \"\"");
  }

  TEST_CASE("[data] workers and prefetch: defaults, 2 per worker, checked against each other") {
    const RunConfig defaults = parse("");
    CHECK(defaults.settings.workers == 1);
    CHECK(defaults.settings.prefetch_batches() == 2);
    CHECK(parse("[data]\nworkers = 3\n").settings.prefetch_batches() == 6);
    // 0 is two per worker, as in TrainerOptions (the config refused it before).
    CHECK(parse("[data]\nworkers = 3\nprefetch = 0\n").settings.prefetch_batches() == 6);
    CHECK(parse("[data]\nworkers = 0\nprefetch = 5\n").settings.workers == 0);  // prefetch is unused then
    const RunConfig given = parse("[data]\nworkers = 2\nprefetch = 2\n");
    CHECK(given.settings.prefetch == 2);
    // Generic keys: read here, so the dataset component does not see them as its own unknown keys.
    CHECK(given.data.config.unread_keys().empty());
    CHECK(failure("[data]\nworkers = 4\nprefetch = 3\n").what ==
          "cfg.toml:3:12: data.prefetch: expected at least workers (4: each worker fetches one of the batches ahead), "
          "got integer 3");
    CHECK(failure("[data]\nprefetch = 1\n", {"data.workers=2"}).key == "data.prefetch");
    CHECK(failure("[data]\nworkers = -1\n").what ==
          "cfg.toml:2:11: data.workers: expected an integer in [0, 256], got integer -1");
    CHECK(failure("[data]\nprefetch = -1\n").what ==
          "cfg.toml:2:12: data.prefetch: expected an integer >= 0 (0: two per worker), got integer -1");
    CHECK(failure("[data]\nworkers = 1.5\n").key == "data.workers");
  }

  TEST_CASE("[distributed]: backend and timeout") {
    const RunConfig c = parse("[distributed]\nbackend = \"nccl\"\ntimeout_seconds = 5\n");
    CHECK(c.distributed.backend == "nccl");
    CHECK(c.distributed.timeout_seconds == 5);
    CHECK(failure("[distributed]\nbackend = \"mpi\"\n").what ==
          "cfg.toml:2:11: distributed.backend: expected one of \"gloo\", \"nccl\", got string \"mpi\"");
    CHECK(failure("[distributed]\ntimeout_seconds = 0\n").what ==
          "cfg.toml:2:19: distributed.timeout_seconds: expected an integer >= 1, got integer 0");
    CHECK(failure("[distributed]\ntimeout = 5\n").what.rfind(
              "cfg.toml:2:1: distributed.timeout: unknown key 'timeout' for [distributed]; it reads backend, "
              "sharding, timeout_seconds", 0) == 0);
    CHECK(parse("", {"distributed.timeout_seconds=3"}).distributed.timeout_seconds == 3);
  }

  TEST_CASE("time strings and the units each key allows") {
    const Failure bad = failure("[trainer]\nmax_duration = \"3epochs\"\n");
    CHECK(bad.what.rfind("cfg.toml:2:16: trainer.max_duration: invalid time \"3epochs\"", 0) == 0);
    CHECK(contains(bad.what, "ep, ba, sp, tok, iter"));
    CHECK(failure("[trainer]\nmax_duration = 3\n").what ==
          "cfg.toml:2:16: trainer.max_duration: expected a time string such as \"2ep\", got integer 3");
    CHECK(failure("[trainer]\nmax_duration = \"0.5dur\"\n").what ==
          "cfg.toml:2:16: trainer.max_duration: expected a time in ep, ba or sp, got string \"0.5dur\"");
    CHECK(failure("[trainer]\nmax_duration = \"0ep\"\n").what ==
          "cfg.toml:2:16: trainer.max_duration: expected a time > 0, got string \"0ep\"");
    CHECK(failure("[trainer]\neval_interval = \"64sp\"\n").what ==
          "cfg.toml:2:17: trainer.eval_interval: expected a time in ep, ba or dur, got string \"64sp\"");
    CHECK(failure("[trainer]\neval_interval = \"1.5dur\"\n").what ==
          "cfg.toml:2:17: trainer.eval_interval: expected a fraction of the run <= 1dur, got string \"1.5dur\"");
    CHECK(failure("[trainer]\nlog_interval = \"1ep\"\n").what ==
          "cfg.toml:2:16: trainer.log_interval: expected a time in ba, got string \"1ep\"");
    CHECK(failure("[checkpoint]\nsave_interval = \"0.5dur\"\n").what ==
          "cfg.toml:2:17: checkpoint.save_interval: expected a time in ep, ba or s/min/h, got string \"0.5dur\"");
    // Wall-clock time: checkpoints every so long, and the run's time limit.
    CHECK(parse("[checkpoint]\nsave_interval = \"30min\"\n").settings.save_interval == Time(1800, TimeUnit::second));
    CHECK(parse("[trainer]\ntime_limit = \"1.5h\"\n").settings.time_limit == Time(5400, TimeUnit::second));
    CHECK(parse("").settings.time_limit.value() == 0);
    CHECK(failure("[trainer]\ntime_limit = \"2ep\"\n").what ==
          "cfg.toml:2:14: trainer.time_limit: expected a time in s/min/h, got string \"2ep\"");
    CHECK(failure("[trainer]\ntime_limit = \"2hours\"\n").what.find("unknown unit \"hours\"") != std::string::npos);
    CHECK(failure("[trainer]\ntime_limit = \"2h\"\n[checkpoint]\nsave_interval = \"0ep\"\n").what ==
          "cfg.toml:2:14: trainer.time_limit: expected 0 while checkpoints are off (checkpoint.save_interval = "
          "\"0ep\"): the run stops before the limit to continue from its checkpoint, got string \"2h\"");
    CHECK(failure("[trainer]\nmax_duration = \"1.5ep\"\n").key == "trainer.max_duration");
    CHECK(parse("[trainer]\neval_interval = \"0ep\"\n").settings.eval_interval == Time(0, TimeUnit::epoch));
  }

  TEST_CASE("[model] init and its keys: read, a choice of weights, and the keys that need init refused without it") {
    const RunConfig c = parse("[model]\ninit = \"runs/a/checkpoints/ep3\"\ninit_weights = \"raw\"\nstrict = false\n"
                              "ignore = [\"classifier.*\", \"*.bias\"]\n");
    CHECK(c.model_init.path == "runs/a/checkpoints/ep3");
    CHECK(c.model_init.weights == "raw");
    CHECK_FALSE(c.model_init.strict);
    CHECK(c.model_init.ignore == std::vector<std::string>{"classifier.*", "*.bias"});
    CHECK(c.model.name == "convnet");  // the model's own keys are still the component's
    const RunConfig defaults = parse("");
    CHECK(defaults.model_init.path.empty());
    CHECK(defaults.model_init.weights == "auto");
    CHECK(defaults.model_init.strict);
    const Failure lone = failure("[model]\nstrict = false\n");
    CHECK(lone.key == "model.strict");
    CHECK(contains(lone.what, "strict goes with init"));
    const Failure choice = failure("[model]\ninit = \"w.safetensors\"\ninit_weights = \"best\"\n");
    CHECK(choice.key == "model.init_weights");
    CHECK(contains(choice.what, "expected one of \"auto\", \"ema\", \"raw\", got string \"best\""));
    CHECK(failure("[model]\ninit = \"\"\n").key == "model.init");
  }

  TEST_CASE("[optimizer] weight_decay_exclude and lr_scale: the trainer's keys, read beside the optimizer's") {
    const RunConfig c = parse("[optimizer]\nname = \"adamw\"\nweight_decay = 0.05\n"
                              "weight_decay_exclude = [\"bias\", \"norm\", \"*.pos_embed\"]\n"
                              "lr_scale = { \"classifier.*\" = 10.0, \"features.0.*\" = 0.1 }\n");
    CHECK(c.param_groups.weight_decay_exclude == std::vector<std::string>{"bias", "norm", "*.pos_embed"});
    REQUIRE(c.param_groups.lr_scale.size() == 2);
    CHECK(c.param_groups.lr_scale[0] == std::make_pair(std::string("classifier.*"), 10.0));  // in file order
    CHECK(c.param_groups.lr_scale[1] == std::make_pair(std::string("features.0.*"), 0.1));
    CHECK(parse("").param_groups.empty());
    const Failure zero = failure("[optimizer]\nlr_scale = { \"fc.*\" = 0 }\n");
    CHECK(zero.line == 2);
    CHECK(contains(zero.what, "a multiplier of the lr"));
    CHECK(failure("[optimizer]\nweight_decay_exclude = \"bias\"\n").key == "optimizer.weight_decay_exclude");
    CHECK(failure("[optimizer]\nweight_decay_exclude = [\"\"]\n").key == "optimizer.weight_decay_exclude");
    CHECK(failure("[optimizer]\nlr_scale = {}\n").key == "optimizer.lr_scale");
    CHECK(failure("[optimizer]\nlr_scale = { \"fc.*\" = \"x\" }\n").line == 2);
  }

  TEST_CASE("[checkpoint] keep_best: the metric, how many, and the direction when given") {
    const RunConfig c = parse("[checkpoint]\nkeep_last = 2\nkeep_best = { metric = \"eval/loss\", keep = 3 }\n");
    CHECK(c.keep_best.metric == "eval/loss");
    CHECK(c.keep_best.keep == 3);
    CHECK_FALSE(c.keep_best.maximize.has_value());  // the metric's own direction, known once the run is built
    CHECK(c.keep_best.where.line == 3);
    CHECK(c.settings.keep_last == 2);
    const RunConfig mode = parse("[checkpoint]\nkeep_best = { metric = \"eval/f1\", mode = \"max\" }\n");
    CHECK(mode.keep_best.keep == 1);
    CHECK(mode.keep_best.maximize == std::optional<bool>(true));
    CHECK_FALSE(parse("").keep_best.enabled());
    CHECK(failure("[checkpoint]\nkeep_best = { keep = 2 }\n").what ==
          "cfg.toml:2:13: checkpoint.keep_best.metric: missing: expected a metric name such as \"eval/accuracy\"");
    const Failure none = failure("[checkpoint]\nkeep_best = { metric = \"eval/loss\", keep = 0 }\n");
    CHECK(none.key == "checkpoint.keep_best.keep");
    CHECK(contains(none.what, "at least 1 checkpoint to keep"));
    CHECK(failure("[checkpoint]\nkeep_best = { metric = \"eval/loss\", mode = \"up\" }\n").key ==
          "checkpoint.keep_best.mode");
    CHECK(failure("[checkpoint]\nkeep_best = { metric = \"eval/loss\", save_top_k = 2 }\n").key ==
          "checkpoint.keep_best.save_top_k");
    CHECK(failure("[checkpoint]\nkeep_best = \"eval/loss\"\n").key == "checkpoint.keep_best");
  }

  TEST_CASE("load_config reads a file and resolves plugin paths against its folder") {
    const auto dir = scratch("load");
    write(dir / "sub" / "run.toml", R"([run]
dir = "out"
[data]
path = "rel/data"
[plugin_search]
paths = ["plugins", "/abs/plugins"]
[[plugins]]
path = "lib/libmine.so"
)");
    const std::string file = (dir / "sub" / "run.toml").string();
    const RunConfig c = baton::load_config(file, {Override::parse("plugin_search.paths=[\"cli\"]")});
    CHECK(c.source == file);
    CHECK(c.run.dir == "out");          // relative to the working directory
    CHECK(c.data.config.get<std::string>("path") == "rel/data");  // the dataset takes it as it is
    REQUIRE(c.plugins.size() == 1);
    CHECK(c.plugins[0].path == (dir / "sub" / "lib" / "libmine.so").string());
    // Paths typed in a --set are relative to the working directory.
    CHECK(c.plugin_search_paths == std::vector<std::string>{"cli"});
    const RunConfig from_file = baton::load_config(file);
    CHECK(from_file.plugin_search_paths ==
          std::vector<std::string>{(dir / "sub" / "plugins").string(), "/abs/plugins"});
    // Errors name the file given.
    write(dir / "bad.toml", "[run]\nseed = \"x\"\n");
    const std::string bad = (dir / "bad.toml").string();
    try {
      baton::load_config(bad);
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) == bad + ":2:8: run.seed: expected an integer, got string \"x\"");
    }
  }

  TEST_CASE("load_config: a missing or unreadable file names the file") {
    const auto dir = scratch("missing");
    const std::string missing = (dir / "nope.toml").string();
    try {
      baton::load_config(missing);
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) == missing + ": cannot open the config file: No such file or directory");
      CHECK(e.where().file == missing);
    }
    try {
      baton::load_config(dir.string());
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) == dir.string() + ": cannot read the config file: it is a directory");
    }
  }

  TEST_CASE("docs/config.md: the value it says disables evaluation and saving does") {
    std::ifstream in(std::filesystem::path(BATON_SOURCE_DIR) / "docs" / "config.md");
    std::stringstream text;
    text << in.rdbuf();
    const std::string doc = text.str();
    for (const auto& [section, key] : {std::pair<std::string, std::string>{"trainer", "eval_interval"},
                                       {"checkpoint", "save_interval"}}) {
      CAPTURE(key);
      const auto row = doc.find("| `" + key + "` |");
      REQUIRE(row != std::string::npos);
      const std::string line = doc.substr(row, doc.find('\n', row) - row);
      const auto disables = line.find("` disables");
      REQUIRE(disables != std::string::npos);
      const auto start = line.rfind('`', disables - 1) + 1;
      const std::string value = line.substr(start, disables - start);
      CAPTURE(value);
      baton::RunConfig config;
      REQUIRE_NOTHROW(config = baton::parse_config("[" + section + "]\n" + key + " = " + value + "\n", "doc.toml"));
      CHECK((key == "eval_interval" ? config.settings.eval_interval : config.settings.save_interval).value() == 0);
    }
  }

  TEST_CASE("the shipped example configs are valid") {
    int checked = 0;
    for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(BATON_SOURCE_DIR) / "configs")) {
      if (entry.path().extension() != ".toml") continue;
      CAPTURE(entry.path().string());
      CHECK_NOTHROW(baton::load_config(entry.path().string()));
      ++checked;
    }
    CHECK(checked > 0);
  }
}
