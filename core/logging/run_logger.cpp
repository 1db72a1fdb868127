#include "logging/run_logger.h"

#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "baton/error.h"

namespace baton {
namespace {

void open_metrics_file(std::ofstream& file, const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw Error("metrics file '" + path + "': cannot create its folder: " + ec.message());
  // Appending keeps the lines of the interrupted run when a resumed run writes to the same folder.
  file.open(path, std::ios::app);
  if (!file) throw Error("metrics file '" + path + "': cannot open it for writing");
}

}  // namespace

RunLogger::RunLogger(State& state, RunLoggerOptions options) : state_(state), options_(std::move(options)) {
  if (options_.rank == 0 && !options_.metrics_path.empty()) open_metrics_file(metrics_file_, options_.metrics_path);
}

RunLogger::~RunLogger() {
  try {
    flush();
  } catch (...) {
    // Nothing sensible to do with a failed write while tearing down; the destructor must not throw.
  }
}

void RunLogger::log_metric(std::string_view name, double value) {
  const std::string key(name);
  state_.metrics[key] = value;
  pending_[key] = value;
}

void RunLogger::info(std::string_view message) {
  if (options_.rank != 0 || !options_.console || options_.quiet) return;
  std::fprintf(options_.out, "%.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(options_.out);
}

void RunLogger::warn(std::string_view message) {
  warnings_.emplace_back(message);
  if (options_.rank != 0 || !options_.console) return;
  std::fprintf(options_.out, "warning: %.*s\n", static_cast<int>(message.size()), message.data());
  std::fflush(options_.out);
}

void RunLogger::flush() {
  if (pending_.empty()) return;
  if (metrics_file_.is_open()) {
    const Timestamp& now = state_.timestamp();
    // ordered_json keeps the time fields first, which makes the file easy to read by eye.
    nlohmann::ordered_json line = {{"epoch", now.epoch}, {"batch", now.batch}, {"sample", now.sample}};
    for (const auto& [name, value] : pending_) line[name] = value;
    metrics_file_ << line.dump() << '\n';
    metrics_file_.flush();
    if (!metrics_file_) throw Error("metrics file '" + options_.metrics_path + "': write failed");
  }
  pending_.clear();
}

}  // namespace baton
