// The mlflow logger against a real MLflow tracking server (`mlflow server` with a SQLite store and its artifact
// proxy, from MLflow's packages on the Python package registry, installed into a venv of the build folder on first
// use), read back with MLflow's own client (read_mlflow.py): every value of metrics.jsonl at its step, parameters
// from the resolved config, images and config.toml as artifacts, the run's status and error, a resumed run
// continuing its MLflow run with no step twice; an unreachable server refused at fit start; its keys; the config
// flattened into parameters.
#include "baton_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/image.h"
#include "baton/logger_destination.h"
#include "baton_command.h"
#include "logger_test_support.h"
#include "pip_venv.h"
#include "plugin_files.h"
#include "run_params.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace mlflow_test {

namespace fs = std::filesystem;
using baton::test::read_bytes;
using baton::test::run_baton;
using baton::test::run_in;
using baton::test::scratch_dir;
using baton::test::shell_quote;
using logger_test::write;
using nlohmann::json;

namespace {

// What `mlflow server` needs beyond mlflow-skinny (which holds the client and the server's code but not all its
// imports); MLflow's full package brings ~850 MB of machine-learning libraries the server does not use.
const char* const kPackages = "mlflow-skinny==3.17.2 flask flask-cors sqlalchemy alembic aiohttp huey numpy pandas";

// The venv with MLflow, made with pip on first use (once per process) and kept in the build folder. Nothing when
// pip fails (no registry): the server tests are skipped with pip's reason, or fail under BATON_TEST_REQUIRE_MLFLOW=1
// (CI, which reaches the registry).
std::optional<fs::path> mlflow_venv() {
  static const std::optional<fs::path> venv =
      baton::test::pip_venv(MLFLOW_VENV, MLFLOW_PYTHON, kPackages, "import mlflow, flask, sqlalchemy, pandas",
                            "BATON_TEST_REQUIRE_MLFLOW", "the tests that need an MLflow server are skipped");
  return venv;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t size = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

// `mlflow server` on a free port of 127.0.0.1 with a SQLite store and the artifact proxy, in a session of its own
// so that its workers stop with it.
struct Server {
  fs::path venv;
  fs::path artifacts;  // the server's artifact folder
  std::string uri;
  int pid = -1;

  ~Server() {
    if (pid <= 0) return;
    ::kill(-pid, SIGTERM);
    for (int i = 0; i < 50 && ::waitpid(pid, nullptr, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(-pid, SIGKILL);  // whatever of its session is left
    ::waitpid(pid, nullptr, WNOHANG);
  }
};

const Server* server() {
  static std::optional<Server> running;
  static bool tried = false;
  if (tried) return running ? &*running : nullptr;
  tried = true;
  const auto venv = mlflow_venv();
  if (!venv) return nullptr;
  const fs::path dir = scratch_dir("mlflow_server");
  const int port = free_port();
  const std::string mlflow_program = (*venv / "bin" / "mlflow").string();
  const std::vector<std::string> args = {mlflow_program, "server", "--backend-store-uri",
                                         "sqlite:///" + (dir / "store.db").string(), "--artifacts-destination",
                                         (dir / "artifacts").string(), "--host", "127.0.0.1", "--port",
                                         std::to_string(port), "--workers", "1"};
  const std::string log = (dir / "server.log").string();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setsid();
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::setenv("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false", 1);  // no background job workers
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  running.emplace();
  running->venv = *venv;
  running->artifacts = dir / "artifacts";
  running->pid = pid;
  running->uri = "http://127.0.0.1:" + std::to_string(port);
  const std::string health = shell_quote((*venv / "bin" / "python").string()) +
                             " -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' " +
                             shell_quote(running->uri + "/health");
  for (int second = 0; second < 120; ++second) {
    if (run_in(dir, health).status == 0) return &*running;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  FAIL("mlflow server did not answer within 120 s: " << read_bytes(log));
  return nullptr;
}

// read_mlflow.py's report of the run named `run` in `experiment` (compared with `folder`'s metrics.jsonl when
// given); fails the test with the script's reason when it finds a difference.
json read_run(const Server& at, const std::string& experiment, const std::string& run, const fs::path& folder = {}) {
  const fs::path dir = scratch_dir("mlflow_read");
  std::string command = shell_quote((at.venv / "bin" / "python").string()) + " " + shell_quote(MLFLOW_CHECK_SCRIPT) +
                        " " + shell_quote(at.uri) + " " + shell_quote(experiment) + " " + shell_quote(run);
  if (!folder.empty()) command += " " + shell_quote(folder.string());
  const auto read = run_in(dir, command);
  REQUIRE_MESSAGE(read.status == 0, read.err << read.out);
  return json::parse(read.out);
}

std::string run_config(const std::string& name, const std::string& duration, const std::string& uri) {
  return logger_test::small_run(name, duration, "mlflow") + "tracking_uri = \"" + uri +
         "\"\nexperiment_name = \"baton-test\"\nflush_interval = \"0s\"\ntags = { team = \"vision\" }\n";
}

std::string config_error(const std::string& toml) {
  return logger_test::config_error(baton::test::plugin_file("mlflow"), "mlflow", toml);
}

}  // namespace

TEST_CASE("mlflow: its keys are checked") {
  ::unsetenv("MLFLOW_TRACKING_URI");
  CHECK(config_error("").find("loggers.0.tracking_uri") != std::string::npos);
  CHECK(config_error("tracking_uri = \"file:./mlruns\"").find("http://") != std::string::npos);
  CHECK(config_error("tracking_uri = \"http://h:5000\"\nexperiment = \"x\"").find("experiment") !=
        std::string::npos);
  CHECK(config_error("tracking_uri = \"http://h:5000\"\nflush_interval = \"5ba\"").find("flush_interval") !=
        std::string::npos);
  CHECK(config_error("tracking_uri = \"http://h:5000\"\ntags = { team = 3 }").find("team") != std::string::npos);
  CHECK(config_error("tracking_uri = \"https://h/mlflow\"\nexperiment_name = \"e\"\nrun_name = \"r\"\n"
                     "tags = { team = \"vision\" }\nflush_interval = \"1min\"\nlog_config = false") == "");
  ::setenv("MLFLOW_TRACKING_URI", "http://from-env:5000", 1);
  CHECK(config_error("") == "");
  ::unsetenv("MLFLOW_TRACKING_URI");
}

TEST_CASE("mlflow: the config's values as parameters, named by their paths") {
  const auto params = baton_mlflow::run_params(R"(
[optimizer]
name = "adamw"
lr = 0.001
betas = [0.9, 0.999]
[trainer]
max_duration = "2ep"
amp = false
[[plugins]]
name = "ema"
half_life = "2ba"
[[plugins]]
name = "nan_monitor"
[[eval]]
name = "a"
[[eval]]
name = "a"
every = 3
)");
  REQUIRE(params);
  const std::map<std::string, std::string> got(params->begin(), params->end());
  CHECK(got.size() == params->size());
  CHECK(got.at("optimizer.name") == "adamw");
  CHECK(got.at("optimizer.lr") == "0.001");
  CHECK(got.at("optimizer.betas").find("0.9") != std::string::npos);
  CHECK(got.at("optimizer.betas").find("0.999") != std::string::npos);
  CHECK(got.at("trainer.max_duration") == "2ep");
  CHECK(got.at("trainer.amp") == "false");
  CHECK(got.at("plugins.ema.half_life") == "2ba");  // named entries by name
  CHECK(got.count("plugins.nan_monitor") == 1);     // a plugin without keys is still listed
  CHECK(got.at("eval.0.name") == "a");              // the same name twice: by position
  CHECK(got.at("eval.1.every") == "3");
  CHECK(got.size() == 10);
  CHECK_FALSE(baton_mlflow::run_params("not = toml = at all"));
  CHECK_FALSE(baton_mlflow::run_params(""));
  const auto cut = baton_mlflow::run_params("text = \"" + std::string(7000, 'x') + "\"");
  REQUIRE(cut);
  CHECK(cut->at(0).second.size() == 6000);  // MLflow's longest parameter value
}

TEST_CASE("mlflow: a trained run on a tracking server, read back with MLflow's client") {
  const Server* mlflow = server();
  if (mlflow == nullptr) return;
  const fs::path dir = scratch_dir("mlflow_run");
  write(dir / "run.toml", run_config("whole", "2ep", mlflow->uri));
  const auto check = run_baton(dir, {"check", "run.toml"});
  REQUIRE_MESSAGE(check.status == 0, check.err);
  const auto train = run_baton(dir, {"train", "run.toml"});
  REQUIRE_MESSAGE(train.status == 0, train.err);
  CHECK(train.err.find("warning") == std::string::npos);
  // Every value of metrics.jsonl at its step (read_mlflow.py compares them), and nothing else.
  const json run = read_run(*mlflow, "baton-test", "whole", dir / "runs" / "whole");
  CHECK(run["status"] == "FINISHED");
  CHECK(run["end_time_set"] == true);
  CHECK(run["metrics"].contains("eval/accuracy"));
  CHECK(run["metrics"].contains("eval_raw/accuracy"));
  CHECK(run["metrics"]["train/loss"].size() == 6);  // logged every batch: 3 batches x 2 epochs
  // The resolved config's values, defaults included, as parameters, and the config itself as config.toml.
  CHECK(run["params"]["trainer.max_duration"] == "2ep");
  CHECK(run["params"]["plugins.ema.half_life"] == "2ba");
  CHECK(run["params"]["data.batch_size"] == "32");
  CHECK(run["params"].contains("optimizer.name"));  // not in run.toml: a default the resolved config names
  CHECK(run["artifacts"]["config.toml"].get<int>() > 100);
  // The exports, byte for byte as the server keeps them (its artifact folder: <experiment>/<run>/artifacts/).
  CHECK(train.err.find("sending model.safetensors") != std::string::npos);
  const json saved_run = json::parse(read_bytes(dir / "runs" / "whole" / "mlflow.json"));
  const fs::path stored = mlflow->artifacts /
                          saved_run["experiment_id"].get<std::string>() / run["run_id"].get<std::string>() /
                          "artifacts";
  for (const char* file : {"model.safetensors", "ema.safetensors"}) {
    CAPTURE(file);
    REQUIRE(run["artifacts"].contains(file));
    CHECK(read_bytes(stored / file) == read_bytes(dir / "runs" / "whole" / file));
  }
  CHECK(run["tags"]["team"] == "vision");
  CHECK(run["tags"]["mlflow.source.name"] == "baton");
  // The run folder names the MLflow run, for a resumed run to continue.
  const json saved = json::parse(read_bytes(dir / "runs" / "whole" / "mlflow.json"));
  CHECK(saved["run_id"] == run["run_id"]);
  CHECK(saved["tracking_uri"] == mlflow->uri);
}

TEST_CASE("mlflow: a resumed run continues its MLflow run, each step once, its parameters as first logged") {
  const Server* mlflow = server();
  if (mlflow == nullptr) return;
  const fs::path dir = scratch_dir("mlflow_resume");
  write(dir / "run.toml", run_config("parted", "1ep", mlflow->uri));
  const auto first = run_baton(dir, {"train", "run.toml"});
  REQUIRE_MESSAGE(first.status == 0, first.err);
  const std::string id = read_run(*mlflow, "baton-test", "parted")["run_id"];
  write(dir / "run.toml", run_config("parted", "2ep", mlflow->uri));
  const auto resumed = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
  REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
  CHECK(resumed.err.find("continuing MLflow run " + id) != std::string::npos);
  // MLflow keeps a run's parameters as first logged: the change is a warning naming it.
  CHECK(resumed.err.find("trainer.max_duration (1ep, now 2ep)") != std::string::npos);
  // One MLflow run (read_mlflow.py finds exactly one), every step of metrics.jsonl once, with the file's value.
  const json run = read_run(*mlflow, "baton-test", "parted", dir / "runs" / "parted");
  CHECK(run["run_id"] == id);
  CHECK(run["status"] == "FINISHED");
  CHECK(run["params"]["trainer.max_duration"] == "1ep");
  CHECK(run["metrics"]["train/loss"].size() == 6);
}

TEST_CASE("mlflow: a run resumed after a crash sends no step twice") {
  const Server* mlflow = server();
  if (mlflow == nullptr) return;
  const fs::path dir = scratch_dir("mlflow_crash");
  // Two epochs with a checkpoint at each; then the second checkpoint is removed, as if the run had died after
  // logging epoch 2 but before saving it. The resumed run starts at epoch 1's checkpoint and logs epoch 2 again.
  write(dir / "run.toml", run_config("crash", "2ep", mlflow->uri));
  REQUIRE(run_baton(dir, {"train", "run.toml"}).status == 0);
  const fs::path checkpoints = dir / "runs" / "crash" / "checkpoints";
  REQUIRE(fs::exists(checkpoints / "ep2"));
  fs::remove_all(checkpoints / "ep2");
  const auto resumed = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
  REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
  CHECK(resumed.err.find("holds values up to batch 6, past the checkpoint's batch 3") != std::string::npos);
  // Each key one value per step (read_mlflow.py), equal to metrics.jsonl's last for it: the resumed run repeats
  // the interrupted one's steps exactly.
  const json run = read_run(*mlflow, "baton-test", "crash", dir / "runs" / "crash");
  CHECK(run["metrics"]["train/loss"].size() == 6);
  CHECK(run["metrics"]["ema/smoothing"].size() == 2);  // logged at fit start: batch 0, and 3 when resumed
}

TEST_CASE("mlflow: non-finite values, images, and a failed run's status and error") {
  const Server* mlflow = server();
  if (mlflow == nullptr) return;
  const fs::path dir = scratch_dir("mlflow_direct") / "direct-run";
  fs::create_directories(dir);
  const auto logger = logger_test::make_logger(
      baton::test::plugin_file("mlflow"), "mlflow",
      "tracking_uri = \"" + mlflow->uri + "\"\nexperiment_name = \"baton-direct\"\nflush_interval = \"0s\"");
  baton::LoggerContext context;
  context.run_dir = dir.string();
  context.config_text = "seed = 7\n[optimizer]\nlr = 0.5\n";
  logger->open(context);
  baton::Timestamp at;
  at.batch = 1;
  logger->log_metrics(at, {{"loss", 1.5}, {"odd", std::numeric_limits<double>::quiet_NaN()}});
  logger->flush();
  at.batch = 2;
  logger->log_metrics(at, {{"loss", std::numeric_limits<double>::infinity()}});
  baton::Image image;
  image.height = 2;
  image.width = 3;
  image.channels = 3;
  image.pixels.assign(18, 200);
  logger->log_image(at, "samples/eval", image);
  auto* recorder = dynamic_cast<baton::RunEndRecorder*>(logger.get());
  REQUIRE(recorder != nullptr);
  baton::RunEnd end;
  end.failed = true;
  end.message = "the loss was NaN at batch 2";
  recorder->run_ended(end);
  logger->close();

  const json run = read_run(*mlflow, "baton-direct", "direct-run");
  CHECK(run["status"] == "FAILED");
  CHECK(run["tags"]["baton.error"] == "the loss was NaN at batch 2");
  CHECK(run["params"]["seed"] == "7");
  CHECK(run["params"]["optimizer.lr"] == "0.5");
  CHECK(run["metrics"]["loss"]["1"] == 1.5);
  CHECK(run["metrics"]["loss"]["2"] == std::numeric_limits<double>::max());  // MLflow's SQL store keeps inf so
  CHECK(run["metrics"]["odd"]["1"] == "nan");
  const auto png = baton::encode_png(image, "test");
  CHECK(run["artifacts"]["images/samples/eval/step_00000002.png"] == png.size());
  CHECK(run["artifacts"]["config.toml"] == context.config_text.size());
  CHECK_FALSE(run["artifacts"].contains("model.safetensors"));  // a failed run has no exports
}

TEST_CASE("mlflow: a tracking server that does not answer stops the run before training, naming it") {
  const fs::path dir = scratch_dir("mlflow_unreachable");
  const std::string uri = "http://127.0.0.1:" + std::to_string(free_port());  // nothing listens there
  write(dir / "run.toml", run_config("nowhere", "1ep", uri));
  const auto train = run_baton(dir, {"train", "run.toml"});
  CHECK(train.status != 0);
  CHECK_MESSAGE(train.err.find("mlflow logger") != std::string::npos, train.err);
  CHECK_MESSAGE(train.err.find(uri) != std::string::npos, train.err);
  CHECK_MESSAGE(train.err.find("no answer") != std::string::npos, train.err);
  CHECK_FALSE(fs::exists(dir / "runs" / "nowhere" / "checkpoints"));
}

}  // namespace mlflow_test
