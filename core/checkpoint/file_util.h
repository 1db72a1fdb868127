#pragma once
// Durable file operations for crash-safe checkpoints: data reaches the disk (fsync) before the rename that makes
// it visible, and the folder holding a renamed entry is fsynced so the rename itself survives a power cut.
#include <cstdint>
#include <string>
#include <string_view>

#include "baton/export.h"

namespace baton {

BATON_API void fsync_path(const std::string& path);  // a file or a folder; throws baton::Error naming it
/// Writes `content` to path via "<path>.tmp", fsync, rename, fsync of the folder.
BATON_API void write_file_atomic(const std::string& path, std::string_view content);
/// zlib crc32 of a whole file, streaming. Throws baton::Error naming the file.
BATON_API std::uint32_t crc32_of_file(const std::string& path);
BATON_API std::string read_text_file(const std::string& path);  // throws baton::Error naming the file

}  // namespace baton
