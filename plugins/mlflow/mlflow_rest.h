#pragma once
// MLflow's tracking REST API (version 2.0) over libcurl: the requests the mlflow logger makes, with MLflow's own
// client settings read from the same environment variables (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME /
// _PASSWORD, MLFLOW_TRACKING_INSECURE_TLS, MLFLOW_TRACKING_SERVER_CERT_PATH). One connection, reused (keep-alive);
// not thread-safe: one thread at a time.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace baton_mlflow {

/// What the server answered: the HTTP status, MLflow's error code ("RESOURCE_DOES_NOT_EXIST") and message when it
/// refused, and the parsed body.
struct Reply {
  long status = 0;
  std::string error_code;
  std::string message;
  nlohmann::json body;
  bool ok() const { return status >= 200 && status < 300; }
};

class Rest {
 public:
  /// `tracking_uri`: http:// or https://, with an optional path prefix (a server behind a proxy). Throws
  /// baton::Error for any other scheme.
  Rest(std::string tracking_uri, double timeout_seconds, int retries);
  ~Rest();
  Rest(const Rest&) = delete;
  Rest& operator=(const Rest&) = delete;

  const std::string& base() const { return base_; }

  /// POST /api/2.0/mlflow/<endpoint> with a JSON body; GET with the body's members as the query. A connection
  /// failure, HTTP 429 or a 5xx answer is tried again (`retries` times, waiting 1, 2, 4 ... s); then throws
  /// baton::Error naming the request and the reason. Any other answer comes back as it is.
  Reply try_call(const char* method, const std::string& endpoint, const nlohmann::json& body);
  /// try_call that throws baton::Error for an answer other than 2xx, naming the request, MLflow's error code and
  /// message.
  nlohmann::json call(const char* method, const std::string& endpoint, const nlohmann::json& body);

  /// PUT of a file's bytes to the tracking server's artifact proxy: /api/2.0/mlflow-artifacts/artifacts/<path>
  /// (`path` relative to the proxy's root, e.g. "1/<run id>/artifacts/images/x.png"). Throws as call does.
  void put_artifact(const std::string& path, const std::string& bytes, const std::string& content_type);
  /// The same for a file on disk, streamed from it (an export of any size): no time limit on the whole request,
  /// but less than 1 KB/s for 60 s is a failure.
  void put_artifact_file(const std::string& path, const std::string& file);

 private:
  // A request's body: `text`, or, when `file` is set, the file's bytes streamed.
  struct Body {
    const std::string& text;
    const std::string* file = nullptr;
  };
  Reply send(const char* method, const std::string& url, const Body& body, const std::string& content_type);
  Reply with_retries(const char* method, const std::string& url, const Body& body, const std::string& content_type);
  void put(const std::string& path, const Body& body, const std::string& content_type);

  struct Connection;
  std::unique_ptr<Connection> connection_;
  std::string base_;  // scheme://host[:port][/prefix], no trailing slash
  double timeout_seconds_;
  int retries_;
};

/// "a/b c" -> "a/b%20c": a path for a URL, its slashes kept.
std::string url_path(const std::string& path);

}  // namespace baton_mlflow
