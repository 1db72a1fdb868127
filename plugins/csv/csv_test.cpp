// The csv logger: its file for hand-written steps (text compared whole), the header rewrite when a metric appears
// and what a failed rewrite leaves, its keys, and real runs of the CLI whose metrics.csv must hold every value of
// metrics.jsonl at its step (a resumed run included).
#include "baton_test.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton_command.h"
#include "logger_test_support.h"
#include "small_trainer.h"
#include "plugin_files.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace csv_test {

namespace fs = std::filesystem;
using baton::test::read_bytes;
using baton::test::run_baton;
using baton::test::scratch_dir;

namespace {

std::shared_ptr<baton::LoggerDestination> make_csv(const std::string& toml = "") {
  return logger_test::make_logger(baton::test::plugin_file("csv"), "csv", toml);
}

baton::Timestamp stamp(std::int64_t epoch, std::int64_t batch, std::int64_t sample) {
  baton::Timestamp t;
  t.epoch = epoch;
  t.batch = batch;
  t.sample = sample;
  return t;
}

std::string config_error(const std::string& toml) {
  return logger_test::config_error(baton::test::plugin_file("csv"), "csv", toml);
}

// A CSV line's fields; the values here are numbers and plain names, so no quoting occurs.
std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',')
      out.emplace_back();
    else
      out.back().push_back(c);
  }
  return out;
}

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

Table read_table(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  Table table;
  std::string line;
  REQUIRE(std::getline(in, line));
  table.header = split(line);
  while (std::getline(in, line)) table.rows.push_back(split(line));
  return table;
}

// metrics.jsonl as (batch, name) -> the value last logged then (a resumed run logs the steps after its checkpoint
// again; the latest line is the one that counts). NaN for null.
std::map<std::pair<std::int64_t, std::string>, double> read_jsonl(const fs::path& path) {
  std::map<std::pair<std::int64_t, std::string>, double> out;
  std::ifstream in(path);
  REQUIRE(in);
  std::string line;
  while (std::getline(in, line)) {
    const auto json = nlohmann::json::parse(line);
    for (const auto& [key, value] : json.items()) {
      if (key == "epoch" || key == "batch" || key == "sample") continue;
      out[{json["batch"].get<std::int64_t>(), key}] = value.is_null() ? NAN : value.get<double>();
    }
  }
  return out;
}

std::string run_config(const std::string& name, const std::string& duration) {
  return logger_test::small_run(name, duration, "csv");
}

using logger_test::write;

// Every value of metrics.jsonl is in metrics.csv at its step, and the csv holds nothing else; every step has one
// row.
void check_against_jsonl(const fs::path& run) {
  const Table table = read_table(run / "metrics.csv");
  REQUIRE(table.header.size() > 3);
  CHECK(table.header[0] == "epoch");
  CHECK(table.header[1] == "batch");
  CHECK(table.header[2] == "sample");
  const auto expected = read_jsonl(run / "metrics.jsonl");
  std::map<std::pair<std::int64_t, std::string>, double> found;
  std::set<std::int64_t> steps;
  for (const auto& row : table.rows) {
    REQUIRE(row.size() == table.header.size());
    const std::int64_t batch = std::stoll(row[1]);
    CHECK_MESSAGE(steps.insert(batch).second, "two rows at batch " << batch);
    for (std::size_t i = 3; i < row.size(); ++i)
      if (!row[i].empty()) found[{batch, table.header[i]}] = std::stod(row[i]);
  }
  CHECK(found.size() == expected.size());
  for (const auto& [key, value] : expected) {
    INFO(key.second << " at batch " << key.first);
    auto it = found.find(key);
    REQUIRE(it != found.end());
    if (std::isnan(value))
      CHECK(std::isnan(it->second));
    else
      CHECK(it->second == value);  // both written as the shortest text that reads back exactly
  }
}

}  // namespace

TEST_CASE("csv: one row per step, a column per metric in the order first logged, the header grown by a rewrite") {
  const fs::path dir = scratch_dir("csv_rows");
  auto csv = make_csv();
  csv->open(baton::LoggerContext{dir.string(), false, {}});
  CHECK(read_bytes(dir / "metrics.csv") == "epoch,batch,sample\n");
  csv->log_metrics(stamp(0, 1, 4), {{"lr", 0.5}, {"train/loss", 2.25}});
  csv->log_metrics(stamp(0, 2, 8), {{"lr", 0.25}, {"train/loss", 1.5}});
  // The step's evaluation, logged after its train/loss: the same row.
  csv->log_metrics(stamp(1, 2, 8), {{"train/loss", 1.25}});
  csv->log_metrics(stamp(1, 2, 8), {{"eval/accuracy", 0.75}, {"eval_raw/accuracy", 0.5}});
  // A name logged twice at one step: a second row, nothing lost.
  csv->log_metrics(stamp(1, 2, 8), {{"train/loss", 1.0}});
  csv->flush();
  // Rows of finished steps are on disk, the header already has the new columns and the earlier rows their cells.
  CHECK(read_bytes(dir / "metrics.csv") ==
        "epoch,batch,sample,lr,train/loss,eval/accuracy,eval_raw/accuracy\n"
        "0,1,4,0.5,2.25,,\n"
        "0,2,8,0.25,1.5,,\n"
        "1,2,8,,1.25,0.75,0.5\n");
  csv->log_metrics(stamp(1, 3, 12), {{"nan_metric", NAN}, {"tiny", 1e-300}});
  csv->close();
  CHECK(read_bytes(dir / "metrics.csv") ==
        "epoch,batch,sample,lr,train/loss,eval/accuracy,eval_raw/accuracy,nan_metric,tiny\n"
        "0,1,4,0.5,2.25,,,,\n"
        "0,2,8,0.25,1.5,,,,\n"
        "1,2,8,,1.25,0.75,0.5,,\n"
        "1,2,8,,1,,,,\n"
        "1,3,12,,,,,nan,1e-300\n");
  CHECK_FALSE(fs::exists(dir / "metrics.csv.tmp"));
}

TEST_CASE("csv: names with commas or quotes are quoted in the header, and a resumed run reads them back") {
  const fs::path dir = scratch_dir("csv_quoted");
  auto csv = make_csv("file = \"table.csv\"");
  csv->open(baton::LoggerContext{dir.string(), false, {}});
  csv->log_metrics(stamp(0, 1, 1), {{"a,b", 1}, {"say \"hi\"", 2}});
  csv->log_metrics(stamp(0, 2, 2), {{"a,b", 3}});
  csv->log_metrics(stamp(0, 3, 3), {{"a,b", 4}});
  csv->close();
  const std::string header = "epoch,batch,sample,\"a,b\",\"say \"\"hi\"\"\"\n";
  CHECK(read_bytes(dir / "table.csv") == header + "0,1,1,1,2\n0,2,2,3,\n0,3,3,4,\n");
  // A row cut short by a crash, then a resume at batch 2: the rows of batch 3 (logged after that checkpoint) and
  // the cut one go; the columns stay; a value logged at batch 2 again joins that step's row.
  std::ofstream(dir / "table.csv", std::ios::app) << "0,1,";
  auto resumed = make_csv("file = \"table.csv\"");
  resumed->open(baton::LoggerContext{dir.string(), true, stamp(0, 2, 2)});
  resumed->log_metrics(stamp(0, 2, 2), {{"say \"hi\"", 7}});
  resumed->log_metrics(stamp(0, 3, 3), {{"say \"hi\"", 5}});
  resumed->close();
  CHECK(read_bytes(dir / "table.csv") == header + "0,1,1,1,2\n0,2,2,3,7\n0,3,3,,5\n");
  // A fresh (not resumed) run in the same folder starts the file over.
  auto fresh = make_csv("file = \"table.csv\"");
  fresh->open(baton::LoggerContext{dir.string(), false, {}});
  fresh->close();
  CHECK(read_bytes(dir / "table.csv") == "epoch,batch,sample\n");
}

TEST_CASE("csv: a header rewrite that fails leaves the previous file whole and names the file") {
  const fs::path dir = scratch_dir("csv_rewrite_fails");
  auto csv = make_csv();
  csv->open(baton::LoggerContext{dir.string(), false, {}});
  csv->log_metrics(stamp(0, 1, 4), {{"train/loss", 2}});
  csv->log_metrics(stamp(0, 2, 8), {{"train/loss", 1}});
  REQUIRE(read_bytes(dir / "metrics.csv") == "epoch,batch,sample,train/loss\n0,1,4,2\n");
  // Batch 2's row is written when batch 3 logs, just before the rewrite that batch 3's new metric asks for.
  const std::string before = "epoch,batch,sample,train/loss\n0,1,4,2\n0,2,8,1\n";
  // The rewrite goes through metrics.csv.tmp: a folder in its place makes writing it fail, as a full disk would,
  // at the moment between the old file and the new one.
  fs::create_directory(dir / "metrics.csv.tmp");
  std::string error;
  try {
    csv->log_metrics(stamp(0, 3, 12), {{"eval/accuracy", 0.5}});
  } catch (const baton::Error& e) {
    error = e.what();
  }
  CHECK(error.find("csv logger") != std::string::npos);
  CHECK(error.find((dir / "metrics.csv").string()) != std::string::npos);
  CHECK(read_bytes(dir / "metrics.csv") == before);
}

TEST_CASE("csv: its keys are checked") {
  CHECK(config_error("file = \"sub/x.csv\"").find("loggers.0.file") != std::string::npos);
  CHECK(config_error("file = \"metrics.jsonl\"").find("metrics.jsonl") != std::string::npos);
  CHECK(config_error("file = 3").find("file") != std::string::npos);
  CHECK(config_error("colour = \"red\"").find("colour") != std::string::npos);
  CHECK(config_error("file = \"mine.csv\"") == "");
}

TEST_CASE("csv: a real run's metrics.csv holds every value of its metrics.jsonl at its step, resumed or not") {
  const fs::path dir = scratch_dir("csv_run");
  write(dir / "run.toml", run_config("whole", "2ep"));
  // `baton check` opens no destination: no file appears.
  const auto check = run_baton(dir, {"check", "run.toml"});
  REQUIRE_MESSAGE(check.status == 0, check.err);
  CHECK_FALSE(fs::exists(dir / "runs" / "whole" / "metrics.csv"));
  const auto train = run_baton(dir, {"train", "run.toml"});
  REQUIRE_MESSAGE(train.status == 0, train.err);
  check_against_jsonl(dir / "runs" / "whole");
  const Table whole = read_table(dir / "runs" / "whole" / "metrics.csv");
  // Evaluation columns come after the first steps' train/loss: the header grew mid-run.
  const auto column = [&](const std::string& name) {
    return std::find(whole.header.begin(), whole.header.end(), name) - whole.header.begin();
  };
  const auto columns = static_cast<std::ptrdiff_t>(whole.header.size());
  CHECK(column("train/loss") < column("eval/accuracy"));
  CHECK(column("eval/accuracy") < columns);
  CHECK(column("eval_raw/accuracy") < columns);
  // Batch 0 (the EMA's settings, logged at fit_start), then batches 1..6 (3 per epoch), each evaluation in its
  // batch's row.
  CHECK(whole.rows.size() == 7);

  // Stopped after one epoch and resumed: the resumed file equals the uninterrupted one's steps.
  write(dir / "run.toml", run_config("parted", "1ep"));
  REQUIRE(run_baton(dir, {"train", "run.toml"}).status == 0);
  write(dir / "run.toml", run_config("parted", "2ep"));
  const auto resumed = run_baton(dir, {"train", "run.toml", "--resume", "auto"});
  REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
  check_against_jsonl(dir / "runs" / "parted");
  const Table parted = read_table(dir / "runs" / "parted" / "metrics.csv");
  CHECK(parted.header == whole.header);
  REQUIRE(parted.rows.size() == whole.rows.size());
  for (std::size_t i = 0; i < parted.rows.size(); ++i) CHECK(parted.rows[i][1] == whole.rows[i][1]);
}

TEST_CASE("csv: an unknown logger name lists the registered ones") {
  const fs::path dir = scratch_dir("csv_unknown");
  std::string config = run_config("x", "1ep");
  config.replace(config.find("name = \"csv\""), 12, "name = \"cvs\"");
  write(dir / "run.toml", config);
  const auto check = run_baton(dir, {"check", "run.toml"});
  CHECK(check.status == 2);
  CHECK(check.err.find("loggers.0.name") != std::string::npos);
  CHECK(check.err.find("unknown logger 'cvs'") != std::string::npos);
}

TEST_CASE("csv from C++: TrainerOptions::loggers, opened at fit(), never without a run folder") {
  const fs::path dir = scratch_dir("csv_embedded");
  baton::TrainerOptions options = baton::test::quiet_options((dir / "run").string());
  // As docs/logging.md shows: the built-in library found by name, the logger made from the registry.
  baton::PluginLoader loader;
  loader.register_components(loader.resolve("csv"));
  const auto* csv = baton::components().loggers.find("csv");
  REQUIRE(csv != nullptr);
  options.loggers.push_back(csv->factory(baton::PluginConfig::from_toml("file = \"table.csv\"", "csv")));
  auto trainer = baton::test::make_trainer(options, "mlp");
  trainer->check();
  CHECK_FALSE(fs::exists(dir / "run" / "table.csv"));  // nothing before fit
  trainer->fit();
  const Table table = read_table(dir / "run" / "table.csv");
  // 3 batches an epoch, 2 epochs; train/loss at each epoch's end (log_interval 50 batches), then the evaluation:
  // both in one row of that batch.
  REQUIRE(table.rows.size() == 2);
  CHECK(table.rows[0][1] == "3");
  CHECK(table.rows[1][1] == "6");
  CHECK(std::find(table.header.begin(), table.header.end(), "eval/accuracy") != table.header.end());

  // Without a run folder the trainer writes nothing: the logger is never opened.
  baton::TrainerOptions nowhere = baton::test::quiet_options();
  auto recorded = std::make_shared<std::vector<std::string>>();
  struct Opened final : baton::LoggerDestination {
    explicit Opened(std::shared_ptr<std::vector<std::string>> calls) : calls(std::move(calls)) {}
    std::shared_ptr<std::vector<std::string>> calls;
    void open(const baton::LoggerContext&) override { calls->push_back("open"); }
    void log_metrics(const baton::Timestamp&, const std::vector<std::pair<std::string, double>>&) override {
      calls->push_back("metrics");
    }
  };
  nowhere.loggers.push_back(std::make_shared<Opened>(recorded));
  baton::test::make_trainer(nowhere, "mlp")->fit();
  CHECK(recorded->empty());
}

}  // namespace csv_test
