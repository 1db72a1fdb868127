#include "baton_test.h"
#include "error_text.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "logging/metrics_history.h"
#include "logging/progress.h"
#include "logging/run_logger.h"

namespace fs = std::filesystem;
using namespace baton;

namespace {

std::string read_back(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  char buffer[256];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  return text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
using baton::test::contains;

std::size_t count_of(const std::string& text, char c) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), c));
}

// Sets an environment variable for one scope and restores the old value.
class EnvOverride {
 public:
  EnvOverride(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~EnvOverride() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_SUITE("logging") {
  TEST_CASE("flush writes one metrics.jsonl line of the pending metrics, stamped with the state's time") {
    const auto dir = test::scratch_dir("logging-metrics");
    const auto path = dir / "run" / "nested" / "metrics.jsonl";  // the folders do not exist yet
    State state;
    std::FILE* out = std::tmpfile();
    {
      RunLogger logger(state, RunLoggerOptions{path.string(), true, false, 0, out});
      state.progress.now.epoch = 1;
      state.progress.now.batch = 5;
      state.progress.now.sample = 320;
      logger.log_metric("train/loss", 0.5);
      logger.log_metric("train/accuracy", 0.75);
      CHECK(state.metrics.at("train/loss") == 0.5);
      logger.flush();
      logger.flush();  // nothing pending: no line

      state.progress.now.batch = 10;
      state.progress.now.sample = 640;
      logger.log_metric("train/loss", 0.25);
      logger.flush();
      logger.log_metric("eval/accuracy", 0.9);  // written by the destructor
    }
    CHECK(state.metrics.at("train/loss") == 0.25);
    CHECK(state.metrics.at("train/accuracy") == 0.75);
    CHECK(read_back(out).empty());  // metrics do not go to the console
    std::fclose(out);

    std::ifstream in(path);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == nlohmann::json{{"epoch", 1}, {"batch", 5}, {"sample", 320}, {"train/loss", 0.5},
                                     {"train/accuracy", 0.75}});
    CHECK(lines[1] == nlohmann::json{{"epoch", 1}, {"batch", 10}, {"sample", 640}, {"train/loss", 0.25}});
    CHECK(lines[2]["eval/accuracy"] == 0.9);
    CHECK(lines[2].size() == 4);
  }

  TEST_CASE("each value keeps the time it was logged at, and nothing logged between flushes is merged or lost") {
    const auto dir = test::scratch_dir("logging-per-step");
    const auto path = dir / "metrics.jsonl";
    State state;
    {
      RunLogger logger(state, RunLoggerOptions{path.string(), false, false, 0, stderr});
      for (std::int64_t batch = 1; batch <= 3; ++batch) {
        state.progress.now.batch = batch;
        state.progress.now.sample = batch * 32;
        logger.log_metric("plugin/value", 10.0 * batch);
        if (batch == 2) logger.log_metric("other/value", 7);  // shares batch 2's line
      }
      logger.log_metric("plugin/value", 31);  // the same name twice at batch 3: a line of its own
      logger.begin_capture();
      logger.log_metric("eval/loss", 1.5);
      logger.log_metric("plugin/eval", 2);
      logger.log_metric("eval/loss", 1.25);
      CHECK(logger.end_capture() == std::vector<std::pair<std::string, double>>{{"eval/loss", 1.25}, {"plugin/eval", 2}});
      logger.flush();
    }
    std::ifstream in(path);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == 5);
    CHECK(lines[0] == nlohmann::json{{"epoch", 0}, {"batch", 1}, {"sample", 32}, {"plugin/value", 10.0}});
    CHECK(lines[1] ==
          nlohmann::json{{"epoch", 0}, {"batch", 2}, {"sample", 64}, {"plugin/value", 20.0}, {"other/value", 7.0}});
    CHECK(lines[2] == nlohmann::json{{"epoch", 0}, {"batch", 3}, {"sample", 96}, {"plugin/value", 30.0}});
    // Other names at the same time share the line; a name again starts the next one.
    CHECK(lines[3] == nlohmann::json{{"epoch", 0}, {"batch", 3}, {"sample", 96}, {"plugin/value", 31.0},
                                     {"eval/loss", 1.5}, {"plugin/eval", 2.0}});
    CHECK(lines[4] == nlohmann::json{{"epoch", 0}, {"batch", 3}, {"sample", 96}, {"eval/loss", 1.25}});
  }

  TEST_CASE("a second logger on the same file appends") {
    const auto dir = test::scratch_dir("logging-append");
    const auto path = (dir / "metrics.jsonl").string();
    State state;
    for (double value : {1.0, 2.0}) {
      RunLogger logger(state, RunLoggerOptions{path, false, false, 0, stderr});
      logger.log_metric("m", value);
    }
    std::ifstream in(path);
    std::string first, second;
    std::getline(in, first);
    std::getline(in, second);
    CHECK(nlohmann::json::parse(first)["m"] == 1.0);
    CHECK(nlohmann::json::parse(second)["m"] == 2.0);
  }

  TEST_CASE("info lines print as they are, warnings with a prefix, and warnings are collected") {
    State state;
    std::FILE* out = std::tmpfile();
    RunLogger logger(state, RunLoggerOptions{"", true, false, 0, out});
    logger.info("epoch 1 done");
    logger.warn("loss is NaN");
    logger.warn("slow batch");
    CHECK(read_back(out) == "epoch 1 done\nwarning: loss is NaN\nwarning: slow batch\n");
    CHECK(logger.warnings() == std::vector<std::string>{"loss is NaN", "slow batch"});
    std::fclose(out);

    std::FILE* quiet_out = std::tmpfile();
    RunLogger quiet(state, RunLoggerOptions{"", true, true, 0, quiet_out});
    quiet.info("hidden");
    quiet.warn("shown");
    CHECK(read_back(quiet_out) == "warning: shown\n");
    std::fclose(quiet_out);
  }

  TEST_CASE("ranks other than 0 write and print nothing") {
    const auto dir = test::scratch_dir("logging-rank1");
    const auto path = dir / "metrics.jsonl";
    State state;
    std::FILE* out = std::tmpfile();
    {
      RunLogger logger(state, RunLoggerOptions{path.string(), true, false, 1, out});
      logger.log_metric("train/loss", 1.5);
      logger.info("hello");
      logger.warn("careful");
      logger.flush();
      CHECK(logger.warnings().size() == 1);
    }
    CHECK(state.metrics.at("train/loss") == 1.5);
    CHECK_FALSE(fs::exists(path));
    CHECK(read_back(out).empty());
    std::fclose(out);
  }

  TEST_CASE("destinations get every line of metrics.jsonl with its time, and images, once opened, on rank 0 only") {
    // Records what a destination is told, in order.
    struct Recorder final : LoggerDestination {
      std::vector<std::string> calls;
      void open(const LoggerContext& context) override {
        calls.push_back("open " + context.run_dir + (context.resumed ? " resumed at " : " fresh at ") +
                        std::to_string(context.start.batch));
      }
      void log_metrics(const Timestamp& at, const std::vector<std::pair<std::string, double>>& values) override {
        std::string call = "metrics " + std::to_string(at.epoch) + "/" + std::to_string(at.batch);
        for (const auto& [name, value] : values) call += " " + name + "=" + std::to_string(value);
        calls.push_back(call);
      }
      void log_image(const Timestamp& at, const std::string& name, const Image& image) override {
        calls.push_back("image " + std::to_string(at.batch) + " " + name + " " + std::to_string(image.width) + "x" +
                        std::to_string(image.height));
      }
      void flush() override { calls.push_back("flush"); }
      void close() override { calls.push_back("close"); }
    };
    Image image;
    image.height = 1;
    image.width = 2;
    image.channels = 1;
    image.pixels = {0, 255};
    for (int rank : {0, 1}) {
      CAPTURE(rank);
      State state;
      auto recorder = std::make_shared<Recorder>();
      RunLoggerOptions options;
      options.console = false;
      options.rank = rank;
      options.destinations = {recorder};
      RunLogger logger(state, options);
      logger.log_metric("before/open", 1);  // kept for metrics.jsonl; a destination not open yet gets nothing
      logger.flush();
      log_image(logger, "samples/none", image);
      logger.open_destinations(LoggerContext{"runs/x", true, state.progress.now});
      state.progress.now.batch = 2;
      logger.log_metric("train/loss", 0.5);
      logger.log_metric("lr", 0.25);
      logger.log_metric("lr", 0.125);  // a second value at one time: a second line
      log_image(logger, "samples/eval", image);
      state.progress.now.batch = 3;
      logger.log_metric("eval/accuracy", 0.75);
      logger.flush();
      logger.close_destinations();
      logger.close_destinations();  // closed once
      if (rank == 0)
        CHECK(recorder->calls == std::vector<std::string>{"open runs/x resumed at 0", "image 2 samples/eval 2x1",
                                                          "metrics 0/2 lr=0.250000 train/loss=0.500000",
                                                          "metrics 0/2 lr=0.125000",
                                                          "metrics 0/3 eval/accuracy=0.750000", "flush", "flush",
                                                          "close"});
      else
        CHECK(recorder->calls.empty());
    }
    // An image whose pixels do not match its size is refused, naming it.
    State state;
    RunLogger logger(state, RunLoggerOptions{});
    image.width = 3;
    CHECK_THROWS_WITH_AS(log_image(logger, "samples/bad", image),
                         doctest::Contains("log_image 'samples/bad': 2 pixel values for a 1x3x1 image"), Error);
  }

  TEST_CASE("a destination's failure is a baton::Error; one that fails to open closes those opened before it") {
    struct Failing final : LoggerDestination {
      int mode = 0;  // 1: open throws a std::runtime_error, 2: log_metrics throws an int
      std::vector<std::string>* calls = nullptr;
      void open(const LoggerContext&) override {
        calls->push_back("open");
        if (mode == 1) throw std::runtime_error("disk full");
      }
      void log_metrics(const Timestamp&, const std::vector<std::pair<std::string, double>>&) override {
        if (mode == 2) throw 7;
      }
      void close() override { calls->push_back("close"); }
    };
    std::vector<std::string> calls;
    auto first = std::make_shared<Failing>();
    auto second = std::make_shared<Failing>();
    first->calls = second->calls = &calls;
    second->mode = 1;
    State state;
    RunLoggerOptions options;
    options.console = false;
    options.destinations = {first, second};
    RunLogger opening(state, options);
    CHECK_THROWS_WITH_AS(opening.open_destinations(LoggerContext{}), "a logger failed: disk full", Error);
    CHECK(calls == std::vector<std::string>{"open", "open", "close"});

    second->mode = 2;
    RunLogger logging(state, options);
    logging.open_destinations(LoggerContext{});
    logging.log_metric("train/loss", 1);
    CHECK_THROWS_WITH_AS(logging.flush(), doctest::Contains("not a std::exception"), Error);
  }

  TEST_CASE("format_duration") {
    CHECK(ProgressBar::format_duration(3723) == "1:02:03");
    CHECK(ProgressBar::format_duration(65) == "1:05");
    CHECK(ProgressBar::format_duration(0) == "0:00");
    CHECK(ProgressBar::format_duration(59.6) == "1:00");
    CHECK(ProgressBar::format_duration(36000) == "10:00:00");
    CHECK(ProgressBar::format_duration(-3) == "0:00");
  }

  TEST_CASE("plain progress prints a line every plain_every steps and one at the end") {
    std::FILE* out = std::tmpfile();
    {
      ProgressOptions options;
      options.label = "eval";
      options.total = 5;
      options.out = out;
      options.plain_every = 2;
      ProgressBar bar(options);
      for (std::int64_t done = 1; done <= 5; ++done) bar.update(done, {{"loss", 0.4321}});
      bar.finish({{"accuracy", 0.875}});
      bar.finish();  // a second finish prints nothing
    }
    const std::string text = read_back(out);
    std::fclose(out);
    CHECK(count_of(text, '\r') == 0);
    const auto lines = lines_of(text);
    REQUIRE(lines.size() == 3);
    CHECK(starts_with(lines[0], "eval 2/5 "));
    CHECK(contains(lines[0], " ba/s ETA "));
    CHECK(contains(lines[0], " loss=0.4321"));
    CHECK(starts_with(lines[1], "eval 4/5 "));
    CHECK(starts_with(lines[2], "eval 5/5 "));
    CHECK(contains(lines[2], " in 0:00"));
    CHECK(contains(lines[2], " accuracy=0.875"));
  }

  TEST_CASE("an unfinished progress bar finishes its line when destroyed") {
    std::FILE* out = std::tmpfile();
    {
      ProgressOptions options;
      options.label = "train";
      options.unit = "sp";
      options.out = out;  // total unknown
      ProgressBar bar(options);
      bar.update(7);
    }
    const auto lines = lines_of(read_back(out));
    std::fclose(out);
    REQUIRE(lines.size() == 1);
    CHECK(starts_with(lines[0], "train 7 "));
    CHECK(contains(lines[0], " sp/s in "));
  }

  TEST_CASE("terminal progress redraws one bar in place, throttled") {
    std::FILE* out = std::tmpfile();
    const auto start = std::chrono::steady_clock::now();
    {
      ProgressOptions options;
      options.label = "epoch 1/3";
      options.total = 10;
      options.out = out;
      options.terminal = true;
      ProgressBar bar(options);
      bar.update(3);  // the first update always draws
      for (int i = 0; i < 1000; ++i) bar.update(4);
      bar.finish();
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string text = read_back(out);
    std::fclose(out);
    // 3 of 10 steps fill 9 of the 30 bar cells.
    CHECK(starts_with(text, "\repoch 1/3 [#########.....................] 3/10 "));
    CHECK(contains(text, "\x1b[K"));
    CHECK(contains(text, "] 4/10 "));
    CHECK(count_of(text, '\n') == 1);
    CHECK(text.back() == '\n');
    // At most ten redraws a second, plus the first draw and the final one.
    CHECK(static_cast<double>(count_of(text, '\r')) <= 2 + elapsed * 10 + 1);
  }

  TEST_CASE("is_terminal: files are not terminals; CI=true and TERM=dumb turn terminals off") {
    std::FILE* file = std::tmpfile();
    CHECK_FALSE(is_terminal(file));
    std::fclose(file);

    const int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
      MESSAGE("skipped the pseudo-terminal checks: no pseudo-terminal available");
      if (master >= 0) close(master);
      return;
    }
    std::FILE* tty = std::fopen(ptsname(master), "w");
    REQUIRE(tty != nullptr);
    {
      EnvOverride ci("CI", nullptr);
      EnvOverride term("TERM", "xterm");
      CHECK(is_terminal(tty));
    }
    {
      EnvOverride ci("CI", "true");
      EnvOverride term("TERM", "xterm");
      CHECK_FALSE(is_terminal(tty));
    }
    {
      EnvOverride ci("CI", nullptr);
      EnvOverride term("TERM", "dumb");
      CHECK_FALSE(is_terminal(tty));
    }
    std::fclose(tty);
    close(master);
  }
}

TEST_SUITE("logging") {
  TEST_CASE("read_logged_evaluations: the evaluations a resumed run continues, from every process's lines") {
    auto dir = baton::test::scratch_dir("logging-history");
    const fs::path path = dir / "metrics.jsonl";
    // A first process trained to batch 16 (evaluating at 4, 8, 12, 16); a second resumed at 8 and went to 14,
    // evaluating at 12 with another value, and died while writing its last line; a third now resumes at 12.
    std::ofstream(path) << R"({"epoch":0,"batch":2,"sample":64,"train/loss":2.0}
{"epoch":0,"batch":4,"sample":128,"eval/loss":1.5,"eval/accuracy":0.25}
{"epoch":1,"batch":8,"sample":256,"eval/loss":1.0,"eval/accuracy":0.5,"eval_raw/accuracy":null}
{"epoch":1,"batch":12,"sample":384,"eval/loss":0.8,"eval/accuracy":0.6}
{"epoch":2,"batch":16,"sample":512,"eval/loss":0.7,"eval/accuracy":0.7}
{"epoch":1,"batch":10,"sample":320,"train/loss":0.9}
{"epoch":1,"batch":12,"sample":384,"eval/loss":0.75,"eval/accuracy":0.65}
{"epoch":1,"batch":14,"sample":448,"eval/lo)";
    auto evals = read_logged_evaluations(path.string(), 12);
    REQUIRE(evals.size() == 3);
    CHECK(evals[0].at.batch == 4);
    CHECK(evals[0].metrics.at("eval/accuracy") == 0.25);
    CHECK(evals[1].at.epoch == 1);
    CHECK(evals[1].at.batch == 8);
    CHECK(std::isnan(evals[1].metrics.at("eval_raw/accuracy")));
    CHECK(evals[2].at.batch == 12);
    CHECK(evals[2].metrics.at("eval/accuracy") == 0.65);  // the second process's, which the checkpoint continues
    CHECK(evals[2].metrics.count("train/loss") == 0);

    CHECK(read_logged_evaluations(path.string(), 11).size() == 2);
    CHECK(read_logged_evaluations((dir / "none.jsonl").string(), 12).empty());
  }

  TEST_CASE("the metrics readers take a regular file only: /dev/full (endless zeros, no newline) is no history") {
    // Read as lines, the device's bytes made one line that grew to 17 GB before the read failed.
    if (!fs::exists("/dev/full")) return;
    CHECK(read_logged_evaluations("/dev/full", 12).empty());
    CHECK(baton::read_logged_metric("/dev/full", "train/loss").empty());
  }
}
