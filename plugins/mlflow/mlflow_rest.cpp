#include "mlflow_rest.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "baton/error.h"

namespace baton_mlflow {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

bool env_true(const char* name) {
  const std::string value = env(name);
  return value == "1" || value == "true" || value == "TRUE" || value == "True";
}

std::size_t append_body(char* data, std::size_t size, std::size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

bool retried(const Reply& reply) { return reply.status == 429 || reply.status >= 500; }

std::string shortened(const std::string& text) { return text.size() > 300 ? text.substr(0, 300) + "..." : text; }

}  // namespace

struct Rest::Connection {
  CURL* curl = nullptr;
  char error[CURL_ERROR_SIZE] = {};
};

std::string url_path(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    const bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                       c == '_' || c == '.' || c == '~' || c == '/';
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

Rest::Rest(std::string tracking_uri, double timeout_seconds, int retries)
    : connection_(std::make_unique<Connection>()), timeout_seconds_(timeout_seconds), retries_(retries) {
  if (tracking_uri.rfind("http://", 0) != 0 && tracking_uri.rfind("https://", 0) != 0)
    throw baton::Error("mlflow logger: tracking URI '" + tracking_uri +
                       "' is not http:// or https://: baton speaks MLflow's REST API to a tracking server "
                       "(start one with `mlflow server`)");
  while (!tracking_uri.empty() && tracking_uri.back() == '/') tracking_uri.pop_back();
  base_ = std::move(tracking_uri);
  static std::once_flag curl_ready;  // curl_global_init is not thread-safe: once per process
  std::call_once(curl_ready, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  connection_->curl = curl_easy_init();
  if (connection_->curl == nullptr) throw baton::Error("mlflow logger: libcurl could not make a connection handle");
}

Rest::~Rest() {
  if (connection_ && connection_->curl != nullptr) curl_easy_cleanup(connection_->curl);
}

Reply Rest::send(const char* method, const std::string& url, const Body& body, const std::string& content_type) {
  CURL* curl = connection_->curl;
  curl_easy_reset(curl);  // options only; the connection stays open for the next request
  std::string answer;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
  const std::string token = env("MLFLOW_TRACKING_TOKEN");
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  const std::string user = env("MLFLOW_TRACKING_USERNAME");
  const std::string password = env("MLFLOW_TRACKING_PASSWORD");
  connection_->error[0] = '\0';
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "baton-mlflow/1.0");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: the sender is a thread
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(1000 * std::min(timeout_seconds_, 10.0)));
  if (body.file == nullptr) {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(1000 * timeout_seconds_));
  } else {  // a large file takes as long as it takes, as long as it moves
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
  }
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, connection_->error);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  if (!user.empty()) {
    curl_easy_setopt(curl, CURLOPT_USERNAME, user.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, password.c_str());
  }
  if (env_true("MLFLOW_TRACKING_INSECURE_TLS")) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  const std::string ca = env("MLFLOW_TRACKING_SERVER_CERT_PATH");
  if (!ca.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, ca.c_str());
  const std::string verb = method;
  std::FILE* upload = nullptr;
  if (body.file != nullptr) {
    upload = std::fopen(body.file->c_str(), "rb");
    std::error_code ec;
    const auto size = std::filesystem::file_size(*body.file, ec);
    if (upload == nullptr || ec) {
      if (upload != nullptr) std::fclose(upload);
      curl_slist_free_all(headers);
      throw baton::Error("mlflow logger: cannot read '" + *body.file + "': " +
                         (ec ? ec.message() : std::string(std::strerror(errno))));
    }
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);  // PUT, the body read from the file
    curl_easy_setopt(curl, CURLOPT_READDATA, upload);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size));
  } else if (verb == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.text.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.text.size()));
    if (verb != "POST") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  }
  const CURLcode code = curl_easy_perform(curl);
  if (upload != nullptr) std::fclose(upload);
  curl_slist_free_all(headers);
  Reply reply;
  if (code != CURLE_OK) {
    reply.message = connection_->error[0] != '\0' ? connection_->error : curl_easy_strerror(code);
    return reply;  // status 0: no answer
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  reply.body = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (reply.body.is_discarded()) reply.body = nlohmann::json();
  if (!reply.ok()) {
    if (reply.body.is_object()) {
      reply.error_code = reply.body.value("error_code", "");
      reply.message = reply.body.value("message", "");
    }
    if (reply.message.empty()) reply.message = shortened(answer);
  }
  return reply;
}

Reply Rest::with_retries(const char* method, const std::string& url, const Body& body,
                         const std::string& content_type) {
  Reply reply;
  for (int attempt = 0;; ++attempt) {
    reply = send(method, url, body, content_type);
    if ((reply.status != 0 && !retried(reply)) || attempt >= retries_) break;
    std::this_thread::sleep_for(std::chrono::seconds(1 << std::min(attempt, 5)));
  }
  if (reply.status == 0)
    throw baton::Error(std::string("mlflow logger: ") + method + " " + url + ": no answer (" + reply.message +
                       "; tried " + std::to_string(retries_ + 1) + " times)");
  return reply;
}

Reply Rest::try_call(const char* method, const std::string& endpoint, const nlohmann::json& body) {
  std::string url = base_ + "/api/2.0/mlflow/" + endpoint;
  if (std::string(method) == "GET") {
    char separator = '?';
    for (const auto& [key, value] : body.items()) {
      const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      char* escaped = curl_easy_escape(connection_->curl, text.c_str(), static_cast<int>(text.size()));
      url += separator + key + "=" + (escaped != nullptr ? escaped : "");
      curl_free(escaped);
      separator = '&';
    }
    const std::string none;
    return with_retries(method, url, Body{none}, "application/json");
  }
  const std::string text = body.dump();
  return with_retries(method, url, Body{text}, "application/json");
}

nlohmann::json Rest::call(const char* method, const std::string& endpoint, const nlohmann::json& body) {
  Reply reply = try_call(method, endpoint, body);
  if (!reply.ok())
    throw baton::Error(std::string("mlflow logger: ") + method + " " + base_ + "/api/2.0/mlflow/" + endpoint +
                       ": HTTP " + std::to_string(reply.status) +
                       (reply.error_code.empty() ? "" : " " + reply.error_code) + ": " + reply.message);
  return std::move(reply.body);
}

void Rest::put_artifact(const std::string& path, const std::string& bytes, const std::string& content_type) {
  put(path, Body{bytes}, content_type);
}

void Rest::put_artifact_file(const std::string& path, const std::string& file) {
  const std::string none;
  put(path, Body{none, &file}, "application/octet-stream");
}

void Rest::put(const std::string& path, const Body& body, const std::string& content_type) {
  const std::string url = base_ + "/api/2.0/mlflow-artifacts/artifacts/" + url_path(path);
  const Reply reply = with_retries("PUT", url, body, content_type);
  if (!reply.ok())
    throw baton::Error("mlflow logger: PUT " + url + ": HTTP " + std::to_string(reply.status) +
                       (reply.error_code.empty() ? "" : " " + reply.error_code) + ": " + reply.message);
}

}  // namespace baton_mlflow
