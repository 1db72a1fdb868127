// Whole-program tests: the baton executable run as a user runs it, on synthetic data, in scratch folders.
// Each case starts real processes; keep their number small (a LibTorch process start costs most of a second).
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "baton_command.h"
#include "test_files.h"

namespace fs = std::filesystem;

using baton::test::read_bytes;

namespace {

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

fs::path scratch(const std::string& name) { return baton::test::scratch_dir("cli-" + name); }

// Runs `baton <args>` in `dir`, capturing stdout, stderr and the exit status.
Result run_baton(const fs::path& dir, const std::vector<std::string>& args) {
  std::string command = baton::test::baton_command(dir, args) + " > out.txt 2> err.txt";
  int raw = std::system(command.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_bytes(dir / "out.txt");
  r.err = read_bytes(dir / "err.txt");
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A quick synthetic run: 512 samples in batches of 64 (8 batches per epoch), an mlp, 2 epochs.
std::string quick_config(const std::string& extra = "") {
  return R"([run]
name = "quick"
dir = "runs"
seed = 3

[data]
dataset = "synthetic"
batch_size = 64
eval_batch_size = 256
synthetic_train_size = 512
synthetic_eval_size = 256

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

[checkpoint]
save_interval = "1ep"
)" + extra;
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

    std::string text = quick_config();
    text.replace(text.find("batch_size = 64"), 15, "batch_sise = 64");
    write(dir / "key.toml", text);
    auto unknown = run_baton(dir, {"check", "key.toml"});
    CHECK(unknown.status == 2);
    CHECK(contains(unknown.err, "key.toml:8:1: data.batch_sise"));

    text = quick_config();
    text.replace(text.find("max_duration = \"2ep\""), 20, "max_duration = \"2 epochs\"");
    write(dir / "time.toml", text);
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

// The tensor names in a safetensors file's JSON header (8-byte little-endian length, then the JSON).
std::vector<std::string> tensor_names(const fs::path& file) {
  std::string text = read_bytes(file);
  unsigned long long length = 0;
  for (int i = 7; i >= 0 && text.size() >= 8; --i) length = length * 256 + static_cast<unsigned char>(text[i]);
  std::string header = text.substr(8, length);
  std::vector<std::string> names;
  for (std::size_t at = header.find("\":{"); at != std::string::npos; at = header.find("\":{", at + 1)) {
    std::size_t begin = header.rfind('"', at - 1);
    std::string name = header.substr(begin + 1, at - begin - 1);
    if (name != "__metadata__") names.push_back(name);
  }
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
