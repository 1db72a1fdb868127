#pragma once
// Checkpoint folders. A checkpoint is a folder <dir>/<name> (names like "ep2" or "ba1200") holding
//   state.safetensors  every section's tensors, named "<section>/<key>"
//   <extra files>      safetensors files added by plugins (e.g. ema.safetensors)
//   meta.json          format and version, the timestamp, every section's scalars, the config text, and the size
//                      and crc32 of every file above; written last
// A save builds the folder under a temporary name, fsyncs every file, then renames it into place and fsyncs
// <dir>: a crash at any point leaves either the old set of checkpoints or the new one, never a half-written
// checkpoint under a real name. Older checkpoints beyond keep_last are removed only after the new one is complete.
//
// A sharded run's checkpoint also holds each rank's shard files, which every rank writes into the folder being built
// (write_shared) before rank 0 saves the rest and commits it all by meta.json and the rename: a save interrupted on
// any rank leaves the previous checkpoints as they were. A reader may read only some of the files (FileFilter):
// the others are checked to be there at their recorded size.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "baton/state_dict.h"
#include "baton/time.h"


namespace baton {

/// The newest meta.json version this baton reads and writes. Version 2 adds shard files in folders of their own
/// (model/, optimizer/; row_shards.h); a checkpoint without them is written as version 1, which older batons read.
inline constexpr int kCheckpointFormatVersion = 2;

/// A file a rank wrote into a save in progress (CheckpointStore::write_shared), as meta.json records it.
struct SharedFile {
  std::string name;  // relative to the checkpoint folder: "model/shard-00001-model-00001-of-00001.safetensors"
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
  /// A file read in parts (row_shards.h): the crc32 of its header, which checksums the parts.
  std::optional<std::uint32_t> header_crc32;
};

struct CheckpointData {
  Timestamp timestamp;
  std::string config_text;  // the resolved config, for reference
  /// Named sections: "model", "optimizer", "trainer", "plugin/<id>", ... in order.
  std::vector<std::pair<std::string, StateDict>> sections;
  /// Extra safetensors files: {"ema.safetensors", tensors + scalars as metadata}.
  std::vector<std::pair<std::string, StateDict>> files;
  /// Read from a checkpoint: every file meta.json lists, with its recorded size and checksums (those left unread,
  /// such as shard files read in parts, included).
  std::vector<SharedFile> listed;

  /// The section with this name, or null.
  const StateDict* section(const std::string& name) const;
};

struct CheckpointInfo {
  std::string path;
  std::string name;
  Timestamp timestamp;
};

/// A folder among the checkpoints that is not one this baton can use (meta.json missing, garbage or of another
/// format, or the folder empty), and why.
struct SkippedCheckpoint {
  std::string path;
  std::string reason;         // the CheckpointError's message, which names the folder
  bool newer_format = false;  // written by a newer baton: never overwritten, and --resume auto stops at it
};

/// Which files of a checkpoint a reader reads (checksummed and loaded); the others are only checked to exist at
/// their recorded size. Empty: every file.
using FileFilter = std::function<bool(const std::string& file)>;

class CheckpointStore {
 public:
  /// `dir` is created on the first save. Stale temporary folders of interrupted saves are removed here.
  CheckpointStore(std::string dir, std::int64_t keep_last);
  const std::string& dir() const { return dir_; }

  /// Saves atomically as <dir>/<name> (replacing an existing one only once the new one is complete), prunes
  /// beyond keep_last (oldest first), and returns the final path. Throws baton::Error naming the file on failure;
  /// the previous checkpoints are then untouched. A checkpoint of a newer format under <name> is never replaced:
  /// the save fails naming it.
  /// `shared`: the files the run's ranks wrote with write_shared for this save (every rank's, after all of them
  /// returned), listed in meta.json with the others.
  std::string save(const std::string& name, const CheckpointData& data, const std::vector<SharedFile>& shared = {});

  /// Any rank of a sharded run: has `write` write `file` (a plain name, or one folder and a name: "model/x.safetensors")
  /// at the path it is given, inside the folder in which the save of checkpoint `name` is built; `write` fsyncs it
  /// and returns its digest. Throws baton::Error naming the checkpoint, the file and the reason.
  SharedFile write_shared(const std::string& name, const std::string& file,
                          const std::function<SharedFile(const std::string& path)>& write) const;
  /// write_shared of a plain safetensors file of `content` (its tensors, its scalars as metadata).
  SharedFile write_shared(const std::string& name, const std::string& file, const StateDict& content) const;

  /// Committed checkpoints (those with a readable meta.json), oldest first by timestamp.batch. Every other folder
  /// not starting with '.' is added to `skipped` with the reason, when given.
  std::vector<CheckpointInfo> list(std::vector<SkippedCheckpoint>* skipped = nullptr) const;

  /// The newest checkpoint that passes verify_checkpoint; each folder skipped on the way (one that fails
  /// verification, or one list() skips) adds a warning naming it and the reason. Nothing when there is none.
  /// Throws CheckpointError when a folder holds a checkpoint of a newer format: resuming from an older one would
  /// continue a run that has already gone further, so only an explicit choice of checkpoint goes past it.
  /// `check`, when given, replaces verify_checkpoint: a checkpoint it throws CheckpointError for is skipped alike (the
  /// ranks of a sharded run read their parts of each candidate, and agree, inside it).
  std::optional<CheckpointInfo> newest_valid(std::vector<std::string>& warnings, const FileFilter& read = {},
                                             const std::function<void(const std::string& path)>& check = {}) const;

 private:
  /// Removes the oldest checkpoints beyond keep_last, never `keep` (the one just saved).
  void prune(const std::string& keep) const;

  std::string dir_;
  std::int64_t keep_last_;
};

/// Checks a checkpoint folder completely (meta.json, file sizes and crc32s, safetensors headers).
/// Throws CheckpointError naming the file and the problem.
void verify_checkpoint(const std::string& path, const FileFilter& read = {});

/// Verifies and loads a checkpoint folder (the files `read` selects; the others are checked for size and left out
/// of CheckpointData::files). The files of shard folders ("model/...") are verified when selected but never loaded:
/// they are read in parts (row_shards.h). Throws CheckpointError naming the file and the problem.
CheckpointData load_checkpoint(const std::string& path, const FileFilter& read = {});

/// Reads only meta.json's timestamp and name (cheap; no verification of the data files).
CheckpointInfo read_checkpoint_info(const std::string& path);

}  // namespace baton
