#pragma once
// Crash-safe file operations of the ema plugin: every file or folder appears under its real name complete or not
// at all (written under a temporary name, fsynced, then renamed), so an interrupted run never leaves a half-written
// ema.safetensors, best.json or best/<checkpoint>.
#include <filesystem>
#include <map>
#include <string>

#include "baton/safetensors.h"

namespace baton::ema_plugin {

/// Writes tensors to `path` through a temporary file and a rename.
void write_tensors_atomically(const std::filesystem::path& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata);

/// Writes text to `path` through a temporary file and a rename.
void write_text_atomically(const std::filesystem::path& path, const std::string& text);

/// Makes `target` a hard link to `source` (a copy when linking fails, e.g. across file systems), replacing
/// `target` atomically.
void link_or_copy_atomically(const std::filesystem::path& source, const std::filesystem::path& target);

/// Makes the folder `target` a copy of the folder `source` (files hard-linked when possible), replacing any old
/// `target` only once the new copy is complete.
void copy_folder_atomically(const std::filesystem::path& source, const std::filesystem::path& target);

/// fsync on a file or folder, so a rename inside it survives a power cut.
void sync_path(const std::filesystem::path& path);

}  // namespace baton::ema_plugin
