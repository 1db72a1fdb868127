#include "logging/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "baton/time.h"

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;
using Metrics = std::vector<std::pair<std::string, double>>;

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kBarWidth = 30;

std::string lowercase_env(const char* name) {
  const char* value = std::getenv(name);
  std::string text = value ? value : "";
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string bar(std::int64_t done, std::int64_t total) {
  const auto filled = static_cast<int>(std::clamp<std::int64_t>(done * kBarWidth / total, 0, kBarWidth));
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(kBarWidth - filled), '.') + "] ";
}

std::string metrics_text(const Metrics& metrics) {
  std::string text;
  for (const auto& [name, value] : metrics) text += " " + name + "=" + format_number(value, 4);
  return text;
}

}  // namespace

ProgressBar::ProgressBar(ProgressOptions options)
    : options_(std::move(options)),
      start_(Clock::now()),
      last_draw_(start_ - kRedrawInterval),
      done_(options_.initial),
      last_plain_(options_.initial) {}

ProgressBar::~ProgressBar() {
  try {
    finish();
  } catch (...) {
    // A destructor must not throw; a failed console write is not worth terminating the run for.
  }
}

std::string ProgressBar::format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  const auto total = static_cast<std::int64_t>(std::llround(std::max(seconds, 0.0)));
  const std::int64_t hours = total / 3600, minutes = total / 60 % 60, secs = total % 60;
  char buffer[48];
  if (hours > 0)
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", static_cast<long long>(hours),
                  static_cast<long long>(minutes), static_cast<long long>(secs));
  else
    std::snprintf(buffer, sizeof buffer, "%lld:%02lld", static_cast<long long>(minutes), static_cast<long long>(secs));
  return buffer;
}

// "<label> 123/469 45.6 ba/s ETA 0:07 loss=0.4321"; the final line shows the elapsed time instead of the ETA.
std::string ProgressBar::status(const Metrics& metrics, bool final) const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done_ - options_.initial) / elapsed : 0.0;
  std::string text = options_.label + " ";
  if (options_.terminal && options_.total > 0) text += bar(done_, options_.total);
  text += std::to_string(done_);
  if (options_.total > 0) text += "/" + std::to_string(options_.total);
  text += " " + format_decimals(rate, 1) + " " + options_.unit + "/s";
  if (final)
    text += " in " + format_duration(elapsed);
  else if (options_.total > 0 && rate > 0)
    text += " ETA " + format_duration(static_cast<double>(options_.total - done_) / rate);
  return text + metrics_text(metrics);
}

void ProgressBar::draw(const Metrics& metrics, bool final) {
  const std::string text = status(metrics, final);
  if (options_.terminal)
    std::fprintf(options_.out, "\r%s\x1b[K%s", text.c_str(), final ? "\n" : "");  // ESC[K clears a longer old line
  else
    std::fprintf(options_.out, "%s\n", text.c_str());
  std::fflush(options_.out);
}

void ProgressBar::update(std::int64_t done, const Metrics& metrics) {
  if (finished_) return;
  done_ = done;
  if (options_.terminal) {
    const auto now = Clock::now();
    if (now - last_draw_ < kRedrawInterval) return;
    last_draw_ = now;
    draw(metrics, false);
    return;
  }
  // The last step is left to finish(), which prints it with the elapsed time.
  const bool last_step = options_.total > 0 && done >= options_.total;
  if (options_.plain_every > 0 && done - last_plain_ >= options_.plain_every && !last_step) {
    last_plain_ = done;
    draw(metrics, false);
  }
}

void ProgressBar::finish(const Metrics& metrics) {
  if (finished_) return;
  finished_ = true;
  draw(metrics, true);
}

bool is_terminal(std::FILE* out) {
  const std::string ci = lowercase_env("CI");
  if (ci == "true" || ci == "1" || ci == "yes") return false;
  if (lowercase_env("TERM") == "dumb") return false;
  return out != nullptr && isatty(fileno(out)) == 1;
}

}  // namespace baton
