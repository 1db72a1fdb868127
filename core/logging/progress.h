#pragma once
// Console progress for long work. On a terminal: one bar redrawn in place with count, rate, ETA and a few metrics,
// throttled to a few redraws per second. Otherwise (CI, pipes, files): a plain line every `plain_every` steps and
// at the end, so logs stay readable.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>


namespace baton {

struct ProgressOptions {
  std::string label;          // "epoch 1/3", "eval"
  std::int64_t total = 0;     // steps; 0 when unknown
  std::string unit = "ba";    // shown after the rate: "12.3 ba/s"
  std::FILE* out = stderr;
  bool terminal = false;      // draw a bar (callers pass is_terminal(out) && the user's setting)
  std::int64_t plain_every = 50;
  std::int64_t initial = 0;   // steps already done when the bar starts (a resumed epoch); not counted in the rate
};

class ProgressBar {
 public:
  explicit ProgressBar(ProgressOptions options);
  ~ProgressBar();  // finishes the line if finish() was not called
  /// Advances to `done` steps; `metrics` are shown as "name=value".
  void update(std::int64_t done, const std::vector<std::pair<std::string, double>>& metrics = {});
  /// Draws the final state and ends the line.
  void finish(const std::vector<std::pair<std::string, double>>& metrics = {});

  /// "1:02:03", "4:05" (for ETA and elapsed).
  static std::string format_duration(double seconds);

 private:
  std::string status(const std::vector<std::pair<std::string, double>>& metrics, bool final) const;
  void draw(const std::vector<std::pair<std::string, double>>& metrics, bool final);

  ProgressOptions options_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::int64_t done_ = 0;
  std::int64_t last_plain_ = 0;
  bool finished_ = false;
};

/// Whether `out` is an interactive terminal (isatty), false under CI=true.
bool is_terminal(std::FILE* out);

}  // namespace baton
