#pragma once
// Logger destinations (Composer's LoggerDestination): where the run's metrics and images go besides metrics.jsonl.
// Every metric the run logs (Logger::log_metric: the trainer's, every plugin's) reaches each destination once, with
// the time it was logged at, when the run's logger writes its metrics.jsonl lines (one place, so every destination
// sees what the file sees); images (log_image below) reach them at once. Only rank 0 opens destinations and feeds
// them; on other ranks they are never opened and get nothing.
//
// A destination is registered by name (Components::loggers, baton/components.h) and chosen in a config with a
// [[loggers]] table (name = "csv", plus its keys), or from C++ through TrainerOptions::loggers. docs/logging.md.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/export.h"
#include "baton/plugin_config.h"
#include "baton/time.h"

namespace baton {

class Logger;

/// An 8-bit image: `height` rows top to bottom, each `width` pixels of `channels` values (1 grey, 3 RGB, 4 RGBA),
/// so pixels.size() == height * width * channels.
struct BATON_API Image {
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::int64_t channels = 0;
  std::vector<std::uint8_t> pixels;
};

/// What a destination is told when it opens, at fit start. Fields are only ever appended (a destination built
/// against an earlier SDK reads the ones it knows).
struct BATON_API LoggerContext {
  std::string run_dir;   // the run folder (never empty: a run that writes nothing opens no destination)
  bool resumed = false;  // the run continues from a checkpoint
  Timestamp start;       // where it starts: zero, or the checkpoint's time when resumed
  std::string config_text{};  // the resolved config as TOML (TrainerOptions::config_text; an embedding program's may
                            // be empty or not TOML), for destinations that record a run's parameters
  /// The run's logger, for warnings a destination has to give without failing the run (a tracking server that
  /// stopped answering). Null from code that opens a destination by hand. Call it only from the thread that
  /// calls the destination.
  Logger* logger = nullptr;
};

/// How a run ended, for destinations that record it (a tracking server's run status).
struct BATON_API RunEnd {
  bool failed = false;       // it ended with an error (`message` is its text)
  bool interrupted = false;  // SIGINT/SIGTERM stopped it (after saving; `--resume auto` continues it)
  std::string message;       // the error, or why it stopped early (empty when it reached max_duration)
};

class BATON_API LoggerDestination {
 public:
  virtual ~LoggerDestination();
  /// Opens the destination's files (fit start; `baton check` never calls it, so it creates nothing). Throws
  /// baton::Error naming the file and the system's reason when it cannot.
  virtual void open(const LoggerContext& context) = 0;
  /// The values logged at one time, sorted by name; called in the order they were logged. A name may come again
  /// at the same time (logged twice before a flush) in a later call.
  virtual void log_metrics(const Timestamp& at, const std::vector<std::pair<std::string, double>>& values) = 0;
  /// An image logged at `at` (a sample grid); ignored by default (a destination without images).
  virtual void log_image(const Timestamp& at, const std::string& name, const Image& image);
  /// Makes what was logged so far durable enough to read (end of a flush of metrics.jsonl).
  virtual void flush();
  /// Once at the end of the run, on every exit path after open.
  virtual void close();
};

/// A destination that records how the run ended derives from this as well (the trainer looks for it with
/// dynamic_cast, so LoggerDestination's own virtual functions, and destinations built without it, are unchanged):
/// run_ended is called once, after the last flush and before close, on every exit path after open.
class BATON_API RunEndRecorder {
 public:
  virtual ~RunEndRecorder();
  virtual void run_ended(const RunEnd& end) = 0;
};

/// Builds a destination from its [[loggers]] table (all keys but `name`), as the other component factories do.
using LoggerFactory = std::function<std::shared_ptr<LoggerDestination>(const PluginConfig& config)>;

/// What the run's logger implements so that plugins can log images (baton::log_image); a Logger that does not
/// (a test's) drops them.
class BATON_API ImageLogger {
 public:
  virtual ~ImageLogger();
  virtual void log_image(std::string_view name, const Image& image) = 0;
};

/// Logs an image under `name` ("samples/ema") at the current time to every destination that keeps images
/// (tensorboard); a no-op when the logger has no destinations for them. Throws baton::Error for an image whose
/// pixels do not match its size.
BATON_API void log_image(Logger& logger, std::string_view name, const Image& image);

}  // namespace baton
