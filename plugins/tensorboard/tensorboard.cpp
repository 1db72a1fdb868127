// tensorboard: a logger destination writing the run's metrics and images as a TensorBoard event file under the run
// folder (Composer's TensorboardLogger; docs/logging.md). Each metric is a scalar under its own name as the tag
// ("train/loss", "eval/accuracy" for the EMA weights, "eval_raw/accuracy" for the raw ones) at its batch count as
// the step; each image a plugin logs (baton::log_image: the diffusion sample grids) a PNG image summary.
//
// The file is a sequence of TFRecords, each an Event message (event_records.h): a little-endian uint64 length,
// the masked CRC-32C of those 8 bytes, the record, the masked CRC-32C of the record. Every run, a resumed
// one included, starts a new file, since TensorBoard reads all the files of a folder in name order as one history;
// a resumed run's file begins with a SessionLog START at the first step it logs, which makes TensorBoard drop what
// the interrupted run's files hold from that step on (the resumed run logs those steps again). At the checkpoint's
// own step, which the START keeps, a resumed run writes only the tags the earlier files do not hold there.
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "baton/components.h"
#include "baton/error.h"
#include "baton/image.h"
#include "baton/logger_destination.h"
#include "append_file.h"
#include "event_records.h"

namespace {

namespace fs = std::filesystem;
namespace pb = baton_tensorboard;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class TensorboardLogger final : public baton::LoggerDestination {
 public:
  explicit TensorboardLogger(const baton::PluginConfig& config)
      : folder_(config.get_or<std::string>("dir", "tb")), out_("tensorboard logger") {
    if (folder_.empty() || fs::path(folder_).is_absolute() || folder_.find("..") != std::string::npos)
      config.fail("dir", "expected a folder inside the run folder (relative, no \"..\"), got \"" + folder_ + "\"");
  }

  void open(const baton::LoggerContext& context) override {
    const fs::path folder = fs::path(context.run_dir) / folder_;
    std::error_code ec;
    fs::create_directories(folder, ec);
    if (ec) throw baton::Error("tensorboard logger: cannot create '" + folder.string() + "': " + ec.message());
    // TensorBoard reads a folder's event files in name order: the seconds, then the nanoseconds (fixed width),
    // put a resumed run's file after those of the run it continues, even within one second.
    const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch).count();
    const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count();
    std::array<char, 256> host{};
    if (::gethostname(host.data(), host.size() - 1) != 0 || host[0] == '\0') std::strcpy(host.data(), "localhost");
    char name[512];
    std::snprintf(name, sizeof name, "events.out.tfevents.%010lld.%s.%020lld.baton", static_cast<long long>(seconds),
                  host.data(), static_cast<long long>(nanos));
    out_.open((folder / name).string(), /*create_new=*/true);
    write(pb::file_version_event(now_seconds(), "brain.Event:2"));
    resumed_at_.reset();
    logged_at_resume_.clear();
    if (context.resumed) {
      resumed_at_ = context.start.batch;
      logged_at_resume_ = tags_at_step(folder, context.start.batch);
      // Steps up to the checkpoint's are the interrupted run's and stay; from the next one on, the resumed run's.
      write(pb::session_start_event(now_seconds(), context.start.batch + 1));
    }
  }

  void log_metrics(const baton::Timestamp& at, const std::vector<std::pair<std::string, double>>& values) override {
    std::vector<std::pair<std::string, float>> scalars;
    for (const auto& [name, value] : values) {
      // At the checkpoint's own step the earlier files may hold the value already (the START record purges only
      // the later steps): written once, so no tag has two values at a step.
      if (resumed_at_ && at.batch == *resumed_at_ && !logged_at_resume_.insert(name).second) continue;
      scalars.emplace_back(name, static_cast<float>(value));  // TensorBoard's scalars are float32
    }
    if (!scalars.empty()) write(pb::scalars_event(now_seconds(), at.batch, scalars));
  }

  void log_image(const baton::Timestamp& at, const std::string& name, const baton::Image& image) override {
    const std::vector<std::uint8_t> png = baton::encode_png(image, "tensorboard logger: image '" + name + "'");
    pb::ImageSummary picture;
    picture.height = static_cast<std::int32_t>(image.height);
    picture.width = static_cast<std::int32_t>(image.width);
    picture.colorspace = static_cast<std::int32_t>(image.channels);
    picture.png.assign(png.begin(), png.end());
    write(pb::image_event(now_seconds(), at.batch, name, picture));
  }

  // Records are written whole as they come (one write each, appended), so a reader sees complete records; no
  // fsync (a crash loses at most the last records, as metrics.jsonl's lines).
  void flush() override {}

  void close() override { out_.close(); }

 private:
  void write(const std::string& event) { out_.append(pb::tfrecord(event)); }

  // The scalar tags the event files already in `folder` hold at `step`. A record that does not read back (a file
  // cut short by a crash) ends that file's reading: what it held before is what TensorBoard shows too.
  std::set<std::string> tags_at_step(const fs::path& folder, std::int64_t step) const {
    std::set<std::string> tags;
    for (const auto& entry : fs::directory_iterator(folder)) {
      if (entry.path().filename().string().find("tfevents") == std::string::npos) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string header(12, '\0');
      while (in.read(header.data(), 12)) {
        std::uint64_t length = 0;
        for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(header[i]);
        if (length > (std::uint64_t{1} << 31)) break;
        std::string payload(length + 4, '\0');
        if (!in.read(payload.data(), static_cast<std::streamsize>(payload.size()))) break;
        payload.resize(length);
        const std::optional<pb::ScalarTags> event = pb::read_scalar_tags(payload);
        if (!event) break;
        if (event->step == step) tags.insert(event->tags.begin(), event->tags.end());
      }
    }
    return tags;
  }

  std::string folder_;
  baton_plugins::AppendFile out_;
  std::optional<std::int64_t> resumed_at_;  // the checkpoint's step, in a resumed run
  std::set<std::string> logged_at_resume_;  // the tags the event files hold at that step
};

void register_tensorboard(baton::Components& components) {
  components.loggers.add("tensorboard",
                         "scalars and images as a TensorBoard event file; key dir (default tb, in the run folder)",
                         [](const baton::PluginConfig& config) { return std::make_shared<TensorboardLogger>(config); });
}

}  // namespace

BATON_COMPONENTS("tensorboard", "1.0.0", "logger tensorboard: TensorBoard event files", register_tensorboard)
