#pragma once
// Crash-safe copies for best/: every file or folder appears under its real name complete or not at all, so an
// interrupted run never leaves a half-copied best/<checkpoint> or best/ema.safetensors. Single files are written
// with the SDK's write_file_atomic and write_safetensors_atomic (baton/durable_file.h, baton/safetensors.h).
#include <filesystem>

namespace baton::ema_plugin {

/// Makes `target` a hard link to `source` (a copy when linking fails, e.g. across file systems), replacing
/// `target` atomically.
void link_or_copy_atomically(const std::filesystem::path& source, const std::filesystem::path& target);

/// Makes the folder `target` a copy of the folder `source` (files hard-linked when possible), replacing any old
/// `target` only once the new copy is complete.
void copy_folder_atomically(const std::filesystem::path& source, const std::filesystem::path& target);

}  // namespace baton::ema_plugin
