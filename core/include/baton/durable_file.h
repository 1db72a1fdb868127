#pragma once
// Crash-safe file replacement, public so that plugins and programs write their files the way checkpoints are
// written: the data reaches the disk (fsync) before the rename that makes it visible under its real name, and the
// folder holding the renamed entry is fsynced so the rename itself survives a power cut. A reader finds the old
// content or the complete new one, never a part. baton/safetensors.h has write_safetensors_atomic for tensors.
#include <string>
#include <string_view>

#include "baton/export.h"

namespace baton {

/// fsync on a file or a folder. Throws baton::Error naming it.
BATON_API void fsync_path(const std::string& path);

/// Renames `temporary` (a file or folder already fsynced) to `path`, replacing a file there, then fsyncs the folder
/// of `path`. When the rename fails the temporary is removed and baton::Error names both paths.
BATON_API void rename_durably(const std::string& temporary, const std::string& path);

/// Writes `content` to path via "<path>.tmp", fsync, rename_durably. The folder must exist.
BATON_API void write_file_atomic(const std::string& path, std::string_view content);

}  // namespace baton
