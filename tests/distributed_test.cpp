// Whole-program tests of data-parallel runs: `baton launch` on loopback (Gloo), equivalence of 2 ranks at batch B/2
// with 1 rank at batch B, and a rank killed mid-run.
#include "baton_test.h"

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

#include "baton/safetensors.h"

namespace fs = std::filesystem;

namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

std::string quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string command_line(const fs::path& dir, const std::vector<std::string>& args) {
  std::string command = "cd " + quote(dir.string()) + " && exec " + quote(BATON_EXECUTABLE);
  for (const auto& a : args) command += " " + quote(a);
  return command + " 2>&1";
}

Result run_baton(const fs::path& dir, const std::vector<std::string>& args) {
  Result r;
  FILE* pipe = ::popen(command_line(dir, args).c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) r.out += buffer;
  int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// A small synthetic run: 512 samples, an mlp, sgd with momentum, 2 epochs.
void write_config(const fs::path& file, const std::string& name, int batch_size, const std::string& extra = "") {
  std::ofstream(file) << "[run]\nname = \"" << name << "\"\ndir = \"runs\"\nseed = 7\n"
                      << "[data]\ndataset = \"synthetic\"\nsynthetic_train_size = 512\nsynthetic_eval_size = 200\n"
                      << "batch_size = " << batch_size << "\neval_batch_size = 64\n"
                      << "[model]\nname = \"mlp\"\nwidths = [32]\n"
                      << "[optimizer]\nname = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n"
                      << "[trainer]\nmax_duration = \"2ep\"\nthreads = 1\nprogress = false\n"
                      << "[distributed]\ntimeout_seconds = 20\n"
                      << extra;
}

int count_lines_with(const std::string& text, const std::string& needle) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// The largest element-wise difference between the model.safetensors of two run folders (same tensors required).
double max_weight_difference(const fs::path& run_a, const fs::path& run_b) {
  auto a = baton::read_safetensors((run_a / "model.safetensors").string());
  auto b = baton::read_safetensors((run_b / "model.safetensors").string());
  REQUIRE(a.tensors.size() == b.tensors.size());
  REQUIRE(!a.tensors.empty());
  double max_diff = 0;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    REQUIRE(a.tensors[i].first == b.tensors[i].first);
    REQUIRE((a.tensors[i].second.sizes() == b.tensors[i].second.sizes()));
    max_diff = std::max(max_diff, a.tensors[i].second.sub(b.tensors[i].second).abs().max().item<double>());
  }
  return max_diff;
}

}  // namespace

TEST_SUITE("distributed_cli") {
  TEST_CASE("launch --nproc 2 trains on loopback; rank 0 alone writes the run folder") {
    auto dir = baton::test::scratch_dir("dist-launch");
    write_config(dir / "cfg.toml", "two", 32);
    Result r = run_baton(dir, {"launch", "--nproc", "2", "train", "cfg.toml"});
    INFO(r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("[rank 1] rank 1 of 2 done at ep 2 ba 16") != std::string::npos);  // 256 samples / 16 each
    CHECK(r.out.find("[rank 0] trained to ep 2 ba 16") != std::string::npos);
    CHECK(count_lines_with(r.out, "trained to ep") == 1);
    std::vector<fs::path> runs;
    for (const auto& entry : fs::directory_iterator(dir / "runs")) runs.push_back(entry.path());
    REQUIRE(runs.size() == 1);
    CHECK(fs::exists(runs[0] / "model.safetensors"));
    CHECK(fs::exists(runs[0] / "checkpoints" / "ep2"));
    std::ifstream metrics(runs[0] / "metrics.jsonl");
    std::stringstream text;
    text << metrics.rdbuf();
    // One writer: one eval/accuracy record per epoch (two ranks appending would give four).
    CHECK(count_lines_with(text.str(), "\"eval/accuracy\"") == 2);
  }

  TEST_CASE("2 ranks at batch B/2 end with the weights of 1 rank at batch B") {
    auto dir = baton::test::scratch_dir("dist-equivalence");
    write_config(dir / "one.toml", "one", 64);
    write_config(dir / "two.toml", "two", 32);
    Result one = run_baton(dir, {"train", "one.toml"});
    INFO(one.out);
    REQUIRE(one.status == 0);
    Result two = run_baton(dir, {"launch", "--nproc", "2", "train", "two.toml"});
    INFO(two.out);
    REQUIRE(two.status == 0);
    double max_diff = max_weight_difference(dir / "runs" / "one", dir / "runs" / "two");
    MESSAGE("max |w1 - w2| = " << max_diff);
    CHECK(max_diff < 1e-4);
  }

  TEST_CASE("2 ranks resumed from a checkpoint end where an uninterrupted 2-rank run ends") {
    auto dir = baton::test::scratch_dir("dist-resume");
    write_config(dir / "straight.toml", "straight", 32);
    write_config(dir / "resumed.toml", "resumed", 32);
    Result straight = run_baton(dir, {"launch", "--nproc", "2", "train", "straight.toml"});
    INFO(straight.out);
    REQUIRE(straight.status == 0);
    Result first = run_baton(dir, {"launch", "--nproc", "2", "train", "resumed.toml", "--set",
                                   "trainer.max_duration=1ep"});
    INFO(first.out);
    REQUIRE(first.status == 0);
    Result second = run_baton(dir, {"launch", "--nproc", "2", "train", "resumed.toml", "--resume", "auto"});
    INFO(second.out);
    REQUIRE(second.status == 0);
    CHECK(second.out.find("[rank 0] resumed from runs/resumed/checkpoints/ep1 at ep 1 ba 8") != std::string::npos);
    CHECK(second.out.find("[rank 1] rank 1 of 2 done at ep 2 ba 16") != std::string::npos);
    double max_diff = max_weight_difference(dir / "runs" / "straight", dir / "runs" / "resumed");
    MESSAGE("max |w_straight - w_resumed| = " << max_diff);
    CHECK(max_diff < 1e-6);
  }

  TEST_CASE("a rank killed mid-run: launch ends the others and fails naming the rank") {
    auto dir = baton::test::scratch_dir("dist-kill");
    write_config(dir / "cfg.toml", "long", 8, "");
    // Long enough never to finish during the test.
    auto started = std::chrono::steady_clock::now();
    FILE* pipe = ::popen(command_line(dir, {"launch", "--nproc", "2", "train", "cfg.toml", "--set",
                                            "trainer.max_duration=100000ep", "--set", "trainer.log_interval=1ba"})
                             .c_str(),
                         "r");
    REQUIRE(pipe != nullptr);
    std::string out;
    pid_t victim = -1;
    bool killed = false;
    char buffer[4096];
    while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
      std::string line = buffer;
      out += line;
      if (line.rfind("baton launch: rank 1 is pid ", 0) == 0) victim = std::atoi(line.c_str() + 28);
      // Kill once training is under way (rank 0 prints progress after the rendezvous).
      if (!killed && victim > 0 && line.find("[rank 0] ") != std::string::npos && line.find("loss") != std::string::npos) {
        ::kill(victim, SIGKILL);
        killed = true;
        started = std::chrono::steady_clock::now();
      }
    }
    int raw = ::pclose(pipe);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    INFO(out);
    REQUIRE(killed);
    CHECK(WIFEXITED(raw));
    CHECK(WEXITSTATUS(raw) == 1);
    CHECK(out.find("baton launch: failed: rank 1 was killed by signal 9") != std::string::npos);
    MESSAGE("launch ended " << seconds << " s after the kill");
    CHECK(seconds < 60);
  }
}
