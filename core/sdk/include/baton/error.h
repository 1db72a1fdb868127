#pragma once
// Error types. Every error a user can cause carries enough to find the cause: a file and line for configuration,
// a plugin and event for plugin failures, a path for checkpoints. The CLI maps them to exit codes (see exit_code).
#include <stdexcept>
#include <string>

#include "baton/export.h"

namespace baton {

class BATON_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  ~Error() override;
};

/// A bad time string or a comparison across units. what() quotes the string.
class BATON_API TimeError : public Error {
 public:
  using Error::Error;
  ~TimeError() override;
};

/// Where a configuration value came from. line/column are 1-based; 0 when unknown (e.g. a --set override).
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;
};

/// A bad configuration: unknown key, wrong type, out-of-range value, bad time string. Exit status 2.
/// what() reads "file:line:column: key.path: message".
class BATON_API ConfigError : public Error {
 public:
  ConfigError(SourceLocation where, std::string key, std::string message);
  ~ConfigError() override;
  const SourceLocation& where() const noexcept { return where_; }
  const std::string& key() const noexcept { return key_; }
  const std::string& message() const noexcept { return message_; }

 private:
  SourceLocation where_;
  std::string key_;
  std::string message_;
};

/// A plugin could not be found, loaded or created, or it threw while handling an event.
class BATON_API PluginError : public Error {
 public:
  using Error::Error;
  ~PluginError() override;
};

/// A checkpoint is missing, truncated, corrupted or incompatible with the model.
class BATON_API CheckpointError : public Error {
 public:
  using Error::Error;
  ~CheckpointError() override;
};

}  // namespace baton
