#pragma once
// Tensors split into blocks of rows over several safetensors files, one file per rank: the model/ and optimizer/
// folders of a sharded checkpoint. Each file is in the form PyTorch's distributed checkpoint reads with its
// safetensors storage reader (torch.distributed.checkpoint's HuggingFaceStorageReader): the __metadata__ entry
// "DCP_SHARDING_INFO" holds, for every tensor of the file, {"saved_offsets": [first row, 0, ...]}, where its block
// starts in the global tensor, whose shape is the largest offset + shape over the folder's files. So Python loads
// such a folder at any number of ranks, and baton reads it at any number of ranks (RowShardReader), each reading of
// each file only the rows it needs.
//
// For that, checksums cover blocks of rows rather than whole files: the metadata entry "baton.row_crc32" holds, per
// tensor, the rows per block (as many as make 4 KiB, at least one) and the zlib crc32 of each block's bytes; a reader
// reads the blocks overlapping the rows it wants and checks each. The header itself (offsets, checksums) is covered
// by the crc32 meta.json records for it. Files without these entries (written by Python) are read unchecked.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/safetensors.h"
#include "baton/state_dict.h"

namespace baton {

class SafetensorsFile;
struct CheckpointData;  // checkpoint_store.h

/// A block of rows of a global tensor: `rows` holds rows [first_row, first_row + rows.size(0)) of tensor `name`
/// along dim 0, whole along the other dims. A 0-d tensor is given whole (first_row 0).
struct RowBlock {
  std::string name;
  at::Tensor rows;
  std::int64_t first_row = 0;
};

/// "shard-00001-model-00001-of-00001.safetensors" for rank 0: the name PyTorch's safetensors writer gives a rank's
/// file (its ranks counted from 1), which its reader does not require but its consolidation expects.
std::string row_shard_file_name(int rank);

struct RowShardDigest {
  FileDigest file;
  std::uint32_t header_crc32 = 0;  // of the first 8 + N bytes: the header's length and the header
};

/// Writes `blocks` (any device; copied to the CPU) with their offsets and block checksums, and `scalars` as
/// state_dict_metadata, to `path`, fsynced. Throws baton::Error naming the file; a block whose name is given twice.
RowShardDigest write_row_shard_file(const std::string& path, const std::vector<RowBlock>& blocks,
                                    const StateDict& scalars = StateDict());

/// The crc32 of a safetensors file's header (8 + N bytes). Throws SafetensorsError.
std::uint32_t header_crc32(const SafetensorsFile& file);

/// One file of a set to read, with what its checkpoint's meta.json recorded of it (nothing for Python's files).
struct RowShardSource {
  std::string path;
  std::optional<std::uint64_t> bytes;
  std::optional<std::uint32_t> header_crc32;
  std::string label;  // how errors name the file ("model/shard-..." in a checkpoint); empty: its path
};

/// The files of a checkpoint's folder `folder` ("model", "optimizer", a plugin's id), as its meta.json (`data`, read
/// from the checkpoint at `path`) lists them with their sizes and header crc32s; empty when it has no such folder.
std::vector<RowShardSource> folder_sources(const CheckpointData& data, const std::string& path, const std::string& folder);

/// What ranks read of a set of row shard files against the bytes each took from them, one entry per rank, as the
/// resume reports it and `baton checkpoint info` plans it: "rank 0 read 215.0 KiB for its 205.5 KiB (1.047 x); ...".
std::string read_report(const std::vector<std::uint64_t>& read, const std::vector<std::uint64_t>& taken);

/// Every "*.safetensors" file directly in `folder`, by name: a folder PyTorch's distributed checkpoint wrote with its
/// safetensors writer. Throws baton::Error naming the folder and the OS's reason.
std::vector<RowShardSource> safetensors_in(const std::string& folder);

class RowShardReader;

/// The tensors of `reader` named as a model's (no '/' in the name), whole: what a plugin's folder of row tensors
/// holds of the model, a sharded EMA's average; its other row tensors ("posthoc/0/fc.weight") are left out.
NamedTensors model_named_tensors(const RowShardReader& reader);

class RowShardReader {
 public:
  struct Info {
    at::ScalarType dtype = at::kFloat;
    std::vector<std::int64_t> shape;  // global
  };

  /// Opens every file and reads its header. `what` names the set in errors ("checkpoint runs/a/checkpoints/ep1").
  /// Throws CheckpointError naming the file: unreadable, no safetensors file, of another size or header checksum
  /// than recorded, an offset entry missing or not fitting the tensor, a tensor of other dtypes or row shapes in
  /// two files, blocks of one tensor that overlap.
  RowShardReader(const std::vector<RowShardSource>& sources, std::string what);
  ~RowShardReader();
  RowShardReader(const RowShardReader&) = delete;
  RowShardReader& operator=(const RowShardReader&) = delete;

  /// Every tensor of the files, with its global shape, by name.
  const std::map<std::string, Info>& tensors() const { return tensors_; }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }

  /// Rows [begin, begin + into.size(0)) of tensor `name` into `into`, a contiguous CPU tensor of the tensor's dtype
  /// and shape but for dim 0 (for a 0-d tensor: 0-d, begin 0). Reads only the blocks overlapping those rows, each
  /// checked against its crc32. Throws CheckpointError naming the file and tensor: rows no file holds, a checksum
  /// that does not match, a read error.
  void read_rows(const std::string& name, std::int64_t begin, const at::Tensor& into) const;
  /// The bytes read_rows(name, begin, ...) of `count` rows would read (the overlapping blocks), without reading.
  std::uint64_t bytes_for_rows(const std::string& name, std::int64_t begin, std::int64_t count) const;
  /// The whole tensor `name` (CPU).
  at::Tensor read(const std::string& name) const;
  /// Every tensor whole, and scalars(): what one file of the whole tensors would hold.
  StateDict read_all() const;

  /// Bytes read from the files so far: headers and blocks.
  std::uint64_t bytes_read() const { return bytes_read_.load(); }
  /// The first file's metadata but the entries above, each parsed as a JSON value, as scalars. Throws
  /// CheckpointError naming the file when one is not JSON.
  StateDict scalars() const;

 private:
  struct Chunk;
  std::string what_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::string> labels_;  // beside files_
  std::map<std::string, Info> tensors_;
  std::map<std::string, std::vector<Chunk>> chunks_;
  mutable std::atomic<std::uint64_t> bytes_read_{0};
};

}  // namespace baton
