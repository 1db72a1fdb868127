// profiler: records `active` training batches after `wait` (Composer's and Lightning's profilers): every LibTorch
// operator and autograd function the run executes, and baton's events and each plugin's handler within them (the
// engine marks them as LibTorch user scopes "event/<name>" and "plugin/<id>/<name>"). It writes the record as a
// Chrome trace (<run_dir>/profiler/trace_rank<r>.json, the format PyTorch's profiler exports: chrome://tracing and
// Perfetto open it) and prints, at the end of the recording, where the time went: per event, per plugin handler and
// the operators that took most. Recording goes through ATen's RecordFunction callbacks, which every LibTorch baton
// builds with has (1.13 on), with or without Kineto. docs/algorithms.md has the keys and an example.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include <ATen/record_function.h>
#include <nlohmann/json.hpp>

#include "baton/durable_file.h"
#include "baton/plugin.h"

namespace {

using Clock = std::chrono::steady_clock;

// One finished scope: an operator, an autograd function, or baton's event or plugin handler.
struct Span {
  std::string name;
  const char* category;  // "operator", "autograd", "baton"
  double start_us;       // since the recording started
  double duration_us;
  std::uint64_t thread;
};

// What the RecordFunction callbacks write into (they are plain function pointers, so they reach it through
// g_recording, set only while one is under way).
struct Recording {
  Clock::time_point origin = Clock::now();
  std::mutex mutex;
  std::vector<Span> spans;
  std::map<std::thread::id, std::uint64_t> threads;  // small numbers for the trace's rows
};

std::atomic<Recording*> g_recording{nullptr};

struct Started final : at::ObserverContext {
  Clock::time_point at;
};

const char* category_of(at::RecordScope scope) {
  switch (scope) {
    case at::RecordScope::USER_SCOPE: return "baton";
    case at::RecordScope::BACKWARD_FUNCTION: return "autograd";
    default: return "operator";
  }
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  auto started = std::make_unique<Started>();
  started->at = Clock::now();
  return started;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  Recording* recording = g_recording.load();
  if (recording == nullptr || context == nullptr) return;
  const auto end = Clock::now();
  const auto begin = static_cast<Started*>(context)->at;
  Span span{fn.name(), category_of(fn.scope()),
            std::chrono::duration<double, std::micro>(begin - recording->origin).count(),
            std::chrono::duration<double, std::micro>(end - begin).count(), 0};
  std::lock_guard<std::mutex> lock(recording->mutex);
  auto [it, added] = recording->threads.emplace(std::this_thread::get_id(), recording->threads.size());
  span.thread = it->second;
  recording->spans.push_back(std::move(span));
}

struct Total {
  std::int64_t calls = 0;
  double us = 0;
};

std::string milliseconds(double us) { return baton::format_decimals(us / 1000.0, 3) + " ms"; }

class Profiler final : public baton::Callback {
 public:
  explicit Profiler(const baton::PluginConfig& config)
      : wait_(config.get_int_or("wait", 1, baton::Range::at_least(0), "batches before the recording starts")),
        active_(config.get_int_or("active", 5, baton::Range::at_least(1), "batches recorded")),
        operators_(config.get_or("operators", true)),
        top_(config.get_int_or("top", 10, baton::Range::at_least(0), "operators listed by their time")) {}

  void fit_start(baton::State& state, baton::Logger& logger) override {
    // From this fit's first batch: a resumed run is profiled too.
    first_ = state.progress.now.batch + wait_;
    logger.info("profiler: recording batches " + std::to_string(first_ + 1) + " to " +
                std::to_string(first_ + active_) + (operators_ ? " (events, plugins and operators)" : " (events and plugins)"));
  }

  // The recording covers whole batches: from the first one's data loading to the next one's, so the evaluation and
  // the checkpoint that follow a recorded batch are in it.
  void before_dataloader(baton::State& state, baton::Logger& logger) override {
    const std::int64_t batch = state.progress.now.batch;
    if (batch == first_ && !recording_ && !done_) start();
    else if (batch == first_ + active_ && recording_) finish(state, logger);
  }

  void fit_end(baton::State& state, baton::Logger& logger) override {
    if (recording_) finish(state, logger);
  }

  void close() override { stop(); }

 private:
  void start() {
    recording_ = std::make_unique<Recording>();
    g_recording.store(recording_.get());
    std::unordered_set<at::RecordScope> scopes = {at::RecordScope::USER_SCOPE};
    if (operators_) scopes.insert({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION});
    handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end).scopes(scopes));
    started_ = true;
  }

  void stop() {
    if (!started_) return;
    at::removeCallback(handle_);
    started_ = false;
    g_recording.store(nullptr);
  }

  void finish(baton::State& state, baton::Logger& logger) {
    stop();
    done_ = true;
    // A loader thread may still be finishing an operator: the record is copied under its lock, and kept alive
    // until the plugin closes.
    Recording copy;
    {
      std::lock_guard<std::mutex> lock(recording_->mutex);
      copy.spans = recording_->spans;
    }
    finished_.push_back(std::move(recording_));
    const Recording& recording = copy;
    const std::int64_t batches = std::min(state.progress.now.batch - first_, active_);
    if (!state.facts.run_dir().empty()) {
      const auto folder = std::filesystem::path(state.facts.run_dir()) / "profiler";
      std::filesystem::create_directories(folder);
      const std::string path = (folder / ("trace_rank" + std::to_string(state.facts.rank()) + ".json")).string();
      baton::write_file_atomic(path, trace_json(recording, state.facts.rank()));
      logger.info("profiler: wrote " + path + " (" + std::to_string(recording.spans.size()) +
                  " spans; open it in chrome://tracing or ui.perfetto.dev)");
    }
    report(recording, batches, logger);
  }

  static std::string trace_json(const Recording& recording, int rank) {
    nlohmann::json events = nlohmann::json::array();
    for (const Span& s : recording.spans)
      events.push_back({{"name", s.name}, {"cat", s.category}, {"ph", "X"}, {"ts", s.start_us},
                        {"dur", s.duration_us}, {"pid", rank}, {"tid", s.thread}});
    return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
  }

  // The time per event, per plugin handler, and the operators that took most (inclusive of what they call).
  void report(const Recording& recording, std::int64_t batches, baton::Logger& logger) const {
    std::map<std::string, Total> events, handlers, operators;
    for (const Span& s : recording.spans) {
      const std::string& name = s.name;
      std::map<std::string, Total>* into = &operators;
      std::string key = name;
      if (name.rfind("event/", 0) == 0) {
        into = &events;
        key = name.substr(6);
      } else if (name.rfind("plugin/", 0) == 0) {
        into = &handlers;
        key = name.substr(7);
      }
      Total& t = (*into)[key];
      ++t.calls;
      t.us += s.duration_us;
    }
    const auto table = [&](const std::string& title, const std::map<std::string, Total>& totals, std::size_t limit) {
      std::vector<std::pair<std::string, Total>> rows(totals.begin(), totals.end());
      std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
      if (rows.size() > limit) rows.resize(limit);
      if (rows.empty()) return;
      logger.info("profiler: " + title + " over " + std::to_string(batches) + " batches (total, calls, mean):");
      for (const auto& [name, t] : rows)
        logger.info("  " + name + "  " + milliseconds(t.us) + "  " + std::to_string(t.calls) + "  " +
                    milliseconds(t.us / static_cast<double>(t.calls)));
    };
    table("time in events", events, events.size());
    table("time in each plugin's handlers", handlers, handlers.size());
    table("operators by time", operators, static_cast<std::size_t>(top_));
  }

  std::int64_t wait_, active_;
  bool operators_;
  std::int64_t top_;
  std::int64_t first_ = 0;
  std::unique_ptr<Recording> recording_;               // the one under way
  std::vector<std::unique_ptr<Recording>> finished_;  // kept until close (see finish)
  at::CallbackHandle handle_ = 0;
  bool started_ = false;
  bool done_ = false;
};

}  // namespace

BATON_PLUGIN(Profiler, "profiler", "1.0.0",
             "records batches' operators, events and plugin handlers as a Chrome trace, with a table of where the time went")
