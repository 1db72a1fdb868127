// Whole-program tests: the baton executable run as a user runs it, on synthetic data, in scratch folders.
// Each case starts real processes; keep their number small (a LibTorch process start costs most of a second).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton_command.h"
#include "test_files.h"

namespace fs = std::filesystem;

using baton::test::read_bytes;

namespace {

using Result = baton::test::CommandResult;
using baton::test::run_baton;

fs::path scratch(const std::string& name) { return baton::test::scratch_dir("cli-" + name); }

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A quick synthetic run: 512 samples in batches of 64 (8 batches per epoch), an mlp, 2 epochs.
std::string quick_config(const std::string& extra = "") {
  return R"([run]
name = "quick"
dir = "runs"
seed = 3

[data]
name = "synthetic"
batch_size = 64
eval_batch_size = 256
train_size = 512
eval_size = 256

[model]
name = "mlp"
widths = [32]

[optimizer]
name = "sgd"
lr = 0.05

[trainer]
max_duration = "2ep"
eval_interval = "1ep"
progress = false
precision = "fp32"

[checkpoint]
save_interval = "1ep"
)" + extra;
}

// A safetensors file's JSON header (after its 8-byte little-endian length), keys in file order.
nlohmann::ordered_json safetensors_header(const fs::path& file) {
  const std::string text = read_bytes(file);
  unsigned long long length = 0;
  for (int i = 7; i >= 0 && text.size() >= 8; --i) length = length * 256 + static_cast<unsigned char>(text[i]);
  return nlohmann::ordered_json::parse(text.substr(8, length));
}

// quick_config() with the first `from` replaced by `to`.
std::string quick_config_with(const std::string& from, const std::string& to) {
  std::string text = quick_config();
  text.replace(text.find(from), from.size(), to);
  return text;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string fixture(const std::string& name) { return std::string(BATON_TEST_PLUGIN_DIR) + "/" + name + ".so"; }

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("check accepts a good config and rejects bad ones with file:line:column, key, and status 2") {
    auto dir = scratch("check");
    write(dir / "good.toml", quick_config());
    auto good = run_baton(dir, {"check", "good.toml"});
    CHECK(good.status == 0);
    CHECK(contains(good.out, "good.toml: ok"));

    write(dir / "typo.toml", quick_config() + "\n[trainer]\n");  // a duplicate table is a TOML syntax error
    auto duplicate = run_baton(dir, {"check", "typo.toml"});
    CHECK(duplicate.status == 2);
    CHECK(contains(duplicate.err, "typo.toml:"));

    write(dir / "key.toml", quick_config_with("batch_size = 64", "batch_sise = 64"));
    auto unknown = run_baton(dir, {"check", "key.toml"});
    CHECK(unknown.status == 2);
    CHECK(contains(unknown.err, "key.toml:8:1: data.batch_sise"));

    write(dir / "time.toml", quick_config_with("max_duration = \"2ep\"", "max_duration = \"2 epochs\""));
    auto bad_time = run_baton(dir, {"check", "time.toml"});
    CHECK(bad_time.status == 2);
    CHECK(contains(bad_time.err, "time.toml:22:"));
    CHECK(contains(bad_time.err, "trainer.max_duration"));
    CHECK(contains(bad_time.err, "2 epochs"));

    auto bad_set = run_baton(dir, {"check", "good.toml", "--set", "data.batch_size=\"many\""});
    CHECK(bad_set.status == 2);
    CHECK(contains(bad_set.err, "data.batch_size"));

    auto missing = run_baton(dir, {"check", "nowhere.toml"});
    CHECK(missing.status == 2);
    CHECK(contains(missing.err, "nowhere.toml"));

    write(dir / "plugin.toml", quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_good") +
                                            "\"\nthreshhold = 3\n"));
    auto plugin_key = run_baton(dir, {"check", "plugin.toml", "--allow-insecure-plugins"});
    CHECK(plugin_key.status == 2);
    CHECK(contains(plugin_key.err, "plugin.toml:"));
    CHECK(contains(plugin_key.err, "threshhold"));
  }

  TEST_CASE("a plugin that cannot be loaded is reported at its [[plugins]] entry with file:line, by check and train") {
    auto dir = scratch("plugin-entry");
    // The 1-based line of the entry's last line, where name or path is.
    const std::string base = quick_config("\n[[plugins]]\n");
    const std::string line = std::to_string(std::count(base.begin(), base.end(), '\n') + 1);
    auto both = [&](const std::string& file, const std::string& entry, const std::string& expected) {
      write(dir / file, base + entry + "\n");
      auto check = run_baton(dir, {"check", file});
      CHECK(check.status == 2);
      CHECK_MESSAGE(contains(check.err, "error: " + file + ":" + line + ":8: " + expected), check.err);
      auto train = run_baton(dir, {"train", file});
      CHECK(train.status == 1);
      CHECK_MESSAGE(contains(train.err, "error: " + file + ":" + line + ":8: " + expected), train.err);
    };
    // The nearest names and the command that lists them (issue 24 §11).
    both("name.toml", "name = \"emaa\"",
         "plugins.0.name: plugin 'emaa' not found (did you mean 'ema'?): no emaa.so in the plugin search path "
         "('baton plugins' lists the plugins there)");
    both("zero.toml", "path = \"/dev/zero\"", "plugins.0.path: cannot load /dev/zero: not a regular file");

    // A short file that is not a library gives the message every other non-library gives.
    write(dir / "short.so", "hi\n");
    const std::string short_file = fs::canonical(dir / "short.so").string();
    both("short.toml", "path = \"short.so\"",
         "plugins.0.path: cannot load " + short_file + ": " + short_file + ": invalid ELF header (not a shared library)");

    // Through a symlink into a folder anyone may write to: both the config's path and the target are named.
    fs::create_directory(dir / "open");
    fs::permissions(dir / "open", fs::perms(0777));
    fs::copy_file(fixture("fixture_good"), dir / "open" / "fixture_good.so");
    fs::create_symlink(dir / "open" / "fixture_good.so", dir / "link.so");
    const std::string target = fs::canonical(dir / "open" / "fixture_good.so").string();
    write(dir / "link.toml", base + "path = \"link.so\"\n");
    auto link = run_baton(dir, {"check", "link.toml"});
    CHECK(link.status == 2);
    CHECK(contains(link.err, "error: link.toml:" + line + ":8: plugins.0.path: refusing to load link.so (a link to " +
                                 target + "): its folder " + fs::path(target).parent_path().string() +
                                 " is writable by others (mode 0777)"));
    fs::permissions(dir / "open", fs::perms(0755));
  }

  TEST_CASE("check refuses what train would fail on: sizes beyond the data or the machine, a missing dataset, no GPU") {
    auto dir = scratch("check-resources");
    write(dir / "huge.toml", quick_config_with("batch_size = 64", "batch_size = 9223372036854775000"));
    for (const char* command : {"check", "train"}) {
      auto huge = run_baton(dir, {command, "huge.toml"});
      CHECK(huge.status == 2);
      CHECK(contains(huge.err, "error: huge.toml:8:14: data.batch_size: expected at most the 512 training samples of "
                               "synthetic, got 9223372036854775000"));
    }
    CHECK_FALSE(fs::exists(dir / "runs"));  // train stopped before writing anything

    write(dir / "run.toml", quick_config());
    auto threads = run_baton(dir, {"check", "run.toml", "--set", "trainer.threads=100000"});
    CHECK(threads.status == 2);
    CHECK(contains(threads.err, "error: --set trainer.threads=100000: trainer.threads: expected an integer in [0, "));
    CHECK(contains(threads.err, "got 100000"));

    write(dir / "mnist.toml",
          quick_config_with("name = \"synthetic\"", "name = \"mnist\"\npath = \"no/such/folder\""));
    auto path = run_baton(dir, {"check", "mnist.toml"});
    CHECK(path.status == 2);
    CHECK(contains(path.err, "error: mnist.toml:8:8: data.path: no such folder: 'no/such/folder'"));

    // No machine has a hundredth CUDA device, and Debian's LibTorch has none at all.
    auto device = run_baton(dir, {"check", "run.toml", "--set", "trainer.device=cuda:99"});
    CHECK(device.status == 2);
    CHECK(contains(device.err, "error: --set trainer.device=cuda:99: trainer.device: \"cuda:99\" needs CUDA"));
  }

  TEST_CASE("every error, a command-line mistake included, starts with \"error: \" and exits 2") {
    auto dir = scratch("error-prefix");
    for (const std::vector<std::string>& args : {std::vector<std::string>{"train"},
                                                  {"eval", "x.toml", "--checkpoint", "c", "--weights", "best"},
                                                  {"launch", "--nproc", "0", "train", "x.toml"},
                                                  {"train", "missing.toml"}}) {
      auto r = run_baton(dir, args);
      CHECK(r.status == 2);
      CHECK_MESSAGE(r.err.rfind("error: ", 0) == 0, r.err);
    }
  }

  TEST_CASE("train writes the run folder; eval reads a checkpoint; resume continues bitwise exactly") {
    auto dir = scratch("train");
    write(dir / "run.toml", quick_config());
    auto train = run_baton(dir, {"train", "run.toml"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    CHECK(contains(train.err, "BLAS"));
    CHECK(contains(train.out, "eval/accuracy"));  // the end-of-run table
    auto run = dir / "runs" / "quick";
    CHECK(fs::exists(run / "metrics.jsonl"));
    CHECK(fs::exists(run / "model.safetensors"));
    CHECK(fs::exists(run / "eval_accuracy.svg"));
    CHECK(fs::exists(run / "eval_loss.svg"));
    CHECK(fs::exists(run / "checkpoints" / "ep1" / "meta.json"));
    CHECK(fs::exists(run / "checkpoints" / "ep2" / "state.safetensors"));

    auto eval = run_baton(dir, {"eval", "run.toml", "--checkpoint", (run / "checkpoints" / "ep2").string()});
    CHECK(eval.status == 0);
    CHECK(contains(eval.out, "eval loss"));
    CHECK(contains(eval.out, "(256 samples)"));

    // Two epochs in two sittings: the final weights equal the uninterrupted run's, byte for byte.
    auto split = scratch("train-split");
    write(split / "run.toml", quick_config());
    CHECK(run_baton(split, {"train", "run.toml", "--set", "trainer.max_duration=1ep"}).status == 0);
    auto resumed = run_baton(split, {"train", "run.toml", "--resume", "auto"});
    CHECK(resumed.status == 0);
    CHECK(contains(resumed.err, "resumed from"));
    CHECK(read_bytes(split / "runs" / "quick" / "model.safetensors") == read_bytes(run / "model.safetensors"));

    // A corrupted checkpoint is refused by name.
    auto state = run / "checkpoints" / "ep1" / "state.safetensors";
    fs::resize_file(state, fs::file_size(state) - 10);
    auto corrupt = run_baton(dir, {"eval", "run.toml", "--checkpoint", (run / "checkpoints" / "ep1").string()});
    CHECK(corrupt.status == 1);
    CHECK(contains(corrupt.err, "ep1"));
    CHECK(contains(corrupt.err, "state.safetensors"));
  }

  TEST_CASE("resume: the whole run's table and chart, a new max_duration's lr, another optimizer, bad folders") {
    auto dir = scratch("resume");
    write(dir / "run.toml", quick_config("\n[scheduler]\nname = \"cosine\"\n"));
    REQUIRE(run_baton(dir, {"train", "run.toml", "--set", "trainer.max_duration=1ep"}).status == 0);
    auto longer = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
    REQUIRE_MESSAGE(longer.status == 0, longer.err);
    // The cosine schedule over 8 batches ends at lr 0 after batch 8; over 16 it is at half of 0.05 there.
    CHECK(contains(longer.err, "warning: checkpoint runs/quick/checkpoints/ep1 was written by a run of max_duration "
                               "1ep; this run has max_duration 2ep; the learning-rate schedule follows the new "
                               "length: the lr at ep 1 ba 8 is 0.025 instead of 0"));
    // Both evaluations, the first one from the first process, in the table and the chart.
    CHECK(contains(longer.out, "\n     1        8 "));
    CHECK(contains(longer.out, "\n     2       16 "));
    const std::string chart = read_bytes(dir / "runs" / "quick" / "eval_accuracy.svg");
    std::size_t points = 0;
    for (auto at = chart.find("<circle"); at != std::string::npos; at = chart.find("<circle", at + 1)) ++points;
    CHECK(points == 2);

    auto adam = run_baton(dir, {"train", "run.toml", "--resume", "runs/quick/checkpoints/ep1", "--set",
                                "optimizer.name=adam"});
    CHECK(adam.status == 1);
    CHECK(contains(adam.err, "error: checkpoint runs/quick/checkpoints/ep1: optimizer state was saved from optimizer 'sgd', but "
                             "this run's optimizer is 'adam'"));

    // Folders that are not usable checkpoints are each named, with the reason, and the newest valid one is used.
    const auto checkpoints = dir / "runs" / "quick" / "checkpoints";
    const std::string good_meta = read_bytes(checkpoints / "ep2" / "meta.json");
    baton::test::write_bytes(checkpoints / "ep2" / "meta.json", "{ garbage");
    fs::create_directory(checkpoints / "ba99");
    auto skipped = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
    CHECK(skipped.status == 0);
    CHECK(contains(skipped.err, "warning: skipping corrupt checkpoint: checkpoint runs/quick/checkpoints/ep2: "
                                "meta.json does not parse"));
    CHECK(contains(skipped.err, "warning: skipping corrupt checkpoint: checkpoint runs/quick/checkpoints/ba99: the "
                                "folder is empty"));
    CHECK(contains(skipped.err, "resumed from runs/quick/checkpoints/ep1"));

    // A checkpoint of a newer format stops --resume auto and survives an explicitly chosen older one.
    std::string newer_meta = read_bytes(checkpoints / "ep2" / "meta.json");
    newer_meta.replace(newer_meta.find("\"version\": 1"), 12, "\"version\": 3");
    baton::test::write_bytes(checkpoints / "ep2" / "meta.json", newer_meta);
    auto newer = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
    CHECK(newer.status == 1);
    CHECK(contains(newer.err, "error: checkpoint runs/quick/checkpoints/ep2: meta.json: unsupported version: got 3, "
                              "supported 1 to 2: it was written by a newer baton"));
    auto chosen = run_baton(dir, {"train", "run.toml", "--resume", "runs/quick/checkpoints/ep1"});
    CHECK(chosen.status == 1);
    CHECK(contains(chosen.err, "cannot save checkpoint runs/quick/checkpoints/ep2: the folder holds a checkpoint "
                               "written by a newer baton"));
    CHECK(read_bytes(checkpoints / "ep2" / "meta.json") == newer_meta);
    CHECK(good_meta != newer_meta);
  }

  TEST_CASE("plugins from TOML: tracing, stop requests, and a plugin that throws") {
    auto dir = scratch("plugins");
    write(dir / "stop.toml", quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_good") +
                                          "\"\nthreshold = 3\n"));
    auto stop = run_baton(dir, {"train", "stop.toml", "--trace", "--allow-insecure-plugins"});
    CHECK(stop.status == 0);
    CHECK(contains(stop.err, "trace: fixture_good/batch_end"));
    CHECK(contains(stop.out, "trained to ep 0 ba 3"));
    CHECK(contains(stop.out, "stopped"));

    write(dir / "throw.toml", quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_event_throws") + "\"\n"));
    auto thrown = run_baton(dir, {"train", "throw.toml", "--allow-insecure-plugins"});
    CHECK(thrown.status == 1);
    CHECK(contains(thrown.err, "plugin 'fixture_event_throws' failed on event batch_end"));

    write(dir / "missing.toml", quick_config("\n[[plugins]]\nname = \"no_such_plugin\"\n"));
    auto missing = run_baton(dir, {"train", "missing.toml"});
    CHECK(missing.status == 1);
    CHECK(contains(missing.err, "no_such_plugin"));

    auto listed = run_baton(dir, {"plugins", "--path", BATON_TEST_PLUGIN_DIR, "--allow-insecure-plugins"});
    CHECK(listed.status == 0);
    CHECK(contains(listed.out, "fixture_good"));
    CHECK(contains(listed.out, "callback"));
  }

  TEST_CASE("a model and a dataset from a plugin library are named in TOML like the built-ins") {
    auto dir = scratch("components");
    const std::string library = "\n[[plugins]]\npath = \"" + fixture("fixture_components") + "\"\n";
    std::string text = quick_config_with("name = \"mlp\"\nwidths = [32]", "name = \"fixture_linear\"") + library;
    text.replace(text.find("name = \"synthetic\""), std::string("name = \"synthetic\"").size(),
                 "name = \"fixture_points\"\nsize = 512");
    text.replace(text.find("train_size = 512\neval_size = 256\n"), std::string("train_size = 512\neval_size = 256\n").size(),
                 "");
    write(dir / "run.toml", text);
    auto check = run_baton(dir, {"check", "run.toml", "--allow-insecure-plugins"});
    CHECK_MESSAGE(check.status == 0, check.err);
    auto train = run_baton(dir, {"train", "run.toml", "--allow-insecure-plugins"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    CHECK(contains(train.err, "plugin fixture_components 1.2.3 (components)"));
    // Two well-separated clouds: a linear model classifies nearly all of the evaluation points.
    double accuracy = -1;
    std::istringstream lines(read_bytes(dir / "runs" / "quick" / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      const auto record = nlohmann::json::parse(line);
      if (record.contains("eval/accuracy")) accuracy = record["eval/accuracy"].get<double>();
    }
    CHECK(accuracy > 0.9);
    // The model's parameters are saved under the library's names.
    CHECK(safetensors_header(dir / "runs" / "quick" / "model.safetensors").contains("linear.weight"));

    // Without the library the names are unknown, and the error lists what is registered.
    write(dir / "without.toml", quick_config_with("name = \"mlp\"\nwidths = [32]", "name = \"fixture_linear\""));
    auto without = run_baton(dir, {"check", "without.toml"});
    CHECK(without.status == 2);
    CHECK(contains(without.err, "error: without.toml:14:8: model.name: unknown model 'fixture_linear'; registered: "
                                "convnet, mlp"));

    auto listed = run_baton(dir, {"plugins", "--path", BATON_TEST_PLUGIN_DIR, "--allow-insecure-plugins"});
    CHECK(listed.status == 0);
    CHECK(contains(listed.out, "fixture_components   1.2.3      5    components"));
    CHECK(contains(listed.out, "model      fixture_linear   1.2.3      " + fixture("fixture_components")));
    // baton's own stay baton's, though the library's registration was the first to use the registries.
    const auto line_of = [&](const std::string& start) {
      const auto at = listed.out.find("\n" + start);
      return at == std::string::npos ? std::string() : listed.out.substr(at + 1, listed.out.find('\n', at + 1) - at - 1);
    };
    CHECK(contains(line_of("optimizer  adamw "), " built-in "));
    CHECK(contains(line_of("metric     r2 "), " built-in "));
  }

  TEST_CASE("[data] metrics: named metrics with their keys, logged, tabled and charted; bad entries located") {
    auto dir = scratch("metrics");
    const std::string with = "eval_size = 256\nmetrics = [\"accuracy\", { name = \"top_k\", k = 3 }, \"f1\"]\n";
    write(dir / "run.toml", quick_config_with("eval_size = 256\n", with));
    auto train = run_baton(dir, {"train", "run.toml"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    CHECK(contains(train.out, "eval/top_k"));  // the end-of-run table
    CHECK(contains(train.out, "eval/f1"));
    const std::string metrics = read_bytes(dir / "runs" / "quick" / "metrics.jsonl");
    CHECK(contains(metrics, "\"eval/top_k\""));
    CHECK(contains(metrics, "\"eval/f1\""));
    CHECK(fs::exists(dir / "runs" / "quick" / "eval_top_k.svg"));
    CHECK(fs::exists(dir / "runs" / "quick" / "eval_f1.svg"));
    auto eval = run_baton(dir, {"eval", "run.toml", "--checkpoint", "runs/quick/checkpoints/ep2"});
    CHECK(eval.status == 0);
    CHECK(contains(eval.out, " accuracy "));
    CHECK(contains(eval.out, " top_k "));

    const auto check_error = [&](const std::string& metrics_line, const std::string& expected) {
      write(dir / "bad.toml", quick_config_with("eval_size = 256\n", "eval_size = 256\n" + metrics_line + "\n"));
      auto bad = run_baton(dir, {"check", "bad.toml"});
      CHECK(bad.status == 2);
      CHECK_MESSAGE(contains(bad.err, expected), bad.err);
    };
    check_error("metrics = [\"accuracy\", \"acuracy\"]",
                "error: bad.toml:12:24: data.metrics[1].name: unknown metric 'acuracy'; registered: accuracy, f1, mae,");
    check_error("metrics = [{ name = \"top_k\", kk = 3 }]",
                "error: bad.toml:12:30: data.metrics[0].kk: unknown key 'metrics[0].kk' for metric 'top_k'; it reads k, name");
    check_error("metrics = [{ name = \"top_k\", k = 0 }]",
                "error: bad.toml:12:34: data.metrics[0].k: expected an integer >= 1, got integer 0");
    check_error("metrics = [\"r2\"]", "data.metrics[0].name: r2 needs");
    check_error("metrics = [\"f1\", \"f1\"]", "error: bad.toml:12:18: data.metrics[1]: metric 'f1' is listed twice");
    check_error("metrics = \"accuracy\"", "error: bad.toml:12:11: data.metrics: expected a name or a table with a name");
  }

  TEST_CASE("configs/diabetes.toml: the csv regression fits to the least-squares optimum, computed by numpy" *
            doctest::skip(baton::test::without_debian())) {
    auto dir = scratch("diabetes");
    const std::string config = std::string(BATON_SOURCE_DIR) + "/configs/diabetes.toml";
    // Evaluated on the training rows themselves (eval_fraction 0), so the best a linear model can do there is the
    // least-squares fit of the whole file.
    auto train = run_baton(dir, {"train", config, "--set", "data.eval_fraction=0", "--set", "run.dir=runs"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    nlohmann::json last;
    std::istringstream lines(read_bytes(dir / "runs" / "diabetes" / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      auto record = nlohmann::json::parse(line);
      if (record.contains("eval/rmse")) last = record;
    }
    REQUIRE(last.contains("eval/r2"));
    // numpy's least squares (with an intercept) on the same files: rmse, mae and r2 of the optimum.
    const std::string script =
        "import numpy as np\n"
        "d = '/usr/lib/python3/dist-packages/sklearn/datasets/data/'\n"
        "X = np.loadtxt(d + 'diabetes_data_raw.csv.gz'); y = np.loadtxt(d + 'diabetes_target.csv.gz')\n"
        "A = np.hstack([X, np.ones((len(X), 1))]); b = np.linalg.lstsq(A, y, rcond=None)[0]; r = A @ b - y\n"
        "print(np.sqrt((r ** 2).mean()), np.abs(r).mean(), 1 - (r ** 2).sum() / ((y - y.mean()) ** 2).sum())\n";
    write(dir / "lstsq.py", script);
    const std::string command = "cd '" + dir.string() + "' && /usr/bin/python3 lstsq.py > lstsq.txt 2>&1";
    REQUIRE(std::system(command.c_str()) == 0);
    std::istringstream optimum(read_bytes(dir / "lstsq.txt"));
    double rmse = 0, mae = 0, r2 = 0;
    optimum >> rmse >> mae >> r2;
    REQUIRE(rmse > 50);  // the data's known scale: about 53.5
    const double got = last["eval/rmse"].get<double>();
    CHECK(got >= rmse * (1 - 1e-4));  // no linear model beats least squares on its own data
    CHECK(got <= rmse * 1.005);
    CHECK(last["eval/mae"].get<double>() == doctest::Approx(mae).epsilon(0.01));
    CHECK(last["eval/r2"].get<double>() == doctest::Approx(r2).epsilon(0.01));
    CHECK(last["eval/r2"].get<double>() <= r2 + 1e-4);
  }

  TEST_CASE("safetensors: a file 3x larger than a ulimit -v cap trains, with peak resident memory far below its size") {
    auto dir = scratch("safetensors-memory");
    struct RemoveAfter {  // the big file goes whatever the outcome
      fs::path dir;
      ~RemoveAfter() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
      }
    } remove_after{dir};
    // baton itself (LibTorch, OpenBLAS threads, glibc arenas, the loader's threads and the batches they hold
    // ahead) reserves about 1.1 GiB of address space in a run of these 32 MiB batches on this machine; the cap
    // leaves it some room beyond that, and the file is more than 3 times the cap.
    constexpr std::uint64_t kCapKiB = 1600 * 1024;
    constexpr std::uint64_t kRows = 19500, kWidth = 65536;  // 256 KiB rows: 5.11 GB of inputs
    REQUIRE_MESSAGE(fs::space(dir).available > 6ull << 30, std::string("the test needs 6 GiB free under " + dir.string()));
    // An independent writer, in Python's standard library: float32 inputs that are zero but for a one-hot of the
    // class in the first two values, written row by row so that most of the file is a hole (quick to write, no disk
    // used); I64 targets, row % 2. Each row thus says which class it is, so a model only learns if rows arrive intact.
    const std::string writer =
        "import json, struct, sys\n"
        "path, rows, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
        "row = width * 4\n"
        "header = {'inputs': {'dtype': 'F32', 'shape': [rows, width], 'data_offsets': [0, rows * row]},\n"
        "          'targets': {'dtype': 'I64', 'shape': [rows], 'data_offsets': [rows * row, rows * row + rows * 8]}}\n"
        "text = json.dumps(header).encode()\n"
        "text += b' ' * (-len(text) % 8)\n"
        "start = 8 + len(text)\n"
        "targets = [r % 2 for r in range(rows)]\n"
        "with open(path, 'wb') as f:\n"
        "    f.write(struct.pack('<Q', len(text)) + text)\n"
        "    for r in range(rows):\n"
        "        f.seek(start + r * row)\n"
        "        f.write(struct.pack('<2f', 1.0 - targets[r], float(targets[r])))\n"
        "    f.seek(start + rows * row)\n"
        "    f.write(struct.pack('<%dq' % rows, *targets))\n";
    write(dir / "writer.py", writer);
    const std::string write_files = "cd '" + dir.string() + "' && /usr/bin/python3 writer.py big.safetensors " +
                                    std::to_string(kRows) + " " + std::to_string(kWidth) +
                                    " && /usr/bin/python3 writer.py tiny.safetensors 512 " + std::to_string(kWidth) +
                                    " > writer.txt 2>&1";
    REQUIRE_MESSAGE(std::system(write_files.c_str()) == 0, read_bytes(dir / "writer.txt"));
    const std::uint64_t file_bytes = fs::file_size(dir / "big.safetensors");
    REQUIRE(file_bytes > kRows * (kWidth * 4 + 8));  // the data, and the header before it
    REQUIRE(file_bytes > 3 * kCapKiB * 1024);

    // The cap is on what the run reserves beyond the shared libraries it maps at start (ldd's list), which differ
    // by build: Debian's CPU LibTorch is a few hundred MiB of them, a CUDA LibTorch several GiB (libtorch_cuda,
    // cuDNN, cuBLAS, NCCL), more than the cap itself.
    std::uint64_t libraries_kib = 0;
    if (FILE* pipe = ::popen(("ldd " + baton::test::shell_quote(BATON_EXECUTABLE) + " 2>/dev/null").c_str(), "r")) {
      char line[4096];
      while (std::fgets(line, sizeof line, pipe) != nullptr) {
        const std::string text(line);
        const auto arrow = text.find("=> /");
        if (arrow == std::string::npos) continue;
        const std::string path = text.substr(arrow + 3, text.find(" (", arrow) - arrow - 3);
        std::error_code error;
        const auto bytes = fs::file_size(path, error);
        if (!error) libraries_kib += bytes / 1024;
      }
      ::pclose(pipe);
    }
    REQUIRE(libraries_kib > 0);
    const std::string cap = "ulimit -v " + std::to_string(kCapKiB + libraries_kib);
    MESSAGE("shared libraries " << libraries_kib << " KiB; cap " << kCapKiB << " KiB beyond them");
    // The allowance is real: reading the file into memory under it (Python maps little of its own) fails.
    const std::string read_all = "cd '" + dir.string() + "' && ulimit -v " + std::to_string(kCapKiB) +
                                 " && /usr/bin/python3 -c \"open('big.safetensors', 'rb').read()\" 2> /dev/null";
    CHECK(std::system(read_all.c_str()) != 0);

    // workers = 0: the batches are read in the training thread, so the peak measures the dataset alone, not also
    // how many 32 MiB batches the loader's threads hold ahead and their malloc arenas keep.
    const auto config = [](const std::string& name, const std::string& file) {
      return "[run]\nname = \"" + name + "\"\ndir = \"runs\"\nseed = 1\n\n"
             "[data]\nname = \"safetensors\"\npath = \"" + file + "\"\nbatch_size = 128\neval_batch_size = 128\n"
             "eval_fraction = 0.1\nworkers = 0\n\n"
             "[model]\nname = \"mlp\"\nwidths = []\n\n[optimizer]\nname = \"sgd\"\nlr = 0.5\n\n"
             "[trainer]\nprecision = \"fp32\"\nmax_duration = \"1ep\"\neval_interval = \"1ep\"\nprogress = false\n";
    };
    // `baton train` under the cap, with its peak resident memory (VmHWM, in KiB) from GNU time.
    const auto train_capped = [&](const std::string& name, const std::string& file) {
      write(dir / (name + ".toml"), config(name, file));
      const std::string command = "cd '" + dir.string() + "' && " + cap + " && exec timeout 300 /usr/bin/time -o " +
                                  name + ".rss -f %M " + baton::test::shell_quote(BATON_EXECUTABLE) + " train " +
                                  name + ".toml > " + name + ".out 2> " + name + ".err";
      const int raw = std::system(command.c_str());
      Result r;
      r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
      r.out = read_bytes(dir / (name + ".out"));
      r.err = read_bytes(dir / (name + ".err"));
      return std::make_pair(r, std::stoull("0" + read_bytes(dir / (name + ".rss"))));
    };
    // The baseline: the same run on a 134 MB file of the same rows.
    const auto [tiny, tiny_kib] = train_capped("tiny", "tiny.safetensors");
    REQUIRE_MESSAGE(tiny.status == 0, tiny.err);
    const auto [big, big_kib] = train_capped("big", "big.safetensors");
    REQUIRE_MESSAGE(big.status == 0, big.err);
    MESSAGE("safetensors file " << file_bytes << " bytes, cap " << kCapKiB << " KiB; peak resident memory "
                                << big_kib << " KiB (a 512-row file: " << tiny_kib << " KiB)");
    REQUIRE(tiny_kib > 0);
    CHECK(big_kib * 1024 * 8 < file_bytes);    // far below the file's size
    CHECK(big_kib < tiny_kib + 128 * 1024);    // and about what the tiny file needs: nothing grows with the file
    // Every sample was read (one epoch: 138 batches of 128 of the 17550 training rows) and read intact: the
    // held-out rows, spread over the whole file, are classified perfectly.
    CHECK(contains(big.out, "trained to ep 1 ba 138"));
    nlohmann::json last;
    std::istringstream lines(read_bytes(dir / "runs" / "big" / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      auto record = nlohmann::json::parse(line);
      if (record.contains("eval/accuracy")) last = record;
    }
    REQUIRE(last.contains("eval/accuracy"));
    CHECK(last["eval/accuracy"].get<double>() == 1.0);
  }

  TEST_CASE("configs/breast_cancer.toml: a binary classification from a csv file with accuracy and f1" *
            doctest::skip(baton::test::without_debian())) {
    auto dir = scratch("breast-cancer");
    auto train = run_baton(dir, {"train", std::string(BATON_SOURCE_DIR) + "/configs/breast_cancer.toml", "--set",
                                 "run.dir=runs"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    CHECK(contains(train.out, "eval/f1"));
    nlohmann::json last;
    std::istringstream lines(read_bytes(dir / "runs" / "breast_cancer" / "metrics.jsonl"));
    for (std::string line; std::getline(lines, line);) {
      auto record = nlohmann::json::parse(line);
      if (record.contains("eval/f1")) last = record;
    }
    // A small mlp separates the classes well (published results for this set are around 0.95 to 0.98).
    CHECK(last["eval/accuracy"].get<double>() > 0.93);
    CHECK(last["eval/f1"].get<double>() > 0.93);
  }

  TEST_CASE("a plugin that throws something other than a std::exception is reported naming the plugin and call") {
    auto dir = scratch("throws-int");
    auto config = [&](const std::string& in) {
      return quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_throws_int") + "\"\nin = \"" + in + "\"\n");
    };
    write(dir / "match.toml", config("match"));
    auto match = run_baton(dir, {"train", "match.toml", "--allow-insecure-plugins"});
    CHECK(match.status == 1);
    CHECK(contains(match.err, "error: plugin 'fixture_throws_int' failed in match() on event batch_end: it threw "
                              "something that is not a std::exception"));

    write(dir / "save.toml", config("state_dict"));
    auto save = run_baton(dir, {"train", "save.toml", "--allow-insecure-plugins"});
    CHECK(save.status == 1);
    CHECK(contains(save.err, "error: plugin 'fixture_throws_int' failed to save its state (state_dict): it threw"));

    write(dir / "load.toml", config("load_state_dict"));
    REQUIRE(run_baton(dir, {"train", "load.toml", "--allow-insecure-plugins", "--set", "trainer.max_duration=1ep"})
                .status == 0);
    auto load = run_baton(dir, {"train", "load.toml", "--allow-insecure-plugins", "--resume", "auto"});
    CHECK(load.status == 1);
    CHECK(contains(load.err, "error: plugin 'fixture_throws_int' failed to load its state (load_state_dict) from "
                             "runs/quick/checkpoints/ep1: it threw"));
  }

  TEST_CASE("the README's --trace example prints the plugin calls that run, and only those") {
    auto dir = scratch("readme-trace");
    auto trace = run_baton(dir, {"train", std::string(BATON_SOURCE_DIR) + "/configs/synthetic_quick.toml", "--trace"});
    CHECK(trace.status == 0);
    CHECK(contains(trace.err, "trace: ema/batch_end"));
    const auto lines_with = [&](const std::string& part) {
      std::size_t n = 0;
      std::istringstream in(trace.err);
      for (std::string line; std::getline(in, line);) n += contains(line, part);
      return n;
    };
    // The built-in callbacks act at fit_end only, so they are called, and traced, there alone (they were traced
    // on every event, 918 of 1031 lines, before plugins subscribed to their events).
    CHECK(lines_with("trace: model_export/") == 1);
    CHECK(lines_with("trace: eval_plots/") == 1);
    CHECK(contains(trace.err, "trace: model_export/fit_end"));
    CHECK(lines_with("trace: ") == lines_with("trace: ema/") + 2);
  }

  TEST_CASE("every value a plugin logs is in metrics.jsonl at its own batch; eval metrics print beside the loss") {
    // fixture_callback logs its batch_end count at every batch_end: 4 epochs of 8 batches give 32 values, the
    // count n at batch n, although train/loss is written only every epoch (log_interval 50ba).
    auto dir = scratch("per-batch-metrics");
    write(dir / "run.toml",
          quick_config_with("max_duration = \"2ep\"", "max_duration = \"4ep\"") + "\n[[plugins]]\npath = \"" +
              fixture("fixture_callback") + "\"\n");
    auto run = run_baton(dir, {"train", "run.toml", "--allow-insecure-plugins"});
    REQUIRE(run.status == 0);
    std::ifstream in(dir / "runs" / "quick" / "metrics.jsonl");
    std::vector<std::int64_t> batches;
    for (std::string line; std::getline(in, line);) {
      const auto row = nlohmann::json::parse(line);
      if (!row.contains("fixture_callback/batch_end")) continue;
      batches.push_back(row["batch"].get<std::int64_t>());
      CHECK(row["fixture_callback/batch_end"].get<double>() == static_cast<double>(batches.back()));
    }
    std::vector<std::int64_t> expected(32);
    for (std::int64_t i = 0; i < 32; ++i) expected[i] = i + 1;
    CHECK(batches == expected);
    // The eval set, 256 samples in one batch of 256: the plugin's count is 1 on the evaluation's line.
    const std::string printed = run.out + run.err;
    REQUIRE(contains(printed, "[ep 1 ba 8] eval: loss "));
    const auto line_start = printed.find("[ep 1 ba 8] eval: loss ");
    const std::string eval_line = printed.substr(line_start, printed.find('\n', line_start) - line_start);
    CHECK(contains(eval_line, "  fixture_callback/eval_batches 1.0000  ("));
  }

  TEST_CASE("metrics.jsonl that cannot be written: the error carries the system's reason") {
    auto dir = scratch("metrics-errors");
    write(dir / "run.toml", quick_config());
    const auto run = dir / "runs" / "quick";
    fs::create_directories(run / "metrics.jsonl");  // a folder where the file should be
    auto folder = run_baton(dir, {"train", "run.toml"});
    CHECK(folder.status == 1);
    CHECK(contains(folder.err, "error: metrics file 'runs/quick/metrics.jsonl': cannot open it for writing: Is a "
                               "directory"));
    fs::remove(run / "metrics.jsonl");
    if (!fs::exists("/dev/full")) {
      MESSAGE("no /dev/full here: the full-disk case is skipped");
      return;
    }
    fs::create_symlink("/dev/full", run / "metrics.jsonl");  // every write: ENOSPC
    auto full = run_baton(dir, {"train", "run.toml"});
    CHECK(full.status == 1);
    CHECK(contains(full.err, "error: metrics file 'runs/quick/metrics.jsonl': write failed: No space left on device"));
  }

  TEST_CASE("the progress line shows no loss before the first one is computed") {
    auto dir = scratch("progress-loss");
    write(dir / "run.toml", quick_config());
    // An evaluation every 3 batches ends the progress line at batch 3, before the first train/loss (at batch 8).
    auto r = run_baton(dir, {"train", "run.toml", "--set", "trainer.eval_interval=3ba"});
    REQUIRE(r.status == 0);
    std::istringstream lines(r.err);
    int first_epoch = 0, second_epoch = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("epoch 1/2 ", 0) == 0) {
        ++first_epoch;
        CHECK_MESSAGE(!contains(line, "loss="), line);
      }
      if (line.rfind("epoch 2/2 ", 0) == 0) {
        ++second_epoch;
        CHECK_MESSAGE(contains(line, "loss="), line);  // epoch 1 ended with one
      }
    }
    CHECK(first_epoch > 0);
    CHECK(second_epoch > 0);
  }

  TEST_CASE("nan_monitor: a nan loss in batch 7 fails the run naming it, and the newest checkpoint, ba6, loads") {
    auto dir = scratch("nan-monitor");
    // Checkpoints every 2 batches (ba2, ba4, ba6); the fixture makes the loss of batch 7 nan.
    const std::string run = quick_config_with("save_interval = \"1ep\"", "save_interval = \"2ba\"");
    write(dir / "nan.toml", run + "\n[[plugins]]\nname = \"nan_monitor\"\n\n[[plugins]]\npath = \"" +
                                fixture("fixture_nan_loss") + "\"\nat_batch = 7\n");
    auto failed = run_baton(dir, {"train", "nan.toml", "--allow-insecure-plugins"});
    CHECK(failed.status == 1);
    CHECK_MESSAGE(contains(failed.err, "error: plugin 'nan_monitor' failed on event after_loss: nan_monitor: the "
                                       "training loss of batch 7 (epoch 1, batch 7 of the epoch) is nan; stopped "
                                       "before its backward pass and optimizer step, so the weights are those after "
                                       "batch 6"),
                  failed.err);
    const auto checkpoints = dir / "runs" / "quick" / "checkpoints";
    CHECK(fs::exists(checkpoints / "ba6" / "meta.json"));
    CHECK_FALSE(fs::exists(checkpoints / "ba7"));
    CHECK_FALSE(fs::exists(checkpoints / "ba8"));
    CHECK_FALSE(fs::exists(checkpoints / "ep1"));

    // The newest checkpoint is whole: it evaluates to finite numbers, and a run without the fault resumes from it
    // to the end.
    auto eval = run_baton(dir, {"eval", "nan.toml", "--checkpoint", "runs/quick/checkpoints/ba6",
                                "--allow-insecure-plugins"});
    CHECK_MESSAGE(eval.status == 0, eval.err);
    CHECK(contains(eval.out, "checkpoint runs/quick/checkpoints/ba6: eval loss "));
    CHECK_FALSE(contains(eval.out, "nan"));
    write(dir / "clean.toml", run + "\n[[plugins]]\nname = \"nan_monitor\"\n");
    auto resumed = run_baton(dir, {"train", "clean.toml", "--resume", "auto"});
    CHECK_MESSAGE(resumed.status == 0, resumed.err);
    CHECK(contains(resumed.err, "resumed from runs/quick/checkpoints/ba6"));
    CHECK(contains(resumed.out, "trained to ep 2 ba 16"));
  }

  TEST_CASE("issue 24 §9: without nan_monitor a nan loss is reported at its batch, and nan weights fail the run") {
    auto dir = scratch("nan-unmonitored");
    // Checkpoints every 2 batches (ba2, ba4, ba6, ba8, ...), train/loss every 4; the loss of batch 7 is nan, so the
    // weights are nan from its step on: ba6 is the last checkpoint with finite weights.
    const std::string run = quick_config_with("save_interval = \"1ep\"", "save_interval = \"2ba\"") +
                            "\n[[plugins]]\npath = \"" + fixture("fixture_nan_loss") + "\"\nat_batch = 7\n";
    std::string text = run;
    text.replace(text.find("progress = false"), 16, "progress = false\nlog_interval = \"4ba\"");
    write(dir / "nan.toml", text);
    auto failed = run_baton(dir, {"train", "nan.toml", "--allow-insecure-plugins"});
    CHECK(failed.status == 1);
    CHECK_MESSAGE(contains(failed.err, "warning: the training loss is not finite (nan) at training batch 7 of the run "
                                       "(in the 4 batches logged at ep 0 ba 8)"),
                  failed.err);
    CHECK(contains(failed.err, "error: the weights are not finite at the end of the run (layers.0.weight holds NaN "
                               "or inf), so model.safetensors is not written; the last checkpoint with finite weights "
                               "is runs/quick/checkpoints/ba6"));
    CHECK_FALSE(fs::exists(dir / "runs" / "quick" / "model.safetensors"));

    // Said otherwise: the run ends as a success, the loss still reported.
    auto allowed = run_baton(dir, {"train", "nan.toml", "--allow-insecure-plugins", "--set", "run.name=allowed",
                                   "--set", "trainer.allow_nonfinite=true"});
    CHECK_MESSAGE(allowed.status == 0, allowed.err);
    CHECK(contains(allowed.err, "warning: the training loss is not finite (nan) at training batch 7 of the run"));
  }

  TEST_CASE("a stopper's stop: status 0 (not 130, an interrupt's), its reason printed; a resume there stops again") {
    auto dir = scratch("stoppers");
    // eval/loss is always below 1000: the first evaluation (ep 1) stops the 4-epoch run.
    write(dir / "threshold.toml",
          quick_config_with("max_duration = \"2ep\"", "max_duration = \"4ep\"") +
              "\n[[plugins]]\nname = \"threshold_stopper\"\nmonitor = \"eval/loss\"\nthreshold = 1000\n");
    auto stopped = run_baton(dir, {"train", "threshold.toml"});
    CHECK_MESSAGE(stopped.status == 0, stopped.err);
    CHECK(contains(stopped.out, "trained to ep 1 ba 8 in "));
    CHECK(contains(stopped.out, ", stopped: threshold_stopper: eval/loss "));
    CHECK(contains(stopped.out, " < threshold 1000 at ep 1 ba 8\n"));
    CHECK(contains(stopped.out, "last checkpoint: runs/quick/checkpoints/ep1"));
    CHECK_FALSE(fs::exists(dir / "runs" / "quick" / "checkpoints" / "ep2"));
    auto again = run_baton(dir, {"train", "threshold.toml", "--resume", "auto"});
    CHECK_MESSAGE(again.status == 0, again.err);
    CHECK(contains(again.out, "trained to ep 1 ba 8 in "));
    CHECK(contains(again.out, " at ep 1 ba 8 (before the resume)"));

    // No evaluation improves eval/accuracy by more than 1000: the best stays ep 1's, and with patience 0 the
    // second evaluation (ep 2), which waited 1 epoch, stops the run.
    write(dir / "early.toml",
          quick_config_with("max_duration = \"2ep\"", "max_duration = \"4ep\"") +
              "\n[[plugins]]\nname = \"early_stopper\"\nmonitor = \"eval/accuracy\"\npatience = 0\n"
              "min_delta = 1000\n");
    auto early = run_baton(dir, {"train", "early.toml"});
    CHECK_MESSAGE(early.status == 0, early.err);
    CHECK(contains(early.out, "trained to ep 2 ba 16 in "));
    CHECK(contains(early.out, ", stopped: early_stopper: eval/accuracy has not improved on its best ("));
    CHECK(contains(early.out, " at ep 1 ba 8, mode max) by more than 1000 for more than 0ep: "));
  }

  TEST_CASE("docs/algorithms.md: every [[plugins]] example of its Callbacks section passes check") {
    const std::string doc = read_bytes(fs::path(BATON_SOURCE_DIR) / "docs" / "algorithms.md");
    const auto section = doc.find("\n## Callbacks");
    REQUIRE(section != std::string::npos);
    const auto section_end = std::min(doc.find("\n## ", section + 1), doc.size());
    std::string examples;
    int count = 0;
    int callbacks = 0;  // each callback's "### `name`" heading promises one example
    for (auto at = doc.find("\n### `", section); at < section_end; at = doc.find("\n### `", at + 1)) ++callbacks;
    for (auto at = doc.find("```toml\n", section); at < section_end; at = doc.find("```toml\n", at + 1)) {
      const auto begin = at + 8;
      examples += "\n" + doc.substr(begin, doc.find("```", begin) - begin);
      ++count;
    }
    CHECK(callbacks >= 8);
    CHECK(count == callbacks);
    auto dir = scratch("algorithms-doc");
    write(dir / "examples.toml", quick_config(examples));
    auto check = run_baton(dir, {"check", "examples.toml"});
    CHECK_MESSAGE(check.status == 0, check.err);
    CHECK(contains(check.out, "examples.toml: ok (" + std::to_string(callbacks) + " plugins)"));
  }

  TEST_CASE("Ctrl-C stops after the current batch with a checkpoint, fit_end, and status 130") {
    auto dir = scratch("signal");
    write(dir / "long.toml", quick_config());
    std::fflush(stdout);  // or the child would print the parent's buffered output again
    std::fflush(stderr);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      if (chdir(dir.c_str()) != 0) _exit(99);
      FILE* out = freopen("out.txt", "w", stdout);
      FILE* err = freopen("err.txt", "w", stderr);
      (void)out, (void)err;
      execl(BATON_EXECUTABLE, BATON_EXECUTABLE, "train", "long.toml", "--set", "trainer.max_duration=100000ep",
            "--set", "checkpoint.save_interval=1000ep", static_cast<char*>(nullptr));
      _exit(98);
    }
    // Wait until training runs (the first progress line), then interrupt.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!contains(read_bytes(dir / "err.txt"), "epoch 2") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(child, SIGINT);
    int raw = 0;
    waitpid(child, &raw, 0);
    REQUIRE(WIFEXITED(raw));
    CHECK(WEXITSTATUS(raw) == 130);
    std::string out = read_bytes(dir / "out.txt");
    CHECK(contains(out, "stopped: interrupted by a signal"));
    // The checkpoint is named after where the run stopped: "ba<N>" inside an epoch, "ep<N>" when the signal came
    // while an epoch was ending (its evaluation is a good part of each epoch here).
    const std::string marker = "last checkpoint: ";
    auto at = out.find(marker);
    REQUIRE(at != std::string::npos);
    std::string checkpoint = out.substr(at + marker.size(), out.find('\n', at) - at - marker.size());
    CHECK(checkpoint.rfind("runs/quick/checkpoints/", 0) == 0);
    CHECK(fs::exists(dir / checkpoint / "meta.json"));
    CHECK(fs::exists(dir / "runs" / "quick" / "model.safetensors"));
  }
}

// --- posthoc (baton posthoc; docs/posthoc.md) ---
namespace {

// The tensor names in a safetensors file's header, in file order.
std::vector<std::string> tensor_names(const fs::path& file) {
  const auto header = safetensors_header(file);
  std::vector<std::string> names;
  for (const auto& [name, entry] : header.items())
    if (name != "__metadata__") names.push_back(name);
  return names;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("posthoc synthesises an EMA of any sigma_rel from a run's snapshots, sweeps, and refuses bad targets") {
    auto dir = scratch("posthoc");
    write(dir / "run.toml", quick_config("\n[[plugins]]\nname = \"ema\"\nhalf_life = \"8ba\"\n"
                                         "posthoc = { sigma_rels = [0.05, 0.10], snapshot_every = \"2ba\" }\n"));
    auto train = run_baton(dir, {"train", "run.toml"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    CHECK(contains(train.err, "post-hoc EMA profiles sigma0.05"));
    CHECK(contains(train.err, "post-hoc snapshots at batch 16"));
    auto run = dir / "runs" / "quick";
    CHECK(fs::exists(run / "posthoc" / "sigma0.1_0000000016.safetensors"));

    auto one = run_baton(dir, {"posthoc", run.string(), "--sigma-rel", "0.08", "-o", "ema_0.08.safetensors"});
    REQUIRE_MESSAGE(one.status == 0, one.err);
    CHECK(contains(one.err, "from 16 snapshots"));
    auto names = tensor_names(dir / "ema_0.08.safetensors");
    CHECK(!names.empty());
    CHECK(names == tensor_names(run / "model.safetensors"));
    CHECK(contains(read_bytes(dir / "ema_0.08.safetensors"), "baton.posthoc.sigma_rel"));

    auto sweep = run_baton(dir, {"posthoc", run.string(), "--sweep", "0.04:0.12:0.04", "--eval", "run.toml"});
    REQUIRE_MESSAGE(sweep.status == 0, sweep.err);
    CHECK(contains(sweep.out, "sigma_rel"));
    CHECK(contains(sweep.out, "0.08"));
    CHECK(contains(sweep.out, "best sigma_rel"));
    CHECK(fs::exists(run / "posthoc_sweep.svg"));
    // The synthesised weights go into the --eval config's model by name and shape.
    auto other_model = run_baton(dir, {"posthoc", run.string(), "--sweep", "0.05:0.05:0.01", "--eval", "run.toml",
                                   "--set", "model.widths=[16]"});
    CHECK(other_model.status == 1);
    CHECK(contains(other_model.err, "tensor 'layers.0.weight' has another shape than the config's model's"));

    auto far = run_baton(dir, {"posthoc", run.string(), "--sigma-rel", "0.01", "-o", "x.safetensors"});
    CHECK(far.status == 1);
    CHECK(contains(far.err, "sigma_rel 0.01 is outside what the tracked profiles (0.05, 0.1) can represent"));
    CHECK(!fs::exists(dir / "x.safetensors"));

    auto missing = run_baton(dir, {"posthoc", "runs/nowhere", "--sigma-rel", "0.08", "-o", "x.safetensors"});
    CHECK(missing.status == 1);
    CHECK(contains(missing.err, "runs/nowhere does not exist"));

    fs::create_directories(dir / "single" / "posthoc");
    for (const auto& entry : fs::directory_iterator(run / "posthoc"))
      if (entry.path().filename().string().rfind("sigma0.05_", 0) == 0)
        fs::copy_file(entry.path(), dir / "single" / "posthoc" / entry.path().filename());
    auto single = run_baton(dir, {"posthoc", "single", "--sigma-rel", "0.05", "-o", "x.safetensors"});
    CHECK(single.status == 1);
    CHECK(contains(single.err, "at least two profiles"));

    auto usage = run_baton(dir, {"posthoc", run.string()});
    CHECK(usage.status == 2);
    CHECK(contains(usage.err, "give --sigma-rel"));
  }
}
// --- end posthoc ---

namespace {

// A safetensors file's __metadata__.
std::map<std::string, std::string> safetensors_metadata(const fs::path& file) {
  const auto header = safetensors_header(file);
  std::map<std::string, std::string> out;
  if (header.contains("__metadata__"))
    for (const auto& [key, value] : header["__metadata__"].items()) out[key] = value.get<std::string>();
  return out;
}

// The bytes of one tensor of a safetensors file, after checking its dtype.
std::string safetensors_tensor_bytes(const fs::path& file, const std::string& name, const std::string& dtype) {
  const std::string text = read_bytes(file);
  const auto header = safetensors_header(file);
  unsigned long long length = 0;
  for (int i = 7; i >= 0; --i) length = length * 256 + static_cast<unsigned char>(text[i]);
  REQUIRE(header.contains(name));
  REQUIRE(header[name]["dtype"].get<std::string>() == dtype);
  const auto begin = header[name]["data_offsets"][0].get<std::size_t>();
  const auto end = header[name]["data_offsets"][1].get<std::size_t>();
  return text.substr(8 + length + begin, end - begin);
}

std::vector<long long> safetensors_int64(const fs::path& file, const std::string& name) {
  const std::string bytes = safetensors_tensor_bytes(file, name, "I64");
  std::vector<long long> out(bytes.size() / 8);
  for (std::size_t i = 0; i < out.size(); ++i) {
    unsigned long long v = 0;
    for (int b = 7; b >= 0; --b) v = v * 256 + static_cast<unsigned char>(bytes[i * 8 + b]);
    out[i] = static_cast<long long>(v);
  }
  return out;
}

std::string fixed4(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4f", value);
  return buffer;
}

std::size_t count_lines_with(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += contains(line, part);
  return n;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("ema from the command line: one set of metadata keys, --weights for eval and predict, and an ema_start that never comes") {
    auto dir = scratch("ema");
    write(dir / "ema.toml", quick_config("\n[[plugins]]\nname = \"ema\"\nhalf_life = \"4ba\"\neval = \"both\"\n"));
    auto train = run_baton(dir, {"train", "ema.toml"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    CHECK_FALSE(contains(train.err, "ema_start"));
    // §15: the final table's columns line up: each header name ends where the values under it end, though
    // "eval_raw/accuracy" is longer than the values.
    {
      std::istringstream table(train.out);
      std::string header, row;
      while (std::getline(table, header) && header.find("eval_raw/accuracy") == std::string::npos) {
      }
      REQUIRE(std::getline(table, row));
      std::vector<std::size_t> header_ends, row_ends;
      for (std::size_t i = 0; i + 1 < header.size(); ++i)
        if (header[i] != ' ' && header[i + 1] == ' ') header_ends.push_back(i);
      header_ends.push_back(header.size() - 1);
      for (std::size_t i = 0; i + 1 < row.size(); ++i)
        if (row[i] != ' ' && row[i + 1] == ' ') row_ends.push_back(i);
      row_ends.push_back(row.size() - 1);
      CHECK_MESSAGE(header_ends == row_ends, header << "\n" << row);
    }
    const auto run = dir / "runs" / "quick";
    // The run's ema.safetensors and the last checkpoint's copy describe the same average (both at batch 16) in
    // the keys docs/ema.md lists: 16 updates, the first being the copy at batch 1.
    const auto final_metadata = safetensors_metadata(run / "ema.safetensors");
    CHECK(final_metadata == safetensors_metadata(run / "checkpoints" / "ep2" / "ema.safetensors"));
    CHECK(final_metadata.size() == 3);
    CHECK(final_metadata.count("smoothing") == 1);
    CHECK((final_metadata.count("ema_started") == 1 && final_metadata.at("ema_started") == "true"));
    CHECK((final_metadata.count("ema_updates") == 1 && final_metadata.at("ema_updates") == "16"));

    // One set of weights asked for: one pass, though eval = "both".
    const std::string checkpoint = "runs/quick/checkpoints/ep2";
    auto raw = run_baton(dir, {"eval", "ema.toml", "--checkpoint", checkpoint, "--weights", "raw"});
    CHECK(raw.status == 0);
    CHECK(count_lines_with(raw.out, "checkpoint " + checkpoint + ": ") == 1);
    auto both = run_baton(dir, {"eval", "ema.toml", "--checkpoint", checkpoint});
    CHECK(count_lines_with(both.out, "checkpoint " + checkpoint + ": ") == 2);

    // No plugin keeps another set of weights: asking for one is an error, not the raw weights under its name.
    write(dir / "plain.toml", quick_config());
    auto none = run_baton(dir, {"eval", "plain.toml", "--checkpoint", checkpoint, "--weights", "ema"});
    CHECK(none.status == 2);  // a usage error (issue 24 §12)
    CHECK(contains(none.err, "error: --weights ema: evaluation with the \"ema\" weights asked for, but no plugin of "
                             "this run keeps more than one set of weights"));
    CHECK_FALSE(contains(none.out, "accuracy"));
    // A set that no plugin of the run keeps: refused, naming the sets its plugins do keep.
    auto unknown = run_baton(dir, {"eval", "ema.toml", "--checkpoint", checkpoint, "--weights", "best"});
    CHECK(unknown.status == 2);
    CHECK(contains(unknown.err, "error: --weights best: evaluation with the \"best\" weights asked for, but the "
                                "plugins of this run keep no such set; they keep \"ema\", \"raw\""));
    CHECK_FALSE(contains(unknown.out, "accuracy"));
    // Plugins declare their sets before anything is built: a request none serves is refused before the data and
    // the model are, so a model that cannot be built is never reached (and is, without the request).
    write(dir / "bad_model.toml",
          quick_config_with("widths = [32]", "widths = [0]") + "\n[[plugins]]\nname = \"ema\"\nhalf_life = \"4ba\"\n");
    auto early = run_baton(dir, {"eval", "bad_model.toml", "--checkpoint", checkpoint, "--weights", "best"});
    CHECK(early.status == 2);
    CHECK(contains(early.err, "error: --weights best: evaluation with the \"best\" weights asked for"));
    CHECK_FALSE(contains(early.err, "widths"));
    auto late_model = run_baton(dir, {"eval", "bad_model.toml", "--checkpoint", checkpoint, "--weights", "ema"});
    CHECK(late_model.status != 0);
    CHECK(contains(late_model.err, "widths"));

    // predict writes each set's outputs and classes; the accuracy of its classes against the targets is the one
    // eval reports for the same weights, and the EMA's outputs are not the raw weights'.
    for (const std::string weights : {"ema", "raw"}) {
      const std::string file = weights + "-predictions.safetensors";
      auto predicted = run_baton(dir, {"predict", "ema.toml", "--checkpoint", checkpoint, "--weights", weights, "-o", file});
      REQUIRE_MESSAGE(predicted.status == 0, predicted.err);
      const auto classes = safetensors_int64(dir / file, "predictions");
      const auto targets = safetensors_int64(dir / file, "targets");
      REQUIRE(classes.size() == targets.size());
      REQUIRE(classes.size() == 256);
      std::size_t correct = 0;
      for (std::size_t i = 0; i < classes.size(); ++i) correct += classes[i] == targets[i];
      auto evaluated = run_baton(dir, {"eval", "ema.toml", "--checkpoint", checkpoint, "--weights", weights});
      CHECK_MESSAGE(contains(evaluated.out, "accuracy " + fixed4(static_cast<double>(correct) / 256.0)), evaluated.out);
      CHECK(safetensors_metadata(dir / file).at("baton.weights") == weights);
    }
    CHECK(safetensors_tensor_bytes(dir / "ema-predictions.safetensors", "outputs", "F32") !=
          safetensors_tensor_bytes(dir / "raw-predictions.safetensors", "outputs", "F32"));
    auto no_output = run_baton(dir, {"predict", "ema.toml", "--checkpoint", checkpoint});
    CHECK(no_output.status == 2);
    auto missing = run_baton(dir, {"predict", "ema.toml", "--checkpoint", "runs/quick/checkpoints/nope", "-o", "x.safetensors"});
    CHECK(missing.status == 2);  // a folder named on the command line that is not there: a usage error
    CHECK(contains(missing.err, "error: --checkpoint runs/quick/checkpoints/nope: no such checkpoint folder; the "
                                "checkpoints in runs/quick/checkpoints: ep1, ep2"));
    CHECK_FALSE(fs::exists(dir / "x.safetensors"));
    // Without --weights the EMA plugin predicts with the EMA: the file and the summary say so (issue 24 §13).
    auto by_default = run_baton(dir, {"predict", "ema.toml", "--checkpoint", checkpoint, "-o", "default.safetensors"});
    REQUIRE_MESSAGE(by_default.status == 0, by_default.err);
    CHECK(safetensors_metadata(dir / "default.safetensors").at("baton.weights") == "ema");
    CHECK(contains(by_default.out, ", ema weights)"));
    CHECK(safetensors_tensor_bytes(dir / "default.safetensors", "outputs", "F32") ==
          safetensors_tensor_bytes(dir / "ema-predictions.safetensors", "outputs", "F32"));

    // Averaging that would start at the run's end: a warning at fit start.
    auto late = run_baton(dir, {"train", "ema.toml", "--set", "plugins.ema.ema_start=2ep", "--set", "run.name=late"});
    CHECK(late.status == 0);
    CHECK(contains(late.err, "warning: ema: ema_start 2ep (batch 16) is at or beyond max_duration 2ep (batch 16): "
                             "the average never starts"));
  }

  TEST_CASE("issue 24 §11-12: an unknown command or missing folder is a usage error naming the nearest; a resume "
            "of another length is a counted warning") {
    auto dir = scratch("usage");
    auto typo = run_baton(dir, {"trian", "run.toml"});
    CHECK(typo.status == 2);
    CHECK(contains(typo.err, "error: unknown command 'trian' (did you mean 'train'?); the commands are train, check, "
                             "eval, predict, plugins, launch, posthoc"));
    auto nothing_like = run_baton(dir, {"frobnicate"});
    CHECK(nothing_like.status == 2);
    CHECK(contains(nothing_like.err, "error: unknown command 'frobnicate'; the commands are"));

    write(dir / "run.toml", quick_config());
    REQUIRE(run_baton(dir, {"train", "run.toml", "--set", "trainer.max_duration=1ep"}).status == 0);
    // §16: the epoch's last batch (8) is one moment: its train/loss and its evaluation both read epoch 1.
    std::istringstream lines(read_bytes(dir / "runs" / "quick" / "metrics.jsonl"));
    int stamped = 0;
    for (std::string line; std::getline(lines, line);) {
      const auto json = nlohmann::json::parse(line);
      if (json.at("batch") != 8 || !(json.contains("train/loss") || json.contains("eval/loss"))) continue;
      CHECK_MESSAGE(json.at("epoch") == 1, line);
      ++stamped;
    }
    CHECK(stamped == 2);
    // §15: a training-loss chart, one point per logged train/loss (8 batches, logged at the epoch's end).
    const std::string chart = read_bytes(dir / "runs" / "quick" / "train_loss.svg");
    CHECK(contains(chart, ">train/loss</text>"));
    std::size_t loss_points = 0;
    for (auto at = chart.find("<circle"); at != std::string::npos; at = chart.find("<circle", at + 1)) ++loss_points;
    CHECK(loss_points == 1);
    auto nowhere = run_baton(dir, {"train", "run.toml", "--resume", "runs/quick/checkpoints/ep11"});
    CHECK(nowhere.status == 2);
    CHECK(contains(nowhere.err, "error: --resume runs/quick/checkpoints/ep11: no such checkpoint folder (did you mean "
                                "'ep1'?); the checkpoints in runs/quick/checkpoints: ep1"));
    CHECK_FALSE(fs::exists(dir / "runs" / "quick" / "checkpoints" / "ep2"));

    // A constant rate: the lr does not move, but the run continues another length than the checkpoint's.
    auto longer = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
    REQUIRE_MESSAGE(longer.status == 0, longer.err);
    CHECK(contains(longer.err, "warning: checkpoint runs/quick/checkpoints/ep1 was written by a run of max_duration "
                               "1ep; this run has max_duration 2ep (the learning rate at this point is unchanged)"));
    CHECK(contains(longer.out, "1 warning(s) during the run"));

    // §10: meta.json holds the configuration the run used, overrides applied and named; a resume with other data
    // settings says which.
    const auto meta = nlohmann::json::parse(read_bytes(dir / "runs" / "quick" / "checkpoints" / "ep1" / "meta.json"));
    const std::string config = meta.at("config").get<std::string>();
    CHECK(config.rfind("# run.toml with --set trainer.max_duration=1ep\n", 0) == 0);
    CHECK((contains(config, "max_duration = '1ep'") || contains(config, "max_duration = \"1ep\"")));
    CHECK_FALSE(contains(config, "max_duration = \"2ep\""));
    auto other_data = run_baton(dir, {"train", "run.toml", "--resume", "runs/quick/checkpoints/ep1", "--set",
                                      "data.train_size=1024", "--set", "run.name=other"});
    CHECK_MESSAGE(other_data.status == 0, other_data.err);
    CHECK(contains(other_data.err, "warning: checkpoint runs/quick/checkpoints/ep1 was written with other data or "
                                   "model settings than this run's: data.train_size (512, now 1024)"));
  }

  TEST_CASE("issue 24 §7: a metric no pass or plugin logs is refused by check, at its key, listing the real ones") {
    auto dir = scratch("watched-metrics");
    const std::string stopper = quick_config("\n[[plugins]]\nname = \"early_stopper\"\nmonitor = \"eval/acc\"\n");
    const auto last_line = std::to_string(std::count(stopper.begin(), stopper.end(), '\n'));
    write(dir / "stopper.toml", stopper);
    for (const char* command : {"check", "train"}) {
      auto result = run_baton(dir, {command, "stopper.toml"});
      CHECK(result.status == 2);
      CHECK_MESSAGE(contains(result.err, "error: stopper.toml:" + last_line + ":11: plugins.early_stopper.monitor: "
                                         "this run logs no metric 'eval/acc' (did you mean 'eval/accuracy'?); it "
                                         "logs train/loss, lr, eval/loss, eval/accuracy"),
                    result.err);
    }
    CHECK_FALSE(fs::exists(dir / "runs" / "quick" / "checkpoints"));

    // The passes plugins add and the metrics they declare count: the EMA's raw pass (with eval = "both") and a
    // speed_monitor's value.
    const std::string ema = quick_config(
        "\n[[plugins]]\nname = \"speed_monitor\"\n"
        "\n[[plugins]]\nname = \"threshold_stopper\"\nmonitor = \"throughput/batches_per_sec\"\nthreshold = 1e9\n"
        "\n[[plugins]]\nname = \"ema\"\nhalf_life = \"1ba\"\neval = \"both\"\nselect = { metric = \"eval_raw/accuracy\", mode = \"max\" }\n");
    write(dir / "ema.toml", ema);
    auto good = run_baton(dir, {"check", "ema.toml"});
    CHECK_MESSAGE(good.status == 0, good.err);
    write(dir / "typo.toml", quick_config() + "\n[[plugins]]\nname = \"ema\"\nhalf_life = \"1ba\"\neval = \"both\"\n"
                                     "select = { metric = \"eval_raw/acuracy\", mode = \"max\" }\n");
    auto typo = run_baton(dir, {"check", "typo.toml"});
    CHECK(typo.status == 2);
    CHECK_MESSAGE(contains(typo.err, "plugins.ema.select.metric: this run logs no metric 'eval_raw/acuracy' (did you "
                                     "mean 'eval_raw/accuracy'?); it logs train/loss, lr, eval/loss, eval/accuracy, "
                                     "eval_raw/loss, eval_raw/accuracy, ema/smoothing, ema/half_life_batches"),
                  typo.err);
  }

  TEST_CASE("issue 24 §5-6: check refuses mse on classes; a LibTorch error names the step and batch, no backtrace") {
    auto dir = scratch("step-errors");
    write(dir / "run.toml", quick_config());
    auto mse = run_baton(dir, {"check", "run.toml", "--set", "loss.name=mse"});
    CHECK(mse.status == 2);
    CHECK(contains(mse.err, "--set loss.name=mse: loss.name: mse compares outputs with values, but the data's "
                            "'targets' are class indices (10 classes): use cross_entropy"));

    // progressive_resizing with the mlp, which flattens a fixed size: check and train refuse it before training,
    // with the model's own reason and without a backtrace.
    write(dir / "resize.toml", quick_config("\n[[plugins]]\nname = \"progressive_resizing\"\ndelay_fraction = 0.0\n"));
    const std::string refusal = "progressive_resizing: the model cannot take the smaller images this plugin makes: at "
                                "initial_scale 0.5 the 28x28 images of 'inputs' become 16x16, and the model's "
                                "forward fails on them (";
    auto checked = run_baton(dir, {"check", "resize.toml"});
    CHECK(checked.status == 2);
    CHECK_MESSAGE(contains(checked.err, refusal), checked.err);
    CHECK(contains(checked.err, "mat1 and mat2 shapes cannot be multiplied"));
    auto resized = run_baton(dir, {"train", "resize.toml"});
    CHECK(resized.status == 1);
    CHECK_MESSAGE(contains(resized.err, refusal), resized.err);
    CHECK_FALSE(fs::exists(dir / "runs" / "quick" / "checkpoints"));
    for (const auto* out : {&checked.err, &resized.err}) {
      CHECK_FALSE(contains(*out, "Exception raised from"));
      CHECK_FALSE(contains(*out, "frame #"));
    }

    // The convnet with global_pool takes them: check passes, and the run trains on the smaller images.
    write(dir / "pooled.toml", quick_config_with("name = \"mlp\"\nwidths = [32]",
                                                 "name = \"convnet\"\nwidths = [8]\nglobal_pool = true") +
                                   "\n[[plugins]]\nname = \"progressive_resizing\"\ndelay_fraction = 0.0\n");
    auto pooled_check = run_baton(dir, {"check", "pooled.toml"});
    CHECK_MESSAGE(pooled_check.status == 0, pooled_check.err);
    auto pooled = run_baton(dir, {"train", "pooled.toml"});
    CHECK_MESSAGE(pooled.status == 0, pooled.err);
    double narrowest = 1e9;
    std::istringstream records(read_bytes(dir / "runs" / "quick" / "metrics.jsonl"));
    for (std::string line; std::getline(records, line);) {
      const auto record = nlohmann::json::parse(line);
      if (record.contains("progressive_resizing/width"))
        narrowest = std::min(narrowest, record["progressive_resizing/width"].get<double>());
    }
    CHECK(narrowest == 16);
    fs::remove_all(dir / "runs");

    // Inputs a plugin narrows inside the step: LibTorch's error, with what baton was doing.
    write(dir / "narrow.toml", quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_narrow_inputs") + "\"\n"));
    auto narrowed = run_baton(dir, {"train", "narrow.toml", "--allow-insecure-plugins"});
    CHECK(narrowed.status == 1);
    CHECK_MESSAGE(contains(narrowed.err, "error: training batch 1 of epoch 1 (ep 0 ba 0): the model's forward failed "
                                         "on inputs [64, 1, 28, 14] Float, targets [64] Long (the data's inputs are "
                                         "[1, 28, 28] per sample: a plugin changed them before this step"),
                  narrowed.err);
    CHECK(contains(narrowed.err, "mat1 and mat2 shapes cannot be multiplied"));
    CHECK_FALSE(contains(narrowed.err, "Exception raised from"));
    CHECK_FALSE(contains(narrowed.err, "frame #"));
  }

  TEST_CASE("issue 41 §9: check runs the first batch: int8 inputs kept as they are fail at check, not at batch 1") {
    auto dir = scratch("check-first-batch");
    // Python's standard library writes the file: I8 inputs [64, 4], I64 targets row % 2.
    write(dir / "writer.py",
          "import json, struct\n"
          "rows, width = 64, 4\n"
          "header = {'inputs': {'dtype': 'I8', 'shape': [rows, width], 'data_offsets': [0, rows * width]},\n"
          "          'targets': {'dtype': 'I64', 'shape': [rows], 'data_offsets': [rows * width, rows * width + rows * 8]}}\n"
          "text = json.dumps(header).encode()\n"
          "text += b' ' * (-len(text) % 8)\n"
          "with open('int8.safetensors', 'wb') as f:\n"
          "    f.write(struct.pack('<Q', len(text)) + text)\n"
          "    f.write(bytes((r * 7 + c) % 100 for r in range(rows) for c in range(width)))\n"
          "    f.write(struct.pack('<%dq' % rows, *[r % 2 for r in range(rows)]))\n");
    REQUIRE(std::system(("cd '" + dir.string() + "' && /usr/bin/python3 writer.py").c_str()) == 0);
    const std::string data = "name = \"safetensors\"\npath = \"int8.safetensors\"\neval_fraction = 0.25\n"
                             "batch_size = 16\neval_batch_size = 16";
    write(dir / "kept.toml", quick_config_with("name = \"synthetic\"\nbatch_size = 64\neval_batch_size = 256\n"
                                               "train_size = 512\neval_size = 256",
                                               data + "\nfloat_fields = []"));
    auto kept = run_baton(dir, {"check", "kept.toml"});
    CHECK(kept.status == 2);
    CHECK_MESSAGE(contains(kept.err, "the first training batch (ep 0 ba 0): the model's forward failed on inputs "
                                     "[16, 4] Char"),
                  kept.err);
    CHECK_FALSE(contains(kept.err, "Exception raised from"));
    // Converted (the default float_fields), the same file checks clean.
    write(dir / "converted.toml", quick_config_with("name = \"synthetic\"\nbatch_size = 64\neval_batch_size = 256\n"
                                                    "train_size = 512\neval_size = 256",
                                                    data));
    auto converted = run_baton(dir, {"check", "converted.toml"});
    CHECK_MESSAGE(converted.status == 0, converted.err);
  }

  TEST_CASE("baton's runs make OpenMP threads spin briefly unless the environment chooses, checked in libgomp") {
    auto dir = scratch("openmp_wait");
    write(dir / "run.toml", quick_config());
    // libgomp prints its settings when it is loaded (OMP_DISPLAY_ENV): once per start of the program. Its own
    // default spins 300000 times (GCC 12's and 14's) before sleeping; baton's 10000.
    auto spin_counts = [](const std::string& err) {
      std::vector<std::string> counts;
      const std::string key = "GOMP_SPINCOUNT = '";
      for (auto at = err.find(key); at != std::string::npos; at = err.find(key, at + 1)) {
        const auto from = at + key.size();
        counts.push_back(err.substr(from, err.find('\'', from) - from));
      }
      return counts;
    };
    const std::string clean =
        "exec env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u BATON_OPENMP_WAIT OMP_DISPLAY_ENV=verbose ";
    auto train = baton::test::run_in(dir, clean + baton::test::shell_quote(BATON_EXECUTABLE) + " train run.toml");
    REQUIRE_MESSAGE(train.status == 0, train.err);
    // Loaded with libgomp's default, then run again with baton's spin count before any work.
    const auto counts = spin_counts(train.err);
    REQUIRE(counts.size() == 2);
    CHECK(counts[0] == "300000");
    CHECK(counts[1] == "10000");
    CHECK(contains(train.out + train.err, "baton: OpenMP threads spin briefly, then sleep when idle "
                                          "(GOMP_SPINCOUNT=10000, baton's default; OMP_WAIT_POLICY or "
                                          "GOMP_SPINCOUNT in the environment choose another)"));
    fs::remove_all(dir / "runs");

    // The user's setting is kept, and said.
    auto own = baton::test::run_in(dir, clean + "GOMP_SPINCOUNT=5000 " +
                                            baton::test::shell_quote(BATON_EXECUTABLE) + " train run.toml");
    REQUIRE_MESSAGE(own.status == 0, own.err);
    CHECK(spin_counts(own.err) == std::vector<std::string>{"5000"});
    CHECK(contains(own.out + own.err, "baton: OpenMP threads wait as the environment says (GOMP_SPINCOUNT=5000)"));
    fs::remove_all(dir / "runs");

    // libgomp's own default on request (to compare), and no second start for a command that trains nothing.
    auto libgomp = baton::test::run_in(dir, clean + "BATON_OPENMP_WAIT=libgomp " +
                                                baton::test::shell_quote(BATON_EXECUTABLE) + " train run.toml");
    REQUIRE_MESSAGE(libgomp.status == 0, libgomp.err);
    CHECK(spin_counts(libgomp.err) == std::vector<std::string>{counts[0]});
    CHECK(contains(libgomp.out + libgomp.err, "baton: OpenMP threads spin when idle (libgomp's default)"));
    auto check = baton::test::run_in(dir, clean + baton::test::shell_quote(BATON_EXECUTABLE) + " check run.toml");
    CHECK(check.status == 0);
    CHECK(spin_counts(check.err) == std::vector<std::string>{counts[0]});
  }
}
