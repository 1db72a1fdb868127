#include "logging/run_logger.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "sdk/exception_text.h"

namespace baton {
namespace {

int open_metrics_file(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) throw Error("metrics file '" + path + "': cannot create its folder: " + ec.message());
  // Appending keeps the lines of the interrupted run when a resumed run writes to the same folder.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("metrics file '" + path + "': cannot open it for writing: " + std::strerror(errno));
  return fd;
}

void write_all(int fd, const std::string& path, const std::string& text) {
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) throw Error("metrics file '" + path + "': write failed: " + std::strerror(errno));
    data += written;
    left -= static_cast<std::size_t>(written);
  }
}

// A call into a destination, which may be a plugin library's code: its failure becomes a baton::Error (made here,
// so no exception type of the library outlives the call), as every call into a plugin is guarded.
template <class Call>
void guarded(Call call) {
  try {
    call();
  } catch (const Error& e) {
    throw Error(e.what());
  } catch (const std::exception& e) {
    throw Error("a logger failed: " + detail::exception_text(e));  // LibTorch's errors without their backtrace
  } catch (...) {
    throw Error("a logger failed: it threw something that is not a std::exception");
  }
}

}  // namespace

RunLogger::RunLogger(State& state, RunLoggerOptions options) : state_(state), options_(std::move(options)) {
  if (options_.rank == 0 && !options_.metrics_path.empty()) metrics_fd_ = open_metrics_file(options_.metrics_path);
}

RunLogger::~RunLogger() {
  try {
    flush();
    close_destinations();
  } catch (...) {
    // Nothing sensible to do with a failed write while tearing down; the destructor must not throw.
  }
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

namespace {

// The fields a metrics.jsonl line is stamped with.
bool same_line_time(const Timestamp& a, const Timestamp& b) {
  return a.epoch == b.epoch && a.batch == b.batch && a.sample == b.sample;
}

// One convention for every line (docs/cli.md): `epoch` counts the epochs completed when the value was logged, an
// epoch being complete once its last batch is. Between that batch and epoch_end the trainer's counter has not
// moved yet, so a value logged there (train/loss at the epoch's end, a plugin's batch_end metric) would read one
// epoch less than the evaluation logged right after, for the same moment.
Timestamp line_time(const State& state) {
  Timestamp at = state.timestamp();
  const std::int64_t per_epoch = state.progress.batches_per_epoch;
  if (per_epoch > 0 && at.batch_in_epoch == per_epoch) at.advance_epoch();
  return at;
}

}  // namespace

void RunLogger::log_metric(std::string_view name, double value) {
  const std::string key(name);
  state_.metrics[key] = value;
  const Timestamp now = line_time(state_);
  if (pending_.empty() || !same_line_time(pending_.back().at, now) || pending_.back().values.count(key))
    pending_.push_back(PendingLine{now, {}});
  pending_.back().values[key] = value;
  if (capturing_) {
    auto it = std::find_if(captured_.begin(), captured_.end(), [&](const auto& item) { return item.first == key; });
    if (it == captured_.end())
      captured_.emplace_back(key, value);
    else
      it->second = value;
  }
}

void RunLogger::begin_capture() {
  capturing_ = true;
  captured_.clear();
}

std::vector<std::pair<std::string, double>> RunLogger::end_capture() {
  capturing_ = false;
  return std::move(captured_);
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
  std::vector<PendingLine> lines;
  lines.swap(pending_);  // lines that failed are not retried on top of the next ones
  if (metrics_fd_ >= 0) {
    std::string text;
    for (const auto& pending : lines) {
      const Timestamp& at = pending.at;
      // ordered_json keeps the time fields first, which makes the file easy to read by eye.
      nlohmann::ordered_json line = {{"epoch", at.epoch}, {"batch", at.batch}, {"sample", at.sample}};
      for (const auto& [name, value] : pending.values) line[name] = value;
      text += line.dump() + "\n";
    }
    write_all(metrics_fd_, options_.metrics_path, text);
  }
  if (!destinations_open_) return;
  for (const auto& pending : lines) {
    const std::vector<std::pair<std::string, double>> values(pending.values.begin(), pending.values.end());
    for (const auto& destination : options_.destinations)
      guarded([&] { destination->log_metrics(pending.at, values); });
  }
  for (const auto& destination : options_.destinations) guarded([&] { destination->flush(); });
}

void RunLogger::log_image(std::string_view name, const Image& image) {
  if (!destinations_open_) return;
  const Timestamp now = line_time(state_);
  const std::string key(name);
  for (const auto& destination : options_.destinations) guarded([&] { destination->log_image(now, key, image); });
}

void RunLogger::open_destinations(const LoggerContext& context) {
  if (options_.rank != 0 || destinations_open_ || options_.destinations.empty()) return;
  for (std::size_t i = 0; i < options_.destinations.size(); ++i) {
    try {
      guarded([&] { options_.destinations[i]->open(context); });
    } catch (...) {
      // Those already open hold files: close them so the error leaves nothing half-written behind.
      for (std::size_t j = 0; j < i; ++j) try {
          options_.destinations[j]->close();
        } catch (...) {
        }
      throw;
    }
  }
  destinations_open_ = true;
}

void RunLogger::close_destinations(const RunEnd& end) {
  if (!destinations_open_) return;
  destinations_open_ = false;
  std::exception_ptr first;
  for (const auto& destination : options_.destinations) {
    try {
      guarded([&] {
        destination->flush();
        if (auto* recorder = dynamic_cast<RunEndRecorder*>(destination.get())) recorder->run_ended(end);
        destination->close();
      });
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace baton
