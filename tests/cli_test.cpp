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

namespace fs = std::filesystem;

namespace {

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path scratch(const std::string& name) {
  auto dir = fs::path(BATON_BINARY_DIR) / "test-scratch" / ("cli-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `baton <args>` in `dir`, capturing stdout, stderr and the exit status.
Result baton(const fs::path& dir, const std::vector<std::string>& args) {
  std::string command = "cd " + quote(dir.string()) + " && " + quote(BATON_EXECUTABLE);
  for (const auto& a : args) command += " " + quote(a);
  command += " > out.txt 2> err.txt";
  int raw = std::system(command.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(dir / "out.txt");
  r.err = read_file(dir / "err.txt");
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
    auto good = baton(dir, {"check", "good.toml"});
    CHECK(good.status == 0);
    CHECK(contains(good.out, "good.toml: ok"));

    write(dir / "typo.toml", quick_config() + "\n[trainer]\n");  // a duplicate table is a TOML syntax error
    auto duplicate = baton(dir, {"check", "typo.toml"});
    CHECK(duplicate.status == 2);
    CHECK(contains(duplicate.err, "typo.toml:"));

    std::string text = quick_config();
    text.replace(text.find("batch_size = 64"), 15, "batch_sise = 64");
    write(dir / "key.toml", text);
    auto unknown = baton(dir, {"check", "key.toml"});
    CHECK(unknown.status == 2);
    CHECK(contains(unknown.err, "key.toml:8:1: data.batch_sise"));

    text = quick_config();
    text.replace(text.find("max_duration = \"2ep\""), 20, "max_duration = \"2 epochs\"");
    write(dir / "time.toml", text);
    auto bad_time = baton(dir, {"check", "time.toml"});
    CHECK(bad_time.status == 2);
    CHECK(contains(bad_time.err, "time.toml:22:"));
    CHECK(contains(bad_time.err, "trainer.max_duration"));
    CHECK(contains(bad_time.err, "2 epochs"));

    auto bad_set = baton(dir, {"check", "good.toml", "--set", "data.batch_size=\"many\""});
    CHECK(bad_set.status == 2);
    CHECK(contains(bad_set.err, "data.batch_size"));

    auto missing = baton(dir, {"check", "nowhere.toml"});
    CHECK(missing.status == 2);
    CHECK(contains(missing.err, "nowhere.toml"));

    write(dir / "plugin.toml", quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_good") +
                                            "\"\nthreshhold = 3\n"));
    auto plugin_key = baton(dir, {"check", "plugin.toml", "--allow-insecure-plugins"});
    CHECK(plugin_key.status == 2);
    CHECK(contains(plugin_key.err, "plugin.toml:"));
    CHECK(contains(plugin_key.err, "threshhold"));
  }

  TEST_CASE("train writes the run folder; eval reads a checkpoint; resume continues bitwise exactly") {
    auto dir = scratch("train");
    write(dir / "run.toml", quick_config());
    auto train = baton(dir, {"train", "run.toml"});
    REQUIRE_MESSAGE(train.status == 0, train.err);
    CHECK(contains(train.err, "BLAS"));
    CHECK(contains(train.out, "eval/accuracy"));  // the end-of-run table
    auto run = dir / "runs" / "quick";
    CHECK(fs::exists(run / "metrics.jsonl"));
    CHECK(fs::exists(run / "model.safetensors"));
    CHECK(fs::exists(run / "eval_accuracy.svg"));
    CHECK(fs::exists(run / "checkpoints" / "ep1" / "meta.json"));
    CHECK(fs::exists(run / "checkpoints" / "ep2" / "state.safetensors"));

    auto eval = baton(dir, {"eval", "run.toml", "--checkpoint", (run / "checkpoints" / "ep2").string()});
    CHECK(eval.status == 0);
    CHECK(contains(eval.out, "eval loss"));
    CHECK(contains(eval.out, "(256 samples)"));

    // Two epochs in two sittings: the final weights equal the uninterrupted run's, byte for byte.
    auto split = scratch("train-split");
    write(split / "run.toml", quick_config());
    CHECK(baton(split, {"train", "run.toml", "--set", "trainer.max_duration=1ep"}).status == 0);
    auto resumed = baton(split, {"train", "run.toml", "--resume", "auto"});
    CHECK(resumed.status == 0);
    CHECK(contains(resumed.err, "resumed from"));
    CHECK(read_file(split / "runs" / "quick" / "model.safetensors") == read_file(run / "model.safetensors"));

    // A corrupted checkpoint is refused by name.
    auto state = run / "checkpoints" / "ep1" / "state.safetensors";
    fs::resize_file(state, fs::file_size(state) - 10);
    auto corrupt = baton(dir, {"eval", "run.toml", "--checkpoint", (run / "checkpoints" / "ep1").string()});
    CHECK(corrupt.status == 1);
    CHECK(contains(corrupt.err, "ep1"));
    CHECK(contains(corrupt.err, "state.safetensors"));
  }

  TEST_CASE("plugins from TOML: tracing, stop requests, and a plugin that throws") {
    auto dir = scratch("plugins");
    write(dir / "stop.toml", quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_good") +
                                          "\"\nthreshold = 3\n"));
    auto stop = baton(dir, {"train", "stop.toml", "--trace", "--allow-insecure-plugins"});
    CHECK(stop.status == 0);
    CHECK(contains(stop.err, "trace: fixture_good/batch_end"));
    CHECK(contains(stop.out, "trained to ep 0 ba 3"));
    CHECK(contains(stop.out, "stopped"));

    write(dir / "throw.toml", quick_config("\n[[plugins]]\npath = \"" + fixture("fixture_event_throws") + "\"\n"));
    auto thrown = baton(dir, {"train", "throw.toml", "--allow-insecure-plugins"});
    CHECK(thrown.status == 1);
    CHECK(contains(thrown.err, "plugin 'fixture_event_throws' failed on event batch_end"));

    write(dir / "missing.toml", quick_config("\n[[plugins]]\nname = \"no_such_plugin\"\n"));
    auto missing = baton(dir, {"train", "missing.toml"});
    CHECK(missing.status == 1);
    CHECK(contains(missing.err, "no_such_plugin"));

    auto listed = baton(dir, {"plugins", "--path", BATON_TEST_PLUGIN_DIR, "--allow-insecure-plugins"});
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
    while (!contains(read_file(dir / "err.txt"), "epoch 2") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(child, SIGINT);
    int raw = 0;
    waitpid(child, &raw, 0);
    REQUIRE(WIFEXITED(raw));
    CHECK(WEXITSTATUS(raw) == 130);
    std::string out = read_file(dir / "out.txt");
    CHECK(contains(out, "stopped: interrupted by a signal"));
    CHECK(contains(out, "last checkpoint: runs/quick/checkpoints/ba"));
    CHECK(fs::exists(dir / "runs" / "quick" / "model.safetensors"));
  }
}
