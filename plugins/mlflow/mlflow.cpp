// mlflow: a logger destination sending the run to an MLflow tracking server over its REST API (Composer's and
// Lightning's MLFlowLogger; docs/logging.md). At open it finds or creates the experiment, creates the run (or, when
// the run resumes, continues the MLflow run its folder's mlflow.json names) and logs the resolved config as the
// run's parameters and as the artifact config.toml; every metric then goes at its batch count as the step, every
// image as a PNG artifact images/<name>/step_<batch>.png, and at the end the run's exports (model.safetensors,
// ema.safetensors) as artifacts and its status saying how it ended (FINISHED, FAILED with the error as the tag
// baton.error, KILLED after SIGINT/SIGTERM).
//
// Training never waits on the server: values are queued and a thread of the logger sends them (one request per
// flush_interval, up to 1000 values each). A server that stops answering costs warnings, not the run: what could
// not be sent is kept and sent when it answers again (metrics.jsonl has everything anyway); only at open, before
// any training, is an unreachable server an error.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/components.h"
#include "baton/durable_file.h"
#include "baton/error.h"
#include "baton/image.h"
#include "baton/logger.h"
#include "baton/logger_destination.h"
#include "mlflow_rest.h"
#include "run_params.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using baton_mlflow::Reply;
using baton_mlflow::Rest;

constexpr std::size_t kMetricsPerRequest = 1000;  // MLflow's log-batch limits
constexpr std::size_t kParamsPerRequest = 100;
constexpr std::size_t kMostQueued = 1000000;       // values kept while the server does not answer
const char* const kRunFile = "mlflow.json";       // in the run folder: which MLflow run a resumed run continues

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

// MLflow accepts letters, digits and "_-. /:" in metric names; baton's names ("eval/accuracy") already are.
std::string metric_key(const std::string& name) {
  std::string key = name;
  for (char& c : key) {
    const bool allowed = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
                         c == ' ' || c == '/' || c == ':';
    if (!allowed) c = '_';
  }
  return key;
}

// JSON has no NaN or infinity; MLflow's API reads them as these strings.
json metric_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return value;
}

json tag(const std::string& key, const std::string& value) { return json{{"key", key}, {"value", value}}; }

struct Artifact {
  std::string path;  // relative to the run's artifact root
  std::string bytes;
  std::string content_type;
  std::string file{};  // instead of bytes: a file sent from disk (an export)
};

class MlflowLogger final : public baton::LoggerDestination, public baton::RunEndRecorder {
 public:
  explicit MlflowLogger(const baton::PluginConfig& config)
      : tracking_uri_(config.get_or<std::string>("tracking_uri", env_or("MLFLOW_TRACKING_URI", ""))),
        experiment_(config.get_or<std::string>("experiment_name", env_or("MLFLOW_EXPERIMENT_NAME", "baton"))),
        run_name_(config.get_or<std::string>("run_name", "")),
        run_id_(config.get_or<std::string>("run_id", "")),
        log_config_(config.get_or<bool>("log_config", true)),
        log_exports_(config.get_or<bool>("log_exports", true)),
        interval_(config
                      .get_time_or("flush_interval", baton::Time(10, baton::TimeUnit::second),
                                   {baton::TimeUnit::second}, baton::TimeZero::allowed,
                                   "the most often values are sent")
                      .value()) {
    if (tracking_uri_.empty())
      config.fail("tracking_uri",
                  "no tracking server: give tracking_uri (the http:// address of `mlflow server`) or set "
                  "MLFLOW_TRACKING_URI");
    if (tracking_uri_.rfind("http://", 0) != 0 && tracking_uri_.rfind("https://", 0) != 0)
      config.fail("tracking_uri", "expected the http:// or https:// address of an MLflow tracking server, got \"" +
                                      tracking_uri_ + "\" (baton speaks MLflow's REST API, not its file store)");
    if (experiment_.empty()) config.fail("experiment_name", "expected a name, got an empty string");
    if (config.has("tags")) {
      const baton::PluginConfig tags = config.get<baton::PluginConfig>("tags");
      for (const auto& key : tags.keys()) tags_.emplace_back(key, tags.get<std::string>(key));
    }
  }

  ~MlflowLogger() override { stop_sender(); }

  void open(const baton::LoggerContext& context) override {
    logger_ = context.logger;
    run_dir_ = context.run_dir;
    opened_at_ = fs::file_time_type::clock::now();
    rest_ = std::make_unique<Rest>(tracking_uri_, /*timeout_seconds=*/60, /*retries=*/3);
    existing_params_.clear();
    already_logged_.clear();
    last_logged_ = -1;
    resumed_at_.reset();
    status_ = "FINISHED";
    end_message_.clear();
    const std::string continued = continued_run(context);
    json run;
    if (!continued.empty()) {
      run = rest_->call("GET", "runs/get", {{"run_id", continued}}).at("run");
      rest_->call("POST", "runs/update", {{"run_id", continued}, {"status", "RUNNING"}});
      note("mlflow logger: continuing MLflow run " + continued + " at " + tracking_uri_);
      if (context.resumed) resumed_at_ = context.start.batch;
      read_run(run);
    } else {
      run = create_run(context);
      note("mlflow logger: MLflow run " + run.at("info").at("run_id").get<std::string>() + " in experiment '" +
           experiment_ + "' at " + tracking_uri_);
    }
    const json& info = run.at("info");
    run_id_now_ = info.at("run_id").get<std::string>();
    experiment_id_ = info.at("experiment_id").get<std::string>();
    artifact_uri_ = info.value("artifact_uri", "");
    baton::write_file_atomic((fs::path(run_dir_) / kRunFile).string(),
                             json{{"tracking_uri", tracking_uri_},
                                  {"experiment_id", experiment_id_},
                                  {"run_id", run_id_now_}}
                                     .dump(2) +
                                 "\n");
    if (resumed_at_) {
      already_logged_ = logged_from(run, *resumed_at_);
      for (const auto& [key, step] : already_logged_) last_logged_ = std::max(last_logged_, step);
      if (last_logged_ > *resumed_at_)
        note("mlflow logger: the MLflow run holds values up to batch " + std::to_string(last_logged_) +
             ", past the checkpoint's batch " + std::to_string(*resumed_at_) +
             " (the interrupted run went on after saving); MLflow keeps one value per step, so those steps keep "
             "the values first logged, which a resumed run repeats");
    }
    if (log_config_) log_config(context.config_text);
    sender_ = std::thread([this] { send_loop(); });
  }

  void log_metrics(const baton::Timestamp& at, const std::vector<std::pair<std::string, double>>& values) override {
    const std::int64_t time = now_ms();
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [name, value] : values) {
      const std::string key = metric_key(name);
      // A continued run may hold the value already (at the checkpoint's step, or after it when the interrupted
      // run went on): one value per step and key.
      if (at.batch <= last_logged_ && !already_logged_.emplace(key, at.batch).second) continue;
      if (metrics_.size() >= kMostQueued) {
        metrics_.pop_front();
        ++dropped_;
      }
      metrics_.push_back(json{{"key", key}, {"value", metric_value(value)}, {"timestamp", time}, {"step", at.batch}});
    }
  }

  void log_image(const baton::Timestamp& at, const std::string& name, const baton::Image& image) override {
    const std::vector<std::uint8_t> png = baton::encode_png(image, "mlflow logger: image '" + name + "'");
    char step[32];
    std::snprintf(step, sizeof step, "step_%08lld.png", static_cast<long long>(at.batch));
    std::lock_guard<std::mutex> lock(mutex_);
    artifacts_.push_back(Artifact{"images/" + name + "/" + step, std::string(png.begin(), png.end()), "image/png"});
  }

  void flush() override {
    pass_on_messages();
    wake_.notify_one();
  }

  void run_ended(const baton::RunEnd& end) override {
    status_ = end.failed ? "FAILED" : end.interrupted ? "KILLED" : "FINISHED";
    end_message_ = end.message;
    if (!end.failed && log_exports_) queue_exports();
  }

  void close() override {
    stop_sender();
    pass_on_messages();
    if (!rest_) return;
    std::size_t unsent_metrics = 0;
    std::size_t unsent_images = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      unsent_metrics = metrics_.size() + dropped_;
      unsent_images = artifacts_.size();
      metrics_.clear();
      artifacts_.clear();
      dropped_ = 0;
    }
    if (unsent_metrics + unsent_images > 0)
      warn("mlflow logger: " + std::to_string(unsent_metrics) + " values and " + std::to_string(unsent_images) +
           " artifacts could not be sent to " + tracking_uri_ + " (metrics.jsonl holds every value, the run folder "
           "every file)");
    try {
      json tags = json::array();
      if (!end_message_.empty()) tags.push_back(tag(status_ == "FAILED" ? "baton.error" : "baton.stop",
                                                    end_message_.substr(0, 5000)));
      if (!tags.empty()) rest_->call("POST", "runs/log-batch", {{"run_id", run_id_now_}, {"tags", tags}});
      rest_->call("POST", "runs/update", {{"run_id", run_id_now_}, {"status", status_}, {"end_time", now_ms()}});
    } catch (const std::exception& e) {
      warn(std::string(e.what()) + " (the MLflow run keeps status RUNNING)");
    }
    rest_.reset();
  }

 private:
  // --- open --------------------------------------------------------------------------------------------------------

  // The MLflow run to continue: the one `run_id` names, or, in a resumed run, the one the run folder's mlflow.json
  // names on the same server. Empty: a new run.
  std::string continued_run(const baton::LoggerContext& context) {
    if (!run_id_.empty()) {
      const Reply found = rest_->try_call("GET", "runs/get", {{"run_id", run_id_}});
      if (!found.ok())
        throw baton::Error("mlflow logger: run_id '" + run_id_ + "' is not a run of " + tracking_uri_ + ": " +
                           found.error_code + " " + found.message);
      return run_id_;
    }
    if (!context.resumed) return "";
    const fs::path file = fs::path(context.run_dir) / kRunFile;
    std::ifstream in(file);
    if (!in) return "";
    const json saved = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!saved.is_object() || !saved.contains("run_id") || !saved["run_id"].is_string()) {
      warn("mlflow logger: " + file.string() + " is not what this logger writes; a new MLflow run is created");
      return "";
    }
    if (saved.value("tracking_uri", "") != tracking_uri_) return "";  // another server: a run of its own there
    const std::string id = saved["run_id"];
    const Reply found = rest_->try_call("GET", "runs/get", {{"run_id", id}});
    if (found.ok() && found.body.at("run").at("info").value("lifecycle_stage", "active") == "active") return id;
    warn("mlflow logger: the MLflow run " + id + " this run folder logged to is gone from " + tracking_uri_ +
         (found.ok() ? " (deleted)" : " (" + found.error_code + ")") + "; the resumed run logs to a new one");
    return "";
  }

  std::string experiment_id() {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const Reply found = rest_->try_call("GET", "experiments/get-by-name", {{"experiment_name", experiment_}});
      if (found.ok()) {
        const json& experiment = found.body.at("experiment");
        if (experiment.value("lifecycle_stage", "active") != "active")
          throw baton::Error("mlflow logger: experiment '" + experiment_ + "' is deleted on " + tracking_uri_ +
                             ": restore it (mlflow experiments restore) or choose another experiment_name");
        return experiment.at("experiment_id").get<std::string>();
      }
      if (found.error_code != "RESOURCE_DOES_NOT_EXIST")
        throw baton::Error("mlflow logger: looking up experiment '" + experiment_ + "' on " + tracking_uri_ +
                           ": HTTP " + std::to_string(found.status) + " " + found.error_code + ": " + found.message);
      const Reply made = rest_->try_call("POST", "experiments/create", {{"name", experiment_}});
      if (made.ok()) return made.body.at("experiment_id").get<std::string>();
      if (made.error_code != "RESOURCE_ALREADY_EXISTS")  // made by someone else meanwhile: look it up again
        throw baton::Error("mlflow logger: creating experiment '" + experiment_ + "' on " + tracking_uri_ +
                           ": HTTP " + std::to_string(made.status) + " " + made.error_code + ": " + made.message);
    }
    throw baton::Error("mlflow logger: experiment '" + experiment_ + "' could not be found or created on " +
                       tracking_uri_);
  }

  json create_run(const baton::LoggerContext& context) {
    const std::string name = run_name_.empty() ? fs::path(context.run_dir).filename().string() : run_name_;
    json tags = json::array({tag("mlflow.source.name", "baton"), tag("mlflow.source.type", "LOCAL"),
                             tag("baton.run_dir", fs::absolute(context.run_dir).string())});
    if (const char* user = std::getenv("USER")) tags.push_back(tag("mlflow.user", user));
    for (const auto& [key, value] : tags_) tags.push_back(tag(key, value));
    return rest_->call("POST", "runs/create",
                       {{"experiment_id", experiment_id()}, {"run_name", name}, {"start_time", now_ms()},
                        {"tags", tags}})
        .at("run");
  }

  void read_run(const json& run) {
    for (const auto& param : run.value("data", json::object()).value("params", json::array()))
      existing_params_[param.value("key", "")] = param.value("value", "");
  }

  // The (key, step) pairs the continued run holds from `step` (its checkpoint's) on: those at the checkpoint's own
  // step, and, when the interrupted run went on past its checkpoint, those it logged after.
  std::set<std::pair<std::string, std::int64_t>> logged_from(const json& run, std::int64_t step) {
    std::set<std::pair<std::string, std::int64_t>> logged;
    for (const auto& latest : run.value("data", json::object()).value("metrics", json::array())) {
      const std::string key = latest.value("key", "");
      const std::int64_t last = latest.value("step", std::int64_t{0});
      if (last == step) {
        logged.emplace(key, step);
      } else if (last > step) {
        std::string page;
        do {
          json query = {{"run_id", run_id_now_}, {"metric_key", key}, {"max_results", 25000}};
          if (!page.empty()) query["page_token"] = page;
          const json history = rest_->call("GET", "metrics/get-history", query);
          for (const auto& value : history.value("metrics", json::array())) {
            const std::int64_t at = value.value("step", std::int64_t{-1});
            if (at >= step) logged.emplace(key, at);
          }
          page = history.value("next_page_token", "");
        } while (!page.empty());
      }
    }
    return logged;
  }

  // The config's values as parameters (those a continued run does not hold yet; a changed one is kept as it was,
  // since MLflow fixes a run's parameters) and the config itself as config.toml.
  void log_config(const std::string& config_text) {
    const auto params = baton_mlflow::run_params(config_text);
    if (params) {
      json batch = json::array();
      std::vector<std::string> changed;
      for (const auto& [key, value] : *params) {
        const auto it = existing_params_.find(key);
        if (it != existing_params_.end()) {
          if (it->second != value) changed.push_back(key + " (" + it->second + ", now " + value + ")");
          continue;
        }
        batch.push_back(json{{"key", key}, {"value", value}});
        if (batch.size() == kParamsPerRequest) {
          rest_->call("POST", "runs/log-batch", {{"run_id", run_id_now_}, {"params", batch}});
          batch = json::array();
        }
      }
      if (!batch.empty()) rest_->call("POST", "runs/log-batch", {{"run_id", run_id_now_}, {"params", batch}});
      if (!changed.empty()) {
        std::string list;
        for (const auto& item : changed) list += (list.empty() ? "" : ", ") + item;
        warn("mlflow logger: the resumed run's config differs from the MLflow run's parameters, which MLflow keeps "
             "as first logged: " + list + " (config.toml of this run has the new values)");
      }
    }
    if (!config_text.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      artifacts_.push_back(Artifact{"config.toml", config_text, "text/plain"});
    }
  }

  // The exports this run wrote at its end (model.safetensors, the EMA's ema.safetensors: the .safetensors files of
  // the run folder written since open), sent as artifacts of the same names while the logger closes.
  void queue_exports() {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(run_dir_, ec))
      if (entry.is_regular_file(ec) && entry.path().extension() == ".safetensors" &&
          entry.last_write_time(ec) >= opened_at_)
        files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      char size[32];
      std::snprintf(size, sizeof size, "%.1f MB", static_cast<double>(fs::file_size(file, ec)) / 1e6);
      note("mlflow logger: sending " + file.filename().string() + " (" + size + ") as an artifact");
      std::lock_guard<std::mutex> lock(mutex_);
      artifacts_.push_back(Artifact{file.filename().string(), "", "application/octet-stream", file.string()});
    }
  }

  // --- sending -----------------------------------------------------------------------------------------------------

  void send_loop() {
    using Clock = std::chrono::steady_clock;
    const auto interval = std::chrono::duration<double>(interval_);
    Clock::time_point next = Clock::now();
    bool failing = false;
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      const bool empty = metrics_.empty() && artifacts_.empty();
      if (empty && closing_) break;
      if (empty) {
        wake_.wait(lock);
        continue;
      }
      if (!closing_ && Clock::now() < next) {
        wake_.wait_until(lock, next, [&] { return closing_; });
        continue;
      }
      // One request: up to 1000 values, else one image.
      std::vector<json> metrics;
      std::optional<Artifact> artifact;
      if (!metrics_.empty()) {
        while (!metrics_.empty() && metrics.size() < kMetricsPerRequest) {
          metrics.push_back(std::move(metrics_.front()));
          metrics_.pop_front();
        }
      } else {
        artifact = std::move(artifacts_.front());
        artifacts_.pop_front();
      }
      lock.unlock();
      std::string problem;  // non-empty: not sent
      bool refused = false;  // the server refused it: sending it again would not help
      try {
        const Reply reply = artifact ? upload(*artifact)
                                     : rest_->try_call("POST", "runs/log-batch",
                                                       {{"run_id", run_id_now_}, {"metrics", metrics}});
        if (!reply.ok()) {
          problem = "HTTP " + std::to_string(reply.status) + " " + reply.error_code + ": " + reply.message;
          refused = reply.status >= 400 && reply.status < 500 && reply.status != 429;
        }
      } catch (const std::exception& e) {
        problem = e.what();
      }
      lock.lock();
      const std::string what = artifact ? "the artifact " + artifact->path : std::to_string(metrics.size()) + " values";
      if (problem.empty()) {
        if (failing) messages_.emplace_back(false, "mlflow logger: " + tracking_uri_ + " answers again");
        failing = false;
        if (metrics_.empty() && artifacts_.empty()) next = Clock::now() + std::chrono::duration_cast<Clock::duration>(interval);
        continue;
      }
      if (refused) {
        messages_.emplace_back(true, "mlflow logger: the server refused " + what + ": " + problem);
        continue;
      }
      // No answer: keep them for the next try, a while later; at close, give up (close counts what is left).
      if (artifact) artifacts_.push_front(std::move(*artifact));
      else for (auto it = metrics.rbegin(); it != metrics.rend(); ++it) metrics_.push_front(std::move(*it));
      if (!failing) messages_.emplace_back(true, "mlflow logger: could not send " + what + " (" + problem +
                                                     "); keeping them to send later");
      failing = true;
      if (closing_) break;
      next = Clock::now() + std::chrono::seconds(30);
    }
  }

  Reply upload(const Artifact& artifact) {
    const std::string relative = artifact.path;
    const std::string proxied = "mlflow-artifacts:";
    if (artifact_uri_.rfind(proxied, 0) == 0) {
      // mlflow-artifacts:/<path> or mlflow-artifacts://host:port/<path>: the tracking server's artifact proxy.
      std::string path = artifact_uri_.substr(proxied.size());
      if (path.rfind("//", 0) == 0) path = path.substr(std::min(path.find('/', 2), path.size()));
      while (!path.empty() && path.front() == '/') path.erase(0, 1);
      if (artifact.file.empty()) rest_->put_artifact(path + "/" + relative, artifact.bytes, artifact.content_type);
      else rest_->put_artifact_file(path + "/" + relative, artifact.file);
      Reply done;
      done.status = 200;
      return done;
    }
    std::string local;
    if (artifact_uri_.rfind("file://", 0) == 0) local = artifact_uri_.substr(7);
    else if (!artifact_uri_.empty() && artifact_uri_.front() == '/') local = artifact_uri_;
    Reply reply;
    if (local.empty()) {
      // s3://, gs://, ... are reached through their own SDKs, which baton does not speak.
      reply.status = 400;
      reply.message = "the run's artifact store " + artifact_uri_ +
                      " is reached only through the server's artifact proxy (mlflow server --serve-artifacts) "
                      "or as a local folder";
      return reply;
    }
    const fs::path target = fs::path(local) / relative;
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
      reply.status = 400;
      reply.message = "cannot create " + target.parent_path().string() + ": " + ec.message();
      return reply;
    }
    if (artifact.file.empty()) {
      baton::write_file_atomic(target.string(), artifact.bytes);
    } else if (!fs::copy_file(artifact.file, target, fs::copy_options::overwrite_existing, ec)) {
      reply.status = 400;
      reply.message = "cannot copy " + artifact.file + " to " + target.string() + ": " + ec.message();
      return reply;
    }
    reply.status = 200;
    return reply;
  }

  void stop_sender() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    wake_.notify_one();
    if (sender_.joinable()) sender_.join();
    closing_ = false;
  }

  // The sender's warnings and notes, given on the calling thread (the run's logger is not thread-safe).
  void pass_on_messages() {
    std::vector<std::pair<bool, std::string>> messages;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      messages.swap(messages_);
    }
    for (const auto& [is_warning, text] : messages) is_warning ? warn(text) : note(text);
  }

  void warn(const std::string& text) {
    if (logger_ != nullptr) logger_->warn(text);
    else std::fprintf(stderr, "warning: %s\n", text.c_str());
  }
  void note(const std::string& text) {
    if (logger_ != nullptr) logger_->info(text);
  }

  // Options.
  std::string tracking_uri_;
  std::string experiment_;
  std::string run_name_;
  std::string run_id_;  // `run_id`: continue this MLflow run
  bool log_config_;
  bool log_exports_;
  double interval_;  // seconds between requests
  std::vector<std::pair<std::string, std::string>> tags_;

  // The open run.
  baton::Logger* logger_ = nullptr;
  std::string run_dir_;
  fs::file_time_type opened_at_;
  std::unique_ptr<Rest> rest_;
  std::string run_id_now_;
  std::string experiment_id_;
  std::string artifact_uri_;
  std::map<std::string, std::string> existing_params_;
  std::optional<std::int64_t> resumed_at_;
  std::set<std::pair<std::string, std::int64_t>> already_logged_;  // (key, step) a continued run holds
  std::int64_t last_logged_ = -1;                                  // the last step among them
  std::string status_ = "FINISHED";
  std::string end_message_;

  // Shared with the sender thread.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<json> metrics_;
  std::deque<Artifact> artifacts_;
  std::size_t dropped_ = 0;
  bool closing_ = false;
  std::vector<std::pair<bool, std::string>> messages_;  // (warning?, text)
  std::thread sender_;
};

void register_mlflow(baton::Components& components) {
  components.loggers.add(
      "mlflow",
      "the run's parameters, metrics, images and status on an MLflow tracking server; keys tracking_uri (default "
      "MLFLOW_TRACKING_URI), experiment_name (baton), run_name, run_id, tags, flush_interval (10s), log_config, "
      "log_exports",
      [](const baton::PluginConfig& config) { return std::make_shared<MlflowLogger>(config); });
}

}  // namespace

BATON_COMPONENTS("mlflow", "1.0.0", "logger mlflow: an MLflow tracking server over its REST API", register_mlflow)
