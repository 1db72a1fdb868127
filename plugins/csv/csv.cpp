// csv: a logger destination writing the run's metrics as one wide CSV table (docs/logging.md): the columns epoch,
// batch, sample, then one per metric in the order first logged; one row per logged time (step), holding every value
// logged at it. A metric that appears mid-run adds a column: the file is rewritten with the longer header (the rows
// so far get an empty cell for it) through a temporary file, fsync and rename, so a reader or a crash finds the
// old complete file or the new one, never a header that disagrees with its rows.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "baton/text.h"
#include "baton/components.h"
#include "baton/durable_file.h"
#include "baton/error.h"
#include "baton/logger_destination.h"
#include "append_file.h"

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTimeColumns = {"epoch", "batch", "sample"};

// RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The fields of one line as csv_field wrote them.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// The shortest text that reads back as the same double; nan, inf and -inf for the others.
class CsvLogger final : public baton::LoggerDestination {
 public:
  explicit CsvLogger(const baton::PluginConfig& config)
      : file_(config.get_or<std::string>("file", "metrics.csv")), out_("csv logger") {
    if (file_.empty() || file_.find('/') != std::string::npos || file_ == "." || file_ == "..")
      config.fail("file", "expected a file name in the run folder (no '/'), got \"" + file_ + "\"");
    if (file_ == "metrics.jsonl") config.fail("file", "metrics.jsonl is the run's own metrics file; name another");
  }

  void open(const baton::LoggerContext& context) override {
    path_ = (fs::path(context.run_dir) / file_).string();
    std::error_code ec;
    fs::create_directories(context.run_dir, ec);
    if (ec) fail("cannot create the run folder '" + context.run_dir + "': " + ec.message());
    columns_.clear();
    std::vector<std::string> rows;
    // A resumed run continues the file: the rows up to the checkpoint's batch stay, those the interrupted run
    // wrote after it go (the resumed run logs those steps again). A fresh run starts a new file.
    if (context.resumed && fs::exists(path_)) {
      std::ifstream in(path_);
      if (!in) fail(std::string("cannot read it to continue it: ") + std::strerror(errno));
      std::string line;
      if (std::getline(in, line)) {
        const auto header = csv_fields(line);
        if (header.size() < kTimeColumns.size() ||
            !std::equal(kTimeColumns.begin(), kTimeColumns.end(), header.begin()))
          fail("its first line is not a header starting with epoch,batch,sample: cannot continue it");
        columns_.assign(header.begin() + static_cast<std::ptrdiff_t>(kTimeColumns.size()), header.end());
      }
      while (std::getline(in, line)) {
        const auto fields = csv_fields(line);
        long long batch = 0;
        // A row without a cell per column (a line cut by a crash) is dropped.
        if (fields.size() != kTimeColumns.size() + columns_.size() ||
            std::from_chars(fields[1].data(), fields[1].data() + fields[1].size(), batch).ec != std::errc())
          continue;
        if (batch <= context.start.batch) rows.push_back(line);
      }
    }
    index_.clear();
    for (std::size_t i = 0; i < columns_.size(); ++i) index_[columns_[i]] = i;
    row_.reset();
    row_values_.clear();
    // The row of the checkpoint's own step stays open, so what the resumed run logs at that step (a plugin's
    // settings at fit_start) joins it rather than making a second row of that step.
    if (!rows.empty() && take_open_row(rows.back(), context.start.batch)) rows.pop_back();
    rewrite(rows, 0);
  }

  void log_metrics(const baton::Timestamp& at,
                   const std::vector<std::pair<std::string, double>>& values) override {
    // Values of one step share a row; a second value of a name at the same step starts a new row, so none is lost.
    bool repeated = false;
    for (const auto& [name, value] : values) repeated = repeated || row_values_.count(name) > 0;
    if (row_ && (!same_time(*row_, at) || repeated)) write_row();
    if (!row_) row_ = at;
    std::size_t added = 0;
    for (const auto& [name, value] : values) {
      if (!index_.count(name)) {
        index_[name] = columns_.size();
        columns_.push_back(name);
        ++added;
      }
      row_values_[name] = value;
    }
    if (added > 0) grow_header(added);
  }

  // The row of the current step is written once the step is over (the next step's values, or the end of the run),
  // so the values logged at one step at different moments (train/loss, then the evaluation) share one row.
  void flush() override {}

  void close() override {
    if (row_) write_row();
    out_.close();
  }

 private:
  [[noreturn]] void fail(const std::string& reason) const {
    throw baton::Error("csv logger: file '" + path_ + "': " + reason);
  }

  // Reads `line` back into the open row when it is a row of step `batch`, written with the current columns.
  bool take_open_row(const std::string& line, std::int64_t batch) {
    const auto fields = csv_fields(line);
    if (fields.size() != kTimeColumns.size() + columns_.size()) return false;
    std::int64_t time[3] = {0, 0, 0};
    for (std::size_t i = 0; i < 3; ++i)
      if (std::from_chars(fields[i].data(), fields[i].data() + fields[i].size(), time[i]).ec != std::errc())
        return false;
    if (time[1] != batch) return false;
    std::map<std::string, double> values;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const std::string& text = fields[kTimeColumns.size() + i];
      if (text.empty()) continue;
      double value = 0;
      if (std::from_chars(text.data(), text.data() + text.size(), value).ec != std::errc()) return false;
      values[columns_[i]] = value;
    }
    baton::Timestamp at;
    at.epoch = time[0];
    at.batch = time[1];
    at.sample = time[2];
    row_ = at;
    row_values_ = std::move(values);
    return true;
  }

  static bool same_time(const baton::Timestamp& a, const baton::Timestamp& b) {
    return a.epoch == b.epoch && a.batch == b.batch && a.sample == b.sample;
  }

  std::string header() const {
    std::string line;
    for (const auto& name : kTimeColumns) line += (line.empty() ? "" : ",") + name;
    for (const auto& name : columns_) line += "," + csv_field(name);
    return line + "\n";
  }

  // Replaces the file with the header and `rows`, each given `extra` empty cells for the columns added since it
  // was written; the open descriptor then appends to the new file.
  void rewrite(const std::vector<std::string>& rows, std::size_t extra) {
    std::string content = header();
    const std::string padding(extra, ',');
    for (const auto& row : rows) content += row + padding + "\n";
    out_.close_quietly();
    try {
      baton::write_file_atomic(path_, content);
    } catch (const baton::Error& e) {
      throw baton::Error("csv logger: " + std::string(e.what()));
    }
    out_.open(path_, /*create_new=*/false);
  }

  void grow_header(std::size_t added) {
    std::ifstream in(path_);
    if (!in) fail(std::string("cannot read it to add a column: ") + std::strerror(errno));
    std::string line;
    std::getline(in, line);  // the old header
    std::vector<std::string> rows;
    while (std::getline(in, line)) rows.push_back(line);
    rewrite(rows, added);
  }

  void write_row() {
    std::string line = std::to_string(row_->epoch) + "," + std::to_string(row_->batch) + "," +
                       std::to_string(row_->sample);
    for (const auto& name : columns_) {
      line += ",";
      if (auto it = row_values_.find(name); it != row_values_.end()) line += baton::format_exact(it->second);
    }
    line += "\n";
    row_.reset();
    row_values_.clear();
    out_.append(line);
  }

  std::string file_;
  std::string path_;
  baton_plugins::AppendFile out_;
  std::vector<std::string> columns_;  // the metric columns, after the time columns
  std::map<std::string, std::size_t> index_;
  std::optional<baton::Timestamp> row_;  // the step whose row is being filled
  std::map<std::string, double> row_values_;
};

void register_csv(baton::Components& components) {
  components.loggers.add("csv",
                         "every metric in one CSV table, a column per metric, a row per step; key file "
                         "(default metrics.csv, in the run folder)",
                         [](const baton::PluginConfig& config) { return std::make_shared<CsvLogger>(config); });
}

}  // namespace

BATON_COMPONENTS("csv", "1.0.0", "logger csv: metrics as a CSV table", register_csv)
