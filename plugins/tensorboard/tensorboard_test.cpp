// The tensorboard logger, read back with TensorBoard's own reader (the tensorboard package from the Python package
// registry, pip-installed into a venv of the build folder): every scalar of metrics.jsonl at its step, the EMA's and
// the raw weights' evaluations under their own tags, the diffusion plugin's sample grids as images, a resumed run's
// file merged without repeated steps; its keys; `baton check` writing nothing.
#include "baton_test.h"

#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "../diffusion/diffusion_test_support.h"
#include "baton_command.h"
#include "logger_test_support.h"
#include "pip_venv.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace tensorboard_test {

namespace fs = std::filesystem;
using baton::test::read_bytes;
using baton::test::run_baton;
using baton::test::run_in;
using baton::test::scratch_dir;
using baton::test::shell_quote;

namespace {

using logger_test::write;

// How the event files are read: TensorBoard's own reader when the tensorboard package is importable from a venv
// of the build folder (made with python -m venv and pip install on first use, kept there), otherwise read_events.py
// --spec, its reader written from the formats alone, run by the system's python. pip failing (a registry that
// cannot be reached, or a machine whose TLS interception the chroot does not trust) is reported with pip's reason;
// BATON_TEST_REQUIRE_TENSORBOARD=1 makes it a failure instead.
struct Reader {
  std::string python;
  std::string flag;  // "" or "--spec"
};

std::optional<std::string> tensorboard_python() {
  static const std::optional<fs::path> venv =
      baton::test::pip_venv(TENSORBOARD_VENV, BATON_PYTHON, "tensorboard", "import tensorboard",
                            "BATON_TEST_REQUIRE_TENSORBOARD", "the event files are read by read_events.py --spec, "
                                                              "from the formats alone");
  if (!venv) return std::nullopt;
  return (*venv / "bin" / "python").string();
}

Reader reader() {
  if (auto python = tensorboard_python()) return {*python, ""};
  return {BATON_PYTHON, "--spec"};
}

// read_events.py's verdict on a run folder: its output, and whether it found everything.
baton::test::CommandResult read_events(const fs::path& run, const std::vector<std::string>& image_tags,
                                       const Reader& with = reader()) {
  std::string command = shell_quote(with.python) + " " + shell_quote(TENSORBOARD_CHECK_SCRIPT) + " " +
                        (with.flag.empty() ? "" : with.flag + " ") + shell_quote(run.string()) + " tb";
  for (const auto& tag : image_tags) command += " " + shell_quote(tag);
  return run_in(run, command);
}

std::vector<fs::path> event_files(const fs::path& folder) {
  std::vector<fs::path> files;
  if (!fs::exists(folder)) return files;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename().string().find("tfevents") != std::string::npos) files.push_back(entry.path());
  return files;
}

std::string mlp_config(const std::string& name, const std::string& duration) {
  return logger_test::small_run(name, duration, "tensorboard");
}

std::string config_error(const std::string& toml) {
  return logger_test::config_error(baton::test::plugin_file("tensorboard"), "tensorboard", toml);
}

}  // namespace

TEST_CASE("tensorboard: its keys are checked") {
  CHECK(config_error("dir = \"/tmp/tb\"").find("loggers.0.dir") != std::string::npos);
  CHECK(config_error("dir = \"../tb\"").find("loggers.0.dir") != std::string::npos);
  CHECK(config_error("folder = \"tb\"").find("folder") != std::string::npos);
  CHECK(config_error("dir = \"boards/tb\"") == "");
}

TEST_CASE("tensorboard: every scalar at its step, EMA and raw evaluations apart, a resumed run merged") {
  const fs::path dir = scratch_dir("tensorboard_run");
  write(dir / "run.toml", mlp_config("whole", "2ep"));
  const auto check = run_baton(dir, {"check", "run.toml"});
  REQUIRE_MESSAGE(check.status == 0, check.err);
  CHECK_FALSE(fs::exists(dir / "runs" / "whole" / "tb"));  // `baton check` opens no destination
  const auto train = run_baton(dir, {"train", "run.toml"});
  REQUIRE_MESSAGE(train.status == 0, train.err);
  CHECK(event_files(dir / "runs" / "whole" / "tb").size() == 1);
  const auto whole = read_events(dir / "runs" / "whole", {});
  REQUIRE_MESSAGE(whole.status == 0, whole.err << whole.out);
  CHECK(whole.out.find("\"eval/accuracy\"") != std::string::npos);
  CHECK(whole.out.find("\"eval_raw/accuracy\"") != std::string::npos);
  CHECK(whole.out.find("\"train/loss\"") != std::string::npos);
  // The spec reader finds the same (and, where TensorBoard's reader ran above, agrees with it) ...
  const Reader spec{BATON_PYTHON, "--spec"};
  const auto by_spec = read_events(dir / "runs" / "whole", {}, spec);
  REQUIRE_MESSAGE(by_spec.status == 0, by_spec.err << by_spec.out);
  CHECK(by_spec.out.substr(by_spec.out.find("\"scalars\"")) == whole.out.substr(whole.out.find("\"scalars\"")));
  // ... and refuses a file with one byte changed in a record's data.
  const fs::path copy = dir / "runs" / "flipped";
  fs::create_directories(copy / "tb");
  fs::copy_file(dir / "runs" / "whole" / "metrics.jsonl", copy / "metrics.jsonl");
  std::string bytes = read_bytes(event_files(dir / "runs" / "whole" / "tb").at(0));
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
  std::ofstream(copy / "tb" / "events.out.tfevents.flipped", std::ios::binary) << bytes;
  const auto flipped = read_events(copy, {}, spec);
  CHECK(flipped.status != 0);
  CHECK_MESSAGE(flipped.err.find("CRC") != std::string::npos, flipped.err);

  // Stopped after one epoch, resumed to two: two files, read as one history with no step twice, holding every
  // value of metrics.jsonl (whose lines after the checkpoint are the resumed run's).
  write(dir / "run.toml", mlp_config("parted", "1ep"));
  REQUIRE(run_baton(dir, {"train", "run.toml"}).status == 0);
  write(dir / "run.toml", mlp_config("parted", "2ep"));
  const auto resumed = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
  REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
  CHECK(event_files(dir / "runs" / "parted" / "tb").size() == 2);
  const auto parted = read_events(dir / "runs" / "parted", {});
  CHECK_MESSAGE(parted.status == 0, parted.err << parted.out);
}

TEST_CASE("tensorboard: a run resumed after a crash drops the steps the crashed run logged after its checkpoint") {
  const fs::path dir = scratch_dir("tensorboard_crash");
  // Two epochs with a checkpoint at each; then the second checkpoint is removed, as if the run had died after
  // logging epoch 2 but before saving it. The resumed run starts at epoch 1's checkpoint and logs epoch 2 again.
  write(dir / "run.toml", mlp_config("crash", "2ep"));
  REQUIRE(run_baton(dir, {"train", "run.toml"}).status == 0);
  const fs::path checkpoints = dir / "runs" / "crash" / "checkpoints";
  std::vector<fs::path> saved;
  for (const auto& entry : fs::directory_iterator(checkpoints))
    if (entry.is_directory()) saved.push_back(entry.path());
  std::sort(saved.begin(), saved.end());
  REQUIRE(saved.size() == 2);
  fs::remove_all(checkpoints / "ep2");
  const auto resumed = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
  REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
  REQUIRE(event_files(dir / "runs" / "crash" / "tb").size() == 2);
  // Each tag holds one value per step: the resumed run's for epoch 2 (the last line of metrics.jsonl for it).
  const auto merged = read_events(dir / "runs" / "crash", {});
  CHECK_MESSAGE(merged.status == 0, merged.err << merged.out);
}

TEST_CASE("tensorboard: the diffusion plugin's sample grids are image summaries of each weight set") {
  const fs::path dir = scratch_dir("tensorboard_images");
  // The denoiser's evaluation samples, measured by the fd metric, whose classifier this writes.
  diffusion_test::write_classifier(dir);
  write(dir / "run.toml", diffusion_test::tiny_config("images", "4ba", BATON_DIFFUSION_PLUGIN) +
                              "[[loggers]]\nname = \"tensorboard\"\n");
  const auto train = run_baton(dir, {"train", "run.toml"});
  REQUIRE_MESSAGE(train.status == 0, train.err);
  const auto read = read_events(dir / "runs" / "images", {"samples/eval", "samples/eval_raw"});
  CHECK_MESSAGE(read.status == 0, read.err << read.out);
  CHECK(read.out.find("\"samples/eval\": [4]") != std::string::npos);
  CHECK(read.out.find("\"samples/eval_raw\": [4]") != std::string::npos);
}

TEST_CASE("tensorboard: in a data-parallel run only rank 0 writes") {
  const fs::path dir = scratch_dir("tensorboard_ranks");
  write(dir / "run.toml", mlp_config("ranks", "1ep"));
  const auto launched = run_baton(dir, {"launch", "--nproc", "2", "train", "run.toml"});
  REQUIRE_MESSAGE(launched.status == 0, launched.err);
  CHECK(event_files(dir / "runs" / "ranks" / "tb").size() == 1);
  const auto read = read_events(dir / "runs" / "ranks", {});
  CHECK_MESSAGE(read.status == 0, read.err << read.out);
}

}  // namespace tensorboard_test
