// Whole-program tests of data-parallel runs: `baton launch` on loopback (Gloo), equivalence of 2 ranks at batch B/2
// with 1 rank at batch B, the sharded EMA against a whole one, resume at the same and at another world size, a
// rank killed mid-run, two launchers as two nodes, and torchrun; sharding zero1 / zero2 against sharding none.
#include "baton_test.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ops/zeros.h>
#include <nlohmann/json.hpp>

#include "baton/safetensors.h"
#include "baton_command.h"
#include "loopback_ranks.h"

namespace fs = std::filesystem;

namespace {

struct Result {
  int status = -1;
  std::string out;  // stdout and stderr together
};

std::string command_line(const fs::path& dir, const std::vector<std::string>& args) {
  return baton::test::baton_command(dir, args) + " 2>&1";
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
                      << "[data]\nname = \"synthetic\"\ntrain_size = 512\neval_size = 200\n"
                      << "batch_size = " << batch_size << "\neval_batch_size = 64\n"
                      << "[model]\nname = \"mlp\"\nwidths = [32]\n"
                      << "[optimizer]\nname = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n"
                      << "[trainer]\nprecision = \"fp32\"\nmax_duration = \"2ep\"\nthreads = 1\nprogress = false\n"
                      << "[distributed]\ntimeout_seconds = 20\n"
                      << extra;
}

// The ema plugin with a short half life that starts a few batches in (8 batches an epoch at a global batch of 64).
const std::string kEma = "[[plugins]]\nname = \"ema\"\nhalf_life = \"4ba\"\nema_start = \"3ba\"\n";

int count_lines_with(const std::string& text, const std::string& needle) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

// The largest element-wise difference between the `file` (model.safetensors, ema.safetensors) of two run folders
// (same tensors required).
double max_weight_difference(const fs::path& run_a, const fs::path& run_b,
                             const std::string& file = "model.safetensors") {
  auto a = baton::read_safetensors((run_a / file).string());
  auto b = baton::read_safetensors((run_b / file).string());
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

// A `baton launch` whose rank 1 got SIGKILL (launch_killing_rank1 below).
struct KilledLaunch {
  std::string out;
  int status = 0;     // pclose's
  bool sent = false;  // whether the kill was sent
  std::chrono::steady_clock::time_point sent_at;
};

// A `baton launch` whose rank 1 gets SIGKILL `delay` after the first line of output for which `trigger` holds,
// whatever it is doing then (unless the run has ended by then: `sent` stays false). `triggered_at` and `ended_at`
// say when that line came and when the output ended.
struct TimedKill {
  KilledLaunch launch;
  std::chrono::steady_clock::time_point triggered_at, ended_at;
};
template <class Trigger>
TimedKill launch_killing_rank1_after(const fs::path& dir, const std::vector<std::string>& args, Trigger trigger,
                                     std::chrono::milliseconds delay) {
  TimedKill result;
  FILE* pipe = ::popen(command_line(dir, args).c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::mutex lock;
  std::condition_variable changed;
  pid_t victim = -1;
  bool triggered = false, ended = false;
  std::thread killer([&] {
    std::unique_lock<std::mutex> guard(lock);
    changed.wait(guard, [&] { return (victim > 0 && triggered) || ended; });
    if (ended || changed.wait_for(guard, delay, [&] { return ended; })) return;
    ::kill(victim, SIGKILL);
    result.launch.sent = true;
    result.launch.sent_at = std::chrono::steady_clock::now();
  });
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    const std::string line = buffer;
    result.launch.out += line;
    std::lock_guard<std::mutex> guard(lock);
    if (line.rfind("baton launch: rank 1 is pid ", 0) == 0) victim = std::atoi(line.c_str() + 28);
    if (!triggered && trigger(line)) {
      triggered = true;
      result.triggered_at = std::chrono::steady_clock::now();
    }
    changed.notify_all();
  }
  result.ended_at = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> guard(lock);
    ended = true;
    changed.notify_all();
  }
  killer.join();
  result.launch.status = ::pclose(pipe);
  return result;
}

// A `baton launch` whose rank 1 gets SIGKILL on the first line of output for which `trigger` holds.
template <class Trigger>
KilledLaunch launch_killing_rank1(const fs::path& dir, const std::vector<std::string>& args, Trigger trigger) {
  return launch_killing_rank1_after(dir, args, trigger, std::chrono::milliseconds(0)).launch;
}

// A sharded (or not) run of the same data and model as write_config's: `sharding` in [distributed], `optimizer`
// the [optimizer] table's keys, no checkpoints (unless --set), `extra` appended.
void write_sharded_config(const fs::path& file, const std::string& name, const std::string& sharding,
                          const std::string& optimizer, const std::string& extra = "") {
  std::ofstream(file) << "[run]\nname = \"" << name << "\"\ndir = \"runs\"\nseed = 7\n"
                      << "[data]\nname = \"synthetic\"\ntrain_size = 512\neval_size = 200\n"
                      << "batch_size = 32\neval_batch_size = 64\n"
                      << "[model]\nname = \"mlp\"\nwidths = [32]\n"
                      << "[optimizer]\n" << optimizer
                      << "[trainer]\nprecision = \"fp32\"\nmax_duration = \"2ep\"\nthreads = 1\nprogress = false\n"
                      << "[checkpoint]\nsave_interval = \"0ep\"\n"
                      << "[distributed]\ntimeout_seconds = 20\nsharding = \"" << sharding << "\"\n"
                      << extra;
}

// The largest relative difference between the `file` of two run folders: per tensor max|a - b| / max|b|.
double max_relative_difference(const fs::path& run_a, const fs::path& run_b,
                               const std::string& file = "model.safetensors") {
  auto a = baton::read_safetensors((run_a / file).string());
  auto b = baton::read_safetensors((run_b / file).string());
  REQUIRE(a.tensors.size() == b.tensors.size());
  REQUIRE(!a.tensors.empty());
  double worst = 0;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    REQUIRE(a.tensors[i].first == b.tensors[i].first);
    REQUIRE((a.tensors[i].second.sizes() == b.tensors[i].second.sizes()));
    const double scale = b.tensors[i].second.abs().max().item<double>();
    REQUIRE(scale > 0);
    worst = std::max(worst, a.tensors[i].second.sub(b.tensors[i].second).abs().max().item<double>() / scale);
  }
  return worst;
}

// Every tensor of a folder of safetensors files, each a block of a global tensor at the offsets its file's
// DCP_SHARDING_INFO metadata gives (PyTorch's distributed checkpoint form), put together: read here with the
// public reader and the JSON parser alone, apart from baton's own reader.
std::map<std::string, at::Tensor> assemble(const fs::path& folder) {
  std::vector<std::pair<std::vector<std::int64_t>, std::pair<std::string, at::Tensor>>> blocks;
  std::map<std::string, std::vector<std::int64_t>> extent;
  for (const auto& entry : fs::directory_iterator(folder)) {
    const auto file = baton::read_safetensors(entry.path().string());
    const auto offsets = nlohmann::json::parse(file.metadata.at("DCP_SHARDING_INFO"));
    for (const auto& [name, tensor] : file.tensors) {
      const auto at = offsets.at(name).at("saved_offsets").get<std::vector<std::int64_t>>();
      auto& size = extent[name];
      size.resize(at.size(), 0);
      for (std::size_t d = 0; d < at.size(); ++d) size[d] = std::max(size[d], at[d] + tensor.size(d));
      blocks.push_back({at, {name, tensor}});
    }
  }
  std::map<std::string, at::Tensor> out;
  for (const auto& [at, named] : blocks) {
    auto& whole = out[named.first];
    if (!whole.defined()) whole = at::zeros(extent[named.first], named.second.options());
    at::Tensor target = whole;
    for (std::size_t d = 0; d < at.size(); ++d) target = target.narrow(d, at[d], named.second.size(d));
    target.copy_(named.second);
  }
  return out;
}

// The largest element-wise difference between a safetensors file's tensors and a folder's row blocks put together
// (assemble), which must hold the same tensors.
double max_difference_to_rows(const fs::path& file, const fs::path& folder) {
  const auto rows = assemble(folder);
  const auto whole = baton::read_safetensors(file.string());
  REQUIRE(whole.tensors.size() == rows.size());
  double worst = 0;
  for (const auto& [name, tensor] : whole.tensors) {
    REQUIRE(rows.count(name) == 1);
    REQUIRE((tensor.sizes() == rows.at(name).sizes()));
    worst = std::max(worst, tensor.sub(rows.at(name)).abs().max().item<double>());
  }
  return worst;
}

// The largest relative difference between the tensors of two such folders (the same names required).
double max_state_difference(const fs::path& a, const fs::path& b) {
  const auto x = assemble(a), y = assemble(b);
  REQUIRE(x.size() == y.size());
  REQUIRE(!x.empty());
  double worst = 0;
  for (const auto& [name, tensor] : y) {
    REQUIRE(x.count(name) == 1);
    REQUIRE((x.at(name).sizes() == tensor.sizes()));
    const at::Tensor other = x.at(name).to(at::kDouble), mine = tensor.to(at::kDouble);
    const double scale = mine.abs().max().item<double>();
    const double difference = other.sub(mine).abs().max().item<double>();
    worst = std::max(worst, scale > 0 ? difference / scale : difference);
  }
  return worst;
}

// What fixture_sample_log recorded in a run folder, every rank's files together: per batch, its samples' fingerprints
// in sorted order.
std::map<std::int64_t, std::vector<std::string>> samples_by_batch(const fs::path& run) {
  std::map<std::int64_t, std::vector<std::string>> out;
  for (const auto& entry : fs::directory_iterator(run)) {
    if (entry.path().filename().string().rfind("samples-rank", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::int64_t batch = 0;
    std::string sum, first;
    while (in >> batch >> sum >> first) out[batch].push_back(sum + " " + first);
  }
  for (auto& [batch, samples] : out) std::sort(samples.begin(), samples.end());
  return out;
}

// Starts `baton <args>` in `dir` in the background with stdout and stderr in `log` and the environment `env`
// ("NAME=value" entries) added; returns its pid (the shell execs baton, so the pid is baton's).
pid_t start_baton(const fs::path& dir, const std::vector<std::string>& args, const fs::path& log,
                  const std::vector<std::string>& env = {}) {
  std::string command;
  for (const auto& e : env) command += "export " + baton::test::shell_quote(e) + "; ";
  command += baton::test::baton_command(dir, args) + " > " + baton::test::shell_quote(log.string()) + " 2>&1";
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid` up to `seconds`; its exit status, or -1 if it did not end in time or ended by a signal.
int wait_exit(pid_t pid, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int raw = 0;
    if (::waitpid(pid, &raw, WNOHANG) == pid) return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

std::string file_text(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// True while `pid` is a live process (a zombie or a vanished pid is not).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, name, state;
  if (!(stat >> pid_field >> name >> state)) return false;
  return state != "Z" && state != "X";
}

// Writes <reference>.toml and <other>.toml (the same 2-epoch run under two names) and trains <reference> with
// `launch --nproc 2`: what a run of <other> by another launcher must end with.
void train_reference_launch(const fs::path& dir, const std::string& reference, const std::string& other) {
  write_config(dir / (reference + ".toml"), reference, 32);
  write_config(dir / (other + ".toml"), other, 32);
  Result launched = run_baton(dir, {"launch", "--nproc", "2", "train", reference + ".toml"});
  INFO(launched.out);
  REQUIRE(launched.status == 0);
}

// The launch arguments of node `node` of 2, one rank each, meeting at 127.0.0.1:`port`.
std::vector<std::string> node_launch(int node, int port, const std::vector<std::string>& command) {
  std::vector<std::string> args{"launch", "--nproc", "1", "--nnodes", "2", "--node-rank", std::to_string(node),
                                "--master-addr", "127.0.0.1", "--master-port", std::to_string(port)};
  args.insert(args.end(), command.begin(), command.end());
  return args;
}

// The major version of the Python torch package, or 0 without one.
int python_torch_major() {
  FILE* pipe = ::popen("python3 -c 'import torch; print(torch.__version__.split(\".\")[0])' 2>/dev/null", "r");
  if (pipe == nullptr) return 0;
  char buffer[64] = {0};
  int major = std::fgets(buffer, sizeof buffer, pipe) != nullptr ? std::atoi(buffer) : 0;
  ::pclose(pipe);
  return major;
}

struct Interrupted {
  int status = -1;  // the launcher's exit status
  std::string out;
  bool sent = false;
};

// Runs `baton launch <args>` and, once rank 0 prints a progress line with a loss (training is under way), sends
// SIGINT to the launcher (a Ctrl-C at the terminal) or, with `rank` >= 0, to that rank alone.
Interrupted launch_and_interrupt(const fs::path& dir, const std::vector<std::string>& args, int rank = -1) {
  Interrupted result;
  FILE* pipe = ::popen(command_line(dir, args).c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::vector<pid_t> ranks;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    const std::string line = buffer;
    result.out += line;
    const std::string announced = "baton launch: rank " + std::to_string(ranks.size()) + " is pid ";
    if (line.rfind(announced, 0) == 0) ranks.push_back(std::atoi(line.c_str() + announced.size()));
    if (!result.sent && line.rfind("[rank 0] ", 0) == 0 && line.find("loss=") != std::string::npos &&
        !ranks.empty()) {
      // The launcher is the ranks' parent (the shell popen started exec'd it).
      pid_t target = rank >= 0 ? ranks.at(rank) : -1;
      if (rank < 0) {
        std::ifstream stat("/proc/" + std::to_string(ranks.front()) + "/stat");
        std::string pid, name, state;
        stat >> pid >> name >> state >> target;
      }
      REQUIRE(target > 0);
      ::kill(target, SIGINT);
      result.sent = true;
    }
  }
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
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

  TEST_CASE("the EMA sharded over 2 ranks equals an unsharded one bit for bit, and 1 rank's to reduction error") {
    auto dir = baton::test::scratch_dir("dist-sharded-ema");
    write_config(dir / "sharded.toml", "sharded", 32, kEma);
    write_config(dir / "whole.toml", "whole", 32, kEma + "sharded = false\n");
    write_config(dir / "one.toml", "one", 64, kEma);
    Result sharded = run_baton(dir, {"launch", "--nproc", "2", "train", "sharded.toml"});
    INFO(sharded.out);
    REQUIRE(sharded.status == 0);
    // 32x784 + 32 + 10x32 + 10 fp32 = 25,450 elements: 12,725 on each rank.
    CHECK(sharded.out.find("[rank 0] ema: sharded over 2 ranks: each holds 49.7 KiB of the 99.4 KiB average") !=
          std::string::npos);
    Result whole = run_baton(dir, {"launch", "--nproc", "2", "train", "whole.toml"});
    INFO(whole.out);
    REQUIRE(whole.status == 0);
    CHECK(whole.out.find("sharded over") == std::string::npos);
    Result one = run_baton(dir, {"train", "one.toml"});
    INFO(one.out);
    REQUIRE(one.status == 0);

    const fs::path runs = dir / "runs";
    CHECK(max_weight_difference(runs / "sharded", runs / "whole", "ema.safetensors") == 0);
    // The sharded EMA's checkpoint holds each rank's rows in ema/ (no gather), the whole one's ema.safetensors.
    CHECK_FALSE(fs::exists(runs / "sharded" / "checkpoints" / "ep1" / "ema.safetensors"));
    CHECK(max_difference_to_rows(runs / "whole" / "checkpoints" / "ep1" / "ema.safetensors",
                                 runs / "sharded" / "checkpoints" / "ep1" / "ema") == 0);
    double to_one = max_weight_difference(runs / "sharded", runs / "one", "ema.safetensors");
    MESSAGE("max |ema_2_ranks_sharded - ema_1_rank| = " << to_one);
    CHECK(to_one < 1e-4);
    // The EMA differs from the weights (it is an average, not a copy).
    auto ema = baton::read_safetensors((runs / "sharded" / "ema.safetensors").string());
    auto raw = baton::read_safetensors((runs / "sharded" / "model.safetensors").string());
    CHECK(ema.tensors.at(0).second.sub(raw.tensors.at(0).second).abs().max().item<double>() > 1e-4);

    // Evaluating the checkpoint on 2 ranks (each takes its slice of the saved EMA, gathered for the pass) prints,
    // once, what one process prints.
    Result eval_two = run_baton(dir, {"launch", "--nproc", "2", "eval", "sharded.toml", "--checkpoint",
                                      "runs/sharded/checkpoints/ep2"});
    INFO(eval_two.out);
    REQUIRE(eval_two.status == 0);
    Result eval_one = run_baton(dir, {"eval", "sharded.toml", "--checkpoint", "runs/sharded/checkpoints/ep2"});
    INFO(eval_one.out);
    REQUIRE(eval_one.status == 0);
    const std::string line = eval_one.out.substr(0, eval_one.out.find('\n'));
    CHECK(line.find("checkpoint runs/sharded/checkpoints/ep2: eval loss ") == 0);
    CHECK(count_lines_with(eval_two.out, "[rank 0] " + line) == 1);
    CHECK(count_lines_with(eval_two.out, "eval loss") == 1);
  }

  TEST_CASE("a sharded EMA checkpoint resumes at the same world size, at 1 rank, and from 1 rank at 2; mid-epoch too") {
    auto dir = baton::test::scratch_dir("dist-ema-resume");
    for (const char* name : {"straight", "same", "down", "up", "middle"})
      write_config(dir / (std::string(name) + ".toml"), name, std::string(name) == "up" ? 64 : 32, kEma);
    const std::vector<std::string> two = {"launch", "--nproc", "2", "train"};
    auto run = [&](std::vector<std::string> args) {
      Result r = run_baton(dir, args);
      INFO(r.out);
      REQUIRE(r.status == 0);
      return r;
    };
    auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    run(with(two, {"straight.toml"}));
    // 2 ranks -> 2 ranks.
    run(with(two, {"same.toml", "--set", "trainer.max_duration=1ep"}));
    run(with(two, {"same.toml", "--resume", "auto"}));
    // 2 ranks at 32 -> 1 rank at 64: the same global batch.
    run(with(two, {"down.toml", "--set", "trainer.max_duration=1ep"}));
    Result down = run({"train", "down.toml", "--set", "data.batch_size=64", "--resume", "auto"});
    CHECK(down.out.find("checkpoint runs/down/checkpoints/ep1 was written by 2 rank(s) at batch size 32; continuing "
                        "with 1 at batch size 64 (global batch 64 -> 64)") != std::string::npos);
    // 1 rank at 64 -> 2 ranks at 32: each rank takes its slice of the whole saved EMA.
    run({"train", "up.toml", "--set", "trainer.max_duration=1ep"});
    Result up = run(with(two, {"up.toml", "--set", "data.batch_size=32", "--resume", "auto"}));
    CHECK(up.out.find("[rank 0] ema: sharded over 2 ranks") != std::string::npos);
    // 2 ranks stopped after batch 5 of epoch 0 -> 1 rank: the epoch goes on at its 6th batch.
    run(with(two, {"middle.toml", "--set", "trainer.max_duration=5ba"}));
    Result middle = run({"train", "middle.toml", "--set", "data.batch_size=64", "--resume", "auto"});
    CHECK(middle.out.find("resumed from runs/middle/checkpoints/ba5 at ep 0 ba 5") != std::string::npos);
    CHECK(middle.out.find("trained again") == std::string::npos);

    const fs::path runs = dir / "runs";
    CHECK(max_weight_difference(runs / "straight", runs / "same", "ema.safetensors") < 1e-6);
    for (std::string name : {"down", "up", "middle"}) {
      CAPTURE(name);
      double ema = max_weight_difference(runs / "straight", runs / name, "ema.safetensors");
      double weights = max_weight_difference(runs / "straight", runs / name);
      MESSAGE(name << ": max |ema - ema_straight| = " << ema << ", max |w - w_straight| = " << weights);
      CHECK(ema < 1e-4);
      CHECK(weights < 1e-4);
    }
  }

  TEST_CASE("resuming mid-epoch with another global batch says how many samples are trained again") {
    auto dir = baton::test::scratch_dir("dist-rescale");
    write_config(dir / "cfg.toml", "rescale", 32);
    Result first = run_baton(dir, {"launch", "--nproc", "2", "train", "cfg.toml", "--set", "trainer.max_duration=5ba"});
    INFO(first.out);
    REQUIRE(first.status == 0);
    // 5 batches of 64 = 320 samples seen; at a global batch of 96 that is 3 batches (288), so 32 come again.
    Result second = run_baton(dir, {"train", "cfg.toml", "--set", "data.batch_size=96", "--resume", "auto"});
    INFO(second.out);
    REQUIRE(second.status == 0);
    CHECK(second.out.find("32 of the 320 samples epoch 0 had seen are trained again") != std::string::npos);
  }

  TEST_CASE("backend = nccl on a CPU device is a configuration error before any rendezvous") {
    auto dir = baton::test::scratch_dir("dist-nccl-cpu");
    write_config(dir / "cfg.toml", "nccl", 32);
    Result r = run_baton(dir, {"launch", "--nproc", "2", "train", "cfg.toml", "--set", "distributed.backend=nccl"});
    INFO(r.out);
    CHECK(r.status != 0);
    // Whichever rank fails first is reported; the launcher then ends the other, which may not get to print.
    CHECK(r.out.find("] error: cfg.toml: distributed.backend: \"nccl\" reduces CUDA tensors, but "
                     "trainer.device is \"cpu\"") != std::string::npos);
    CHECK(r.out.find("exited with status 2") != std::string::npos);
    CHECK(r.out.find("rendezvous") == std::string::npos);
  }

  TEST_CASE("a rank killed mid-run: launch ends the others and fails naming the rank; zero3 too, mid all-gathers") {
    // zero3 all-gathers each unit in its forward and again in its backward: a kill lands amid its collectives.
    for (const std::string sharding : {"none", "zero3"}) {
      CAPTURE(sharding);
      auto dir = baton::test::scratch_dir("dist-kill-" + sharding);
      write_config(dir / "cfg.toml", "long", 8, "");
      // Long enough never to finish during the test; killed once training is under way (rank 0 prints progress
      // after the rendezvous).
      const KilledLaunch launch = launch_killing_rank1(
          dir, {"launch", "--nproc", "2", "train", "cfg.toml", "--set", "trainer.max_duration=100000ep", "--set",
                "trainer.log_interval=1ba", "--set", "distributed.sharding=" + sharding},
          [](const std::string& line) {
            return line.find("[rank 0] ") != std::string::npos && line.find("loss") != std::string::npos;
          });
      const std::string& out = launch.out;
      const int raw = launch.status;
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - launch.sent_at).count();
      INFO(out);
      REQUIRE(launch.sent);
      CHECK(WIFEXITED(raw));
      CHECK(WEXITSTATUS(raw) == 1);
      CHECK(out.find("baton launch: failed: rank 1 was killed by signal 9") != std::string::npos);
      MESSAGE("sharding " << sharding << ": launch ended " << seconds << " s after the kill");
      CHECK(seconds < 60);
    }
  }

  TEST_CASE("two launchers as two nodes (--nnodes 2, one rank each) end as one 2-rank launch does") {
    auto dir = baton::test::scratch_dir("dist-nodes");
    train_reference_launch(dir, "single", "nodes");
    const int port = baton::test::free_port();
    pid_t node0 = start_baton(dir, node_launch(0, port, {"train", "nodes.toml"}), dir / "node0.log");
    pid_t node1 = start_baton(dir, node_launch(1, port, {"train", "nodes.toml"}), dir / "node1.log");
    int status0 = wait_exit(node0, 300);
    int status1 = wait_exit(node1, 60);
    std::string log0 = file_text(dir / "node0.log"), log1 = file_text(dir / "node1.log");
    INFO("node 0:\n" << log0 << "\nnode 1:\n" << log1);
    REQUIRE(status0 == 0);
    REQUIRE(status1 == 0);
    CHECK(log0.find("[rank 0] trained to ep 2 ba 16") != std::string::npos);
    CHECK(log1.find("[rank 1] rank 1 of 2 done at ep 2 ba 16") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "runs" / "nodes" / "node1"));
    double max_diff = max_weight_difference(dir / "runs" / "single", dir / "runs" / "nodes");
    MESSAGE("max |w_single_launch - w_two_launchers| = " << max_diff);
    CHECK(max_diff == 0);
  }

  TEST_CASE("killing one node's launcher ends the other node's launch with a clear error") {
    auto dir = baton::test::scratch_dir("dist-node-killed");
    write_config(dir / "cfg.toml", "long", 8);
    const std::vector<std::string> train{"train", "cfg.toml", "--set", "trainer.max_duration=100000ep", "--set",
                                         "trainer.log_interval=1ba"};
    const int port = baton::test::free_port();
    pid_t node0 = start_baton(dir, node_launch(0, port, train), dir / "node0.log");
    pid_t node1 = start_baton(dir, node_launch(1, port, train), dir / "node1.log");
    // Training is under way once rank 0 has logged a loss.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (file_text(dir / "node0.log").find("loss") == std::string::npos &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::string log1 = file_text(dir / "node1.log");
    const std::string pid_line = "baton launch: rank 1 is pid ";
    REQUIRE(log1.find(pid_line) != std::string::npos);
    pid_t rank1 = std::atoi(log1.c_str() + log1.find(pid_line) + pid_line.size());
    REQUIRE(rank1 > 0);
    ::kill(node1, SIGKILL);
    auto killed = std::chrono::steady_clock::now();
    int status0 = wait_exit(node0, 90);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    wait_exit(node1, 5);
    if (status0 == -1) ::kill(node0, SIGKILL);
    std::string log0 = file_text(dir / "node0.log");
    INFO(log0);
    MESSAGE("node 0's launch ended " << seconds << " s after node 1's launcher was killed");
    CHECK(status0 == 1);
    CHECK(seconds < 60);
    // The rank says what happened to its peer, and the launcher names the rank that failed.
    CHECK(log0.find("[rank 0] error: distributed") != std::string::npos);
    CHECK(log0.find("a peer rank exited") != std::string::npos);
    CHECK(log0.find("baton launch: failed: rank 0 exited with status 1") != std::string::npos);
    // The killed launcher's rank went with it.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    CHECK_FALSE(alive(rank1));
  }

  TEST_CASE("usage errors of launch's node options exit 2 naming the option") {
    auto dir = baton::test::scratch_dir("dist-node-usage");
    write_config(dir / "cfg.toml", "usage", 32);
    Result no_port = run_baton(dir, {"launch", "--nproc", "1", "--nnodes", "2", "--node-rank", "1", "train",
                                     "cfg.toml"});
    CHECK(no_port.status == 2);
    CHECK(no_port.out.find("--nnodes 2 needs --master-addr and --master-port") != std::string::npos);
    Result bad_rank = run_baton(dir, {"launch", "--nproc", "1", "--nnodes", "2", "--node-rank", "2", "--master-addr",
                                      "127.0.0.1", "--master-port", "29999", "train", "cfg.toml"});
    CHECK(bad_rank.status == 2);
    CHECK(bad_rank.out.find("--node-rank 2 is not in [0, 1]") != std::string::npos);
  }

  TEST_CASE("under torchrun (or its variables set by hand) a run ends as under baton launch") {
    auto dir = baton::test::scratch_dir("dist-torchrun");
    train_reference_launch(dir, "launch", "torchrun");
    const int port = baton::test::free_port();
    if (python_torch_major() >= 2 && std::system("command -v torchrun > /dev/null 2>&1") == 0) {
      // torchrun's agent hosts the rendezvous store itself (TORCHELASTIC_USE_AGENT_STORE): rank 0 must join it.
      auto torchrun = [&](const std::string& launcher) {
        std::string command = "cd " + baton::test::shell_quote(dir.string()) + " && " + launcher +
                              " --nproc_per_node 2 --master_port " + std::to_string(port) + " --no_python " +
                              baton::test::shell_quote(BATON_EXECUTABLE) + " train torchrun.toml > torchrun.log 2>&1";
        int raw = std::system(command.c_str());
        return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
      };
      int status = torchrun("torchrun");
      if (status != 0 && file_text(dir / "torchrun.log").find("without libuv support") != std::string::npos) {
        // Debian 13's PyTorch is built without libuv yet defaults its store to it: its torchrun fails before
        // starting a worker. The same torchrun with the plain-socket store as its default:
        MESSAGE("this torchrun cannot serve its store without libuv: scripts/torchrun-without-libuv.py instead");
        status = torchrun(baton::test::shell_quote(std::string(BATON_SOURCE_DIR) +
                                                   "/scripts/torchrun-without-libuv.py"));
      }
      INFO(file_text(dir / "torchrun.log"));
      REQUIRE(status == 0);
    } else {
      // Debian 12's torchrun (1.13) fails under its Python before starting a worker: the same variables by hand.
      MESSAGE("no torchrun >= 2 here: the ranks get torchrun's variables by hand");
      std::vector<pid_t> ranks;
      for (int r = 0; r < 2; ++r)
        ranks.push_back(start_baton(dir, {"train", "torchrun.toml"}, dir / ("rank" + std::to_string(r) + ".log"),
                                    {"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
                                     "GROUP_RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2",
                                     "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)}));
      for (int r = 0; r < 2; ++r) {
        int status = wait_exit(ranks[r], 300);
        INFO(file_text(dir / ("rank" + std::to_string(r) + ".log")));
        REQUIRE(status == 0);
      }
    }
    double max_diff = max_weight_difference(dir / "runs" / "launch", dir / "runs" / "torchrun");
    MESSAGE("max |w_launch - w_torchrun| = " << max_diff);
    CHECK(max_diff == 0);
  }

  TEST_CASE("Ctrl-C to launch: rank 0 finishes its exports while the other rank has already exited 130") {
    auto dir = baton::test::scratch_dir("dist-interrupt");
    // Wide layers make rank 0's final checkpoint and export take a while after rank 1, which writes nothing, is
    // done: long enough for the launcher to end rank 0 if it took rank 1's 130 for a failure.
    write_config(dir / "cfg.toml", "wide", 8, "[checkpoint]\nsave_interval = \"1000ep\"\n");
    Interrupted r = launch_and_interrupt(dir, {"launch", "--nproc", "2", "train", "cfg.toml", "--set",
                                               "trainer.max_duration=1000ep", "--set", "trainer.log_interval=1ba",
                                               "--set", "model.widths=[4096,4096]"});
    INFO(r.out);
    REQUIRE(r.sent);
    CHECK(r.status == 130);
    CHECK(r.out.find("[rank 0] trained to ep") != std::string::npos);
    CHECK(r.out.find("stopped: interrupted by a signal") != std::string::npos);
    CHECK(r.out.find("ending the other ranks") == std::string::npos);
    CHECK(fs::exists(dir / "runs" / "wide" / "model.safetensors"));
    CHECK_FALSE(fs::exists(dir / "runs" / "wide" / "model.safetensors.tmp"));
    CHECK(fs::exists(dir / "runs" / "wide" / "eval_accuracy.svg"));
  }

  TEST_CASE("a signal to one rank alone: every rank stops after the same batch and reports the interrupt") {
    auto dir = baton::test::scratch_dir("dist-interrupt-one");
    write_config(dir / "cfg.toml", "one", 8, "");
    Interrupted r = launch_and_interrupt(dir, {"launch", "--nproc", "2", "train", "cfg.toml", "--set",
                                               "trainer.max_duration=1000ep", "--set", "trainer.log_interval=1ba"},
                                         /*rank=*/1);
    INFO(r.out);
    REQUIRE(r.sent);
    CHECK(r.status == 130);
    // Rank 0 had no signal of its own: it learns of rank 1's when the ranks agree to stop.
    CHECK(r.out.find("[rank 0] trained to ep") != std::string::npos);
    CHECK(r.out.find("stopped: interrupted by a signal") != std::string::npos);
    CHECK(r.out.find("another rank stopped") == std::string::npos);
    CHECK(fs::exists(dir / "runs" / "one" / "model.safetensors"));
  }

  TEST_CASE("trainer.time_limit over 2 ranks: both stop after the same batch with a checkpoint, and exit 0") {
    auto dir = baton::test::scratch_dir("dist-time-limit");
    write_config(dir / "cfg.toml", "limited", 8, "");
    Result r = run_baton(dir, {"launch", "--nproc", "2", "train", "cfg.toml", "--set", "trainer.max_duration=1000ep",
                               "--set", "trainer.time_limit=3s"});
    INFO(r.out);
    REQUIRE(r.status == 0);
    const std::size_t at = r.out.find("[rank 0] trained to ");
    REQUIRE(at != std::string::npos);
    const std::string when = r.out.substr(at + 20, r.out.find(" in ", at) - at - 20);  // "ep 3 ba 97"
    CHECK(r.out.find("[rank 1] rank 1 of 2 done at " + when) != std::string::npos);
    // The rank whose clock runs out first says why; the other learns it at the same check.
    CHECK((r.out.find("stopped: trainer.time_limit 3s: stopped after") != std::string::npos ||
           r.out.find("stopped: another rank reached trainer.time_limit") != std::string::npos));
    const std::string batch = when.substr(when.find("ba ") + 3);
    CHECK((fs::exists(dir / "runs" / "limited" / "checkpoints" / ("ba" + batch)) ||
           fs::exists(dir / "runs" / "limited" / "checkpoints" / ("ep" + when.substr(3, when.find(' ', 3) - 3)))));
  }

  TEST_CASE("issue 38: zero1, zero2 and zero3 over 2 ranks end with sharding none's weights: SGD momentum, Adam, EMA") {
    auto dir = baton::test::scratch_dir("dist-zero");
    const std::vector<std::pair<std::string, std::string>> optimizers = {
        {"sgd", "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\nweight_decay = 0.001\n"},
        {"adam", "name = \"adam\"\nlr = 0.01\n"}};
    const fs::path runs = dir / "runs";
    for (const auto& entry : optimizers) {
      const std::string optimizer = entry.first;
      const std::string table = entry.second;
      for (const std::string mode : {"none", "zero1", "zero2", "zero3"}) {
        const std::string name = optimizer + "-" + mode;
        write_sharded_config(dir / (name + ".toml"), name, mode, table);
        Result r = run_baton(dir, {"launch", "--nproc", "2", "train", name + ".toml"});
        INFO(r.out);
        REQUIRE(r.status == 0);
        CHECK(r.out.find("[rank 1] rank 1 of 2 done at ep 2 ba 16") != std::string::npos);
      }
      for (const std::string mode : {"zero1", "zero2", "zero3"}) {
        const double relative = max_relative_difference(runs / (optimizer + "-" + mode), runs / (optimizer + "-none"));
        MESSAGE(optimizer << " " << mode << ": max relative difference to sharding none = " << relative);
        CHECK(relative <= 1e-6);
      }
    }
    // The EMA reads the weights after the step, whole again after the all-gather (zero3: this rank's rows of them in
    // the shards, the parameters being released); microbatches accumulate in the model's .grad and are reduced once
    // after the last (zero2 releases them then; zero3 reduces each unit in each microbatch's backward).
    for (const std::string mode : {"none", "zero2", "zero3"}) {
      write_sharded_config(dir / ("ema-" + mode + ".toml"), "ema-" + mode, mode,
                           "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n", kEma);
      Result r = run_baton(dir, {"launch", "--nproc", "2", "train", "ema-" + mode + ".toml", "--set",
                                 "trainer.microbatch_size=8"});
      INFO(r.out);
      REQUIRE(r.status == 0);
    }
    for (const std::string mode : {"zero2", "zero3"}) {
      const double weights = max_relative_difference(runs / ("ema-" + mode), runs / "ema-none");
      const double averaged = max_relative_difference(runs / ("ema-" + mode), runs / "ema-none", "ema.safetensors");
      MESSAGE(mode << " with the EMA and microbatches: weights " << weights << ", EMA " << averaged);
      CHECK(weights <= 1e-6);
      CHECK(averaged <= 1e-6);
    }

    // Gradient clipping acts on what the optimizer steps: under zero2 each rank's shard of the averaged gradients,
    // by the global norm (the ranks' squares summed; a rank's own norm would clip less) or element by element. A
    // threshold below the gradients' norm, so every step is clipped: the run then differs from sgd-none's.
    for (const std::string type : {"norm", "value"}) {
      for (const std::string mode : {"none", "zero2", "zero3"}) {
        const std::string name = "clip-" + type + "-" + mode;
        write_sharded_config(dir / (name + ".toml"), name, mode, optimizers.front().second,
                             "[[plugins]]\nname = \"gradient_clipping\"\nclipping_type = \"" + type +
                                 "\"\nclipping_threshold = " + (type == "norm" ? "0.05" : "0.002") + "\n");
        Result r = run_baton(dir, {"launch", "--nproc", "2", "train", name + ".toml"});
        INFO(r.out);
        REQUIRE(r.status == 0);
      }
      const double sharded = max_relative_difference(runs / ("clip-" + type + "-zero2"), runs / ("clip-" + type + "-none"));
      const double zero3 = max_relative_difference(runs / ("clip-" + type + "-zero3"), runs / ("clip-" + type + "-none"));
      const double clipped = max_relative_difference(runs / ("clip-" + type + "-none"), runs / "sgd-none");
      MESSAGE("clipping by " << type << ": zero2 to none " << sharded << ", zero3 to none " << zero3
                             << ", clipped to unclipped " << clipped);
      CHECK(sharded <= 1e-5);
      CHECK(zero3 <= 1e-5);
      CHECK(clipped > 1e-2);
    }
  }

  TEST_CASE("issue 38: post-hoc EMA profiles on each rank's rows (none, zero2, zero3) snapshot rank 0's whole ones") {
    auto dir = baton::test::scratch_dir("dist-posthoc");
    const fs::path runs = dir / "runs";
    const std::string sgd = "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n";
    const std::string posthoc = kEma + "posthoc = { sigma_rels = [0.05, 0.1], snapshot_every = \"8ba\" }\n";
    const auto train = [&](const std::string& name, std::vector<std::string> more = {}) {
      std::vector<std::string> args = {"launch", "--nproc", "2", "train", name + ".toml"};
      args.insert(args.end(), more.begin(), more.end());
      Result r = run_baton(dir, args);
      INFO(r.out);
      REQUIRE(r.status == 0);
      return r.out;
    };
    // The reference: profiles over whole weights, rank 0's alone (sharded = false, the layout before sharding).
    write_sharded_config(dir / "whole.toml", "whole", "none", sgd, posthoc + "sharded = false\n");
    train("whole");
    const std::vector<std::string> snapshots = {"sigma0.05_0000000008.safetensors", "sigma0.1_0000000008.safetensors",
                                                "sigma0.05_0000000016.safetensors", "sigma0.1_0000000016.safetensors"};
    for (const std::string mode : {"none", "zero2", "zero3"}) {
      write_sharded_config(dir / (mode + ".toml"), mode, mode, sgd, posthoc);
      const std::string out = train(mode);
      // Each rank's share: 25,450 fp32 elements of the mlp, 12,725 rows' worth on each rank, per profile.
      CHECK(out.find("[rank 0] ema: post-hoc EMA profiles sigma0.05 (gamma") != std::string::npos);
      for (const auto& file : snapshots) {
        CAPTURE(mode);
        CAPTURE(file);
        REQUIRE(fs::exists(runs / mode / "posthoc" / file));
        const double relative =
            max_relative_difference(runs / mode, runs / "whole", (fs::path("posthoc") / file).string());
        if (mode == "none") CHECK(relative == 0);  // the same weights, the same kernel on rows: bit for bit
        else CHECK(relative <= 1e-6);
      }
    }
    // A sharded run's profiles resume from its checkpoint (each rank's rows of every profile in ema/, beside the
    // average's, read back by rows): the last snapshots are the uninterrupted run's, bit for bit.
    write_sharded_config(dir / "split.toml", "split", "zero3", sgd, posthoc);
    train("split", {"--set", "trainer.max_duration=1ep", "--set", "checkpoint.save_interval=1ep"});
    int profile_tensors = 0;
    for (const auto& [name, tensor] : assemble(runs / "split" / "checkpoints" / "ep1" / "ema"))
      profile_tensors += name.rfind("posthoc/", 0) == 0;
    CHECK(profile_tensors == 2 * 4);  // 2 profiles of the mlp's 4 tensors
    train("split", {"--set", "checkpoint.save_interval=1ep", "--resume", "auto"});
    for (const auto& file : {snapshots[2], snapshots[3]})
      CHECK(max_relative_difference(runs / "split", runs / "zero3", (fs::path("posthoc") / file).string()) == 0);
  }

  TEST_CASE("issue 38: baton check and train refuse what a sharded run cannot do, naming the key or plugin") {
    auto dir = baton::test::scratch_dir("dist-zero-refused");
    const std::string sgd = "name = \"sgd\"\nlr = 0.05\n";
    // zero3's units name modules of the model, under zero3 only.
    write_sharded_config(dir / "units.toml", "units", "zero2", sgd, "units = [\"layers.0\"]\n");
    write_sharded_config(dir / "typo.toml", "typo", "zero3", sgd, "units = [\"layers.0\", \"layer.2\"]\n");
    for (const std::string command : {"check", "train"}) {
      Result units = run_baton(dir, {command, "units.toml"});
      INFO(units.out);
      CHECK(units.status == 2);
      CHECK(units.out.find("distributed.units: units are gathered one at a time under sharding = \"zero3\" only; this "
                           "run's is \"zero2\"") != std::string::npos);
      Result typo = run_baton(dir, {command, "typo.toml"});
      INFO(typo.out);
      CHECK(typo.status != 0);
      CHECK(typo.out.find("unit 'layer.2' is no sub-module of the model (modules with parameters: layers.0, layers.2)") !=
            std::string::npos);
    }
    // A plugin that needs the whole gradients after the reduce (adaptive clipping: a vector's unit spans ranks).
    write_sharded_config(dir / "clip.toml", "clip", "zero2", sgd,
                         "[[plugins]]\nname = \"gradient_clipping\"\nclipping_type = \"adaptive\"\n"
                         "clipping_threshold = 1.0\n");
    for (const std::string command : {"check", "train"}) {
      Result r = run_baton(dir, {command, "clip.toml"});
      INFO(r.out);
      CHECK(r.status != 0);
      CHECK(r.out.find("plugin 'gradient_clipping' does not work under distributed.sharding = \"zero2\": it clips "
                       "adaptively per unit, and a vector's unit spans ranks") != std::string::npos);
    }
    // The same plugin without sharding passes the check.
    write_sharded_config(dir / "clip-none.toml", "clip-none", "none", sgd,
                         "[[plugins]]\nname = \"gradient_clipping\"\nclipping_type = \"adaptive\"\n"
                         "clipping_threshold = 1.0\n");
    Result unsharded = run_baton(dir, {"check", "clip-none.toml"});
    INFO(unsharded.out);
    CHECK(unsharded.status == 0);
  }

  TEST_CASE("issue 38: rank 1 killed while zero2 saves every batch: the resume continues bitwise from a whole save") {
    auto dir = baton::test::scratch_dir("dist-zero-kill");
    const std::string sgd = "name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n";
    for (const std::string name : {"straight", "killed"})
      write_sharded_config(dir / (name + ".toml"), name, "zero2", sgd, kEma);
    const std::vector<std::string> every_batch = {"--set", "checkpoint.save_interval=1ba", "--set",
                                                  "checkpoint.keep_last=0"};
    std::vector<std::string> straight = {"launch", "--nproc", "2", "train", "straight.toml"};
    straight.insert(straight.end(), every_batch.begin(), every_batch.end());
    Result reference = run_baton(dir, straight);
    INFO(reference.out);
    REQUIRE(reference.status == 0);

    // Rank 1 is killed as soon as rank 0 reports the 5th save: it is then training or saving the 6th batch.
    std::vector<std::string> killed = {"launch", "--nproc", "2", "train", "killed.toml"};
    killed.insert(killed.end(), every_batch.begin(), every_batch.end());
    const KilledLaunch launch = launch_killing_rank1(dir, killed, [](const std::string& line) {
      return line.find("checkpoint runs/killed/checkpoints/ba5 ") != std::string::npos;
    });
    const std::string& out = launch.out;
    INFO(out);
    REQUIRE(launch.sent);
    CHECK(WEXITSTATUS(launch.status) == 1);
    CHECK(out.find("baton launch: failed: rank 1 was killed by signal 9") != std::string::npos);
    // Only committed checkpoints are visible; a save that was under way is at most a hidden folder.
    const fs::path checkpoints = dir / "runs" / "killed" / "checkpoints";
    std::string folders;
    for (const auto& entry : fs::directory_iterator(checkpoints)) {
      const std::string folder = entry.path().filename().string();
      folders += " " + folder;
      if (folder.front() != '.') CHECK(fs::exists(entry.path() / "meta.json"));
    }
    MESSAGE("after the kill, the checkpoint folder holds:" << folders);
    std::vector<std::string> resume = {"launch", "--nproc", "2", "train", "killed.toml", "--resume", "auto"};
    resume.insert(resume.end(), every_batch.begin(), every_batch.end());
    Result resumed = run_baton(dir, resume);
    INFO(resumed.out);
    REQUIRE(resumed.status == 0);
    const std::size_t from = resumed.out.find("[rank 0] resumed from runs/killed/checkpoints/ba");
    REQUIRE(from != std::string::npos);
    MESSAGE(resumed.out.substr(from, resumed.out.find('\n', from) - from));
    const fs::path runs = dir / "runs";
    CHECK(max_relative_difference(runs / "killed", runs / "straight") == 0);
    CHECK(max_relative_difference(runs / "killed", runs / "straight", "ema.safetensors") == 0);
  }

  TEST_CASE("issue 38: a zero2 run over 2 ranks resumed from its shard files ends bitwise as the uninterrupted one") {
    auto dir = baton::test::scratch_dir("dist-zero-resume");
    const std::string adam = "name = \"adam\"\nlr = 0.01\n";
    // The EMA selects the best checkpoint: best/ema.safetensors is put together from its ema/ folder of rows.
    const std::string select = "select = { metric = \"eval/accuracy\", mode = \"max\", keep = 1 }\n";
    for (const std::string name : {"straight", "resumed"})
      write_sharded_config(dir / (name + ".toml"), name, "zero2", adam, kEma + select);
    const std::vector<std::string> saving = {"--set", "checkpoint.save_interval=1ep"};
    const auto launch = [&](std::vector<std::string> args) {
      std::vector<std::string> all = {"launch", "--nproc", "2", "train"};
      all.insert(all.end(), args.begin(), args.end());
      all.insert(all.end(), saving.begin(), saving.end());
      Result r = run_baton(dir, all);
      INFO(r.out);
      REQUIRE(r.status == 0);
      return r.out;
    };
    launch({"straight.toml"});
    launch({"resumed.toml", "--set", "trainer.max_duration=1ep"});
    const std::string out = launch({"resumed.toml", "--resume", "auto"});
    CHECK(out.find("[rank 0] resumed from runs/resumed/checkpoints/ep1 at ep 1 ba 8") != std::string::npos);
    const fs::path runs = dir / "runs";
    CHECK(max_relative_difference(runs / "resumed", runs / "straight") == 0);
    CHECK(max_relative_difference(runs / "resumed", runs / "straight", "ema.safetensors") == 0);
    const fs::path best = runs / "straight" / "best";
    REQUIRE(fs::exists(best / "ema.safetensors"));
    int copies = 0;
    for (const auto& entry : fs::directory_iterator(best)) {
      if (!entry.is_directory()) continue;
      ++copies;
      CHECK_FALSE(fs::exists(entry.path() / "ema.safetensors"));
      CHECK(max_difference_to_rows(best / "ema.safetensors", entry.path() / "ema") == 0);
    }
    CHECK(copies == 1);
    CHECK(max_relative_difference(runs / "resumed" / "best", best, "ema.safetensors") == 0);
    // Each rank wrote its own files into the checkpoint's model/, optimizer/ and ema/ folders.
    for (const std::string kind : {"model", "optimizer", "ema"})
      for (const std::string rank : {"00001", "00002"})
        CHECK(fs::exists(runs / "resumed" / "checkpoints" / "ep1" / kind /
                         ("shard-" + rank + "-model-00001-of-00001.safetensors")));
  }

  TEST_CASE("issue 39: rank 1 killed at 30 random moments of a zero2 run saving every batch: never a half visible "
            "checkpoint, and the newest resumes on both ranks, bitwise") {
    auto dir = baton::test::scratch_dir("dist-kill-random");
    const std::string adam = "name = \"adam\"\nlr = 0.01\n";
    const std::vector<std::string> every_batch = {"--set", "checkpoint.save_interval=1ba", "--set",
                                                  "checkpoint.keep_last=0", "--set", "trainer.eval_interval=0ep"};
    write_sharded_config(dir / "straight.toml", "straight", "zero2", adam, kEma);
    // The reference goes one batch further than the trials, so that a trial killed after its last save resumes too.
    std::vector<std::string> straight = {"launch", "--nproc", "2", "train", "straight.toml", "--set",
                                         "trainer.max_duration=17ba"};
    straight.insert(straight.end(), every_batch.begin(), every_batch.end());
    // The clock starts at rank 0's first save; the reference run (never killed) says how long the saving lasts.
    const auto first_save = [](const std::string& name) {
      return [name](const std::string& line) {
        return line.find("[rank 0] checkpoint runs/" + name + "/checkpoints/ba1 ") != std::string::npos;
      };
    };
    const TimedKill reference = launch_killing_rank1_after(dir, straight, first_save("straight"), std::chrono::hours(1));
    INFO(reference.launch.out);
    REQUIRE(reference.launch.status == 0);
    REQUIRE_FALSE(reference.launch.sent);
    const double run_ms =
        std::chrono::duration<double, std::milli>(reference.ended_at - reference.triggered_at).count();
    const fs::path saved = dir / "runs" / "straight" / "checkpoints";
    // The trials' 16 batches (2 epochs of 8): a save after every one. Kill moments spread over the saves, drawn from a
    // fixed seed.
    std::mt19937 draw(39);
    std::uniform_real_distribution<double> moment(0.0, 0.65 * run_ms);  // the run's end and export follow the saves
    int killed = 0, attempts = 0, resumed = 0, mid_save = 0;
    std::map<int, int> newest_seen;
    while (killed < 30 && attempts < 45) {
      ++attempts;
      const std::string name = "k" + std::to_string(attempts);
      write_sharded_config(dir / (name + ".toml"), name, "zero2", adam, kEma);
      std::vector<std::string> args = {"launch", "--nproc", "2", "train", name + ".toml"};
      args.insert(args.end(), every_batch.begin(), every_batch.end());
      const auto delay = std::chrono::milliseconds(static_cast<int>(moment(draw)));
      const KilledLaunch launch = launch_killing_rank1_after(dir, args, first_save(name), delay).launch;
      INFO("trial " << name << ", kill " << delay.count() << " ms after the first save\n" << launch.out);
      if (!launch.sent || WEXITSTATUS(launch.status) == 0) continue;  // the run ended first
      ++killed;
      CHECK(launch.out.find("rank 1 was killed by signal 9") != std::string::npos);
      // Every visible folder is a whole checkpoint; a save under way is at most a hidden one.
      const fs::path checkpoints = dir / "runs" / name / "checkpoints";
      int newest = -1;
      bool partial = false;
      if (fs::exists(checkpoints))
        for (const auto& entry : fs::directory_iterator(checkpoints)) {
          const std::string folder = entry.path().filename().string();
          partial = partial || folder.front() == '.';
          if (folder.front() == '.') continue;
          CHECK(fs::exists(entry.path() / "meta.json"));
          REQUIRE(folder.rfind("ba", 0) == 0);
          newest = std::max(newest, std::atoi(folder.c_str() + 2));
        }
      ++newest_seen[newest];
      mid_save += partial;
      if (newest < 1) continue;
      const std::string newest_name = "ba" + std::to_string(newest);
      Result verified = run_baton(dir, {"checkpoint", "info", "runs/" + name + "/checkpoints/" + newest_name, "--verify"});
      CHECK_MESSAGE(verified.status == 0, verified.out);
      // The newest resumes on both ranks and its next batch and save are the uninterrupted run's, bit for bit.
      const std::string next = "ba" + std::to_string(newest + 1);
      std::vector<std::string> resume = {"launch", "--nproc", "2", "train", name + ".toml", "--resume", "auto",
                                         "--set", "trainer.max_duration=" + std::to_string(newest + 1) + "ba"};
      resume.insert(resume.end(), every_batch.begin(), every_batch.end());
      Result again = run_baton(dir, resume);
      INFO(again.out);
      REQUIRE(again.status == 0);
      CHECK(again.out.find("[rank 0] resumed from runs/" + name + "/checkpoints/" + newest_name + " ") != std::string::npos);
      CHECK(again.out.find("skipping") == std::string::npos);
      for (const std::string kind : {"model", "optimizer", "ema"})
        CHECK(max_state_difference(checkpoints / next / kind, saved / next / kind) == 0);
      ++resumed;
      fs::remove_all(dir / "runs" / name);
    }
    std::string spread;
    for (const auto& [newest, n] : newest_seen) spread += " ba" + std::to_string(newest) + " x" + std::to_string(n);
    MESSAGE(killed << " kills in " << attempts << " runs (the reference's saves took " << run_ms << " ms), "
                   << mid_save << " during a save (a hidden partial folder left), " << resumed
                   << " resumed bitwise; newest checkpoint after the kill:" << spread);
    CHECK(killed >= 30);
    CHECK(resumed >= 25);
  }

  TEST_CASE("issue 39: zero2 saved at 2 ranks mid-epoch resumes at 3 (zero2, zero3) and at 1 with the global batch "
            "fixed: weights, Adam state and EMA as the uninterrupted run's, the same samples, each rank reading about "
            "its shard") {
    auto dir = baton::test::scratch_dir("dist-reshard");
    const fs::path runs = dir / "runs";
    // 20 batches of 96 an epoch: batch 50 is the middle of epoch 3.
    const auto config = [&](const std::string& name, int batch_size, const std::string& sharding = "zero2") {
      std::ofstream(dir / (name + ".toml"))
          << "[run]\nname = \"" << name << "\"\ndir = \"runs\"\nseed = 7\n"
          << "[data]\nname = \"synthetic\"\ntrain_size = 1920\neval_size = 200\nbatch_size = " << batch_size
          << "\neval_batch_size = 100\n"
          << "[model]\nname = \"mlp\"\nwidths = [64]\n"
          << "[optimizer]\nname = \"adam\"\nlr = 0.0005\n"
          << "[trainer]\nprecision = \"fp32\"\nmax_duration = \"100ba\"\neval_interval = \"0ep\"\nthreads = 1\n"
          << "progress = false\n"
          << "[checkpoint]\nsave_interval = \"50ba\"\nkeep_last = 0\n"
          << "[distributed]\ntimeout_seconds = 30\nsharding = \"" << sharding << "\"\n"
          << "[[plugins]]\nname = \"ema\"\nhalf_life = \"8ba\"\n"
          << "[[plugins]]\npath = \"" << BATON_TEST_PLUGIN_DIR << "/fixture_sample_log.so\"\n";
    };
    config("straight", 48);
    config("three", 32);
    config("one", 96);
    config("three-zero3", 32, "zero3");
    config("three-zero1", 32, "zero1");
    Result straight = run_baton(dir, {"launch", "--nproc", "2", "train", "straight.toml"});
    INFO(straight.out);
    REQUIRE(straight.status == 0);
    const std::string ba50 = "runs/straight/checkpoints/ba50";
    Result three = run_baton(dir, {"launch", "--nproc", "3", "train", "three.toml", "--resume", ba50});
    INFO(three.out);
    REQUIRE(three.status == 0);
    CHECK(three.out.find("[rank 0] resumed from " + ba50 + " at ep 2 ba 50") != std::string::npos);
    Result one = run_baton(dir, {"train", "one.toml", "--resume", ba50});
    INFO(one.out);
    REQUIRE(one.status == 0);
    // zero3 keeps the same shards: the zero2 checkpoint resumes under it at 3 ranks alike.
    Result zero3 = run_baton(dir, {"launch", "--nproc", "3", "train", "three-zero3.toml", "--resume", ba50});
    INFO(zero3.out);
    REQUIRE(zero3.status == 0);
    // zero1 (optimizer state sharded, the weights whole on every rank) reads the same files.
    Result zero1 = run_baton(dir, {"launch", "--nproc", "3", "train", "three-zero1.toml", "--resume", ba50});
    INFO(zero1.out);
    REQUIRE(zero1.status == 0);

    // The EMA, sharded as the run is, was saved as each rank's rows in ema/ (no gather, no ema.safetensors).
    const fs::path saved = runs / "straight" / "checkpoints" / "ba50";
    CHECK_FALSE(fs::exists(saved / "ema.safetensors"));
    for (const std::string kind : {"model", "optimizer", "ema"})
      for (const std::string rank : {"00001", "00002"})
        CHECK(fs::exists(saved / kind / ("shard-" + rank + "-model-00001-of-00001.safetensors")));

    for (const std::string run : {"three", "one", "three-zero3", "three-zero1"}) {
      const double weights = max_relative_difference(runs / run, runs / "straight");
      const double ema = max_relative_difference(runs / run, runs / "straight", "ema.safetensors");
      const double adam = max_state_difference(runs / run / "checkpoints" / "ba100" / "optimizer",
                                               runs / "straight" / "checkpoints" / "ba100" / "optimizer");
      MESSAGE("resumed as run " << run << ": weights " << weights << ", EMA " << ema << ", Adam state " << adam
                            << " (max relative difference to the uninterrupted 2-rank run)");
      CHECK(weights <= 1e-5);
      CHECK(ema <= 1e-5);
      CHECK(adam <= 1e-5);
      // Every batch from 50 on held the samples the uninterrupted run's did.
      const auto seen = samples_by_batch(runs / run);
      auto expected = samples_by_batch(runs / "straight");
      expected.erase(expected.begin(), expected.lower_bound(50));
      CHECK(seen.size() == 50);
      CHECK(seen == expected);
    }
    // The EMA at ba50 as a model's weights (model.init of the checkpoint's EMA, put together from ema/): one step at
    // lr 1e-30 leaves them as they are, equal to the rows the two ranks wrote (assembled here from the files' offsets).
    Result from_ema = run_baton(dir, {"train", "one.toml", "--set", "run.name=from-ema", "--set", "model.init=" + ba50,
                                      "--set", "model.init_weights=ema", "--set", "optimizer.lr=1e-30", "--set",
                                      "trainer.max_duration=1ba", "--set", "checkpoint.save_interval=0ep"});
    INFO(from_ema.out);
    REQUIRE(from_ema.status == 0);
    CHECK(from_ema.out.find("its EMA weights, the ranks' rows in ema/") != std::string::npos);
    CHECK(max_difference_to_rows(runs / "from-ema" / "model.safetensors", saved / "ema") == 0);
    // Each of the 3 ranks read from the 2 ranks' files little more than the rows of its own shard.
    const std::size_t line = three.out.find("[rank 0] shard files of " + ba50 + " read in parts: ");
    REQUIRE(line != std::string::npos);
    const std::string report = three.out.substr(line, three.out.find('\n', line) - line);
    MESSAGE(report);
    // `baton checkpoint info` plans the same reads from the files' headers alone, byte for byte.
    Result info = run_baton(dir, {"checkpoint", "info", ba50, "--world", "3"});
    INFO(info.out);
    REQUIRE(info.status == 0);
    CHECK(info.out.find("written by 2 rank(s), sharding zero2, batch size 48 per rank (global 96)") !=
          std::string::npos);
    const std::string measured = report.substr(report.find("read in parts: ") + 15);
    CHECK(info.out.find("a sharded resume at 3 rank(s): " + measured + "\n") != std::string::npos);
    int reports = 0;
    for (std::size_t at = report.find(" ("); at != std::string::npos; at = report.find(" (", at + 1)) {
      const double ratio = std::atof(report.c_str() + at + 2);
      ++reports;
      CHECK(ratio >= 1.0);
      CHECK(ratio <= 1.2);
    }
    CHECK(reports == 3);
  }
}
