#include "baton/error.h"

namespace baton {
namespace {

std::string format_config_error(const SourceLocation& where, const std::string& key, const std::string& message) {
  std::string out = where.file.empty() ? std::string("<config>") : where.file;
  if (where.line > 0) out += ":" + std::to_string(where.line) + ":" + std::to_string(where.column);
  out += ": ";
  if (!key.empty()) out += key + ": ";
  return out + message;
}

}  // namespace

// Out-of-line destructors keep each vtable and typeinfo in libbaton, so a plugin that catches baton::Error
// catches the same type the core throws.
Error::~Error() = default;
TimeError::~TimeError() = default;
PluginError::~PluginError() = default;
CheckpointError::~CheckpointError() = default;

ConfigError::ConfigError(SourceLocation where, std::string key, std::string message)
    : Error(format_config_error(where, key, message)),
      where_(std::move(where)),
      key_(std::move(key)),
      message_(std::move(message)) {}

ConfigError::~ConfigError() = default;

}  // namespace baton
