#pragma once
// The safetensors format (a format that executes no code when read): an 8-byte little-endian header length N,
// N bytes of JSON {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"<key>": "<string>"}} padded with spaces to a multiple of 8, then the tensor bytes
// (little-endian, row-major, offsets relative to the end of the header). Readable by Python's safetensors.
// Public: plugins and programs use it to export weights (model.safetensors, ema.safetensors).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "baton/error.h"
#include "baton/export.h"
#include "baton/model_tensors.h"  // NamedTensors
#include "baton/state_dict.h"

namespace torch::nn {
class Module;
}

namespace baton {

struct BATON_API FileDigest {
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;  // zlib crc32 of the whole file
};

/// Writes tensors (any device; copied to CPU, made contiguous) and string metadata to `path`, then fsyncs it.
/// Supported dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL. Throws baton::Error naming the file and tensor.
BATON_API FileDigest write_safetensors(const std::string& path, const NamedTensors& tensors,
                             const std::map<std::string, std::string>& metadata = {});

/// write_safetensors to "<path>.tmp", then rename_durably (baton/durable_file.h) onto `path`: readers, and a run
/// restarted after a crash or power cut, find the old file or the complete new one, never a part. The folder must
/// exist. Throws baton::Error naming the file.
BATON_API FileDigest write_safetensors_atomic(const std::string& path, const NamedTensors& tensors,
                                              const std::map<std::string, std::string>& metadata = {});

/// The metadata a StateDict's scalars become in a safetensors file, as a checkpoint stores a file a plugin adds
/// (CheckpointInProgress::add_tensors_file): one entry per scalar holding the scalar's JSON text ("0.999", "true",
/// "12"), so Python's safetensors reads plain strings and the types survive the trip back.
BATON_API std::map<std::string, std::string> state_dict_metadata(const StateDict& content);

/// write_safetensors_atomic of a StateDict: its tensors under their keys, its scalars as state_dict_metadata. A
/// plugin that also writes a file of its own outside checkpoints writes it in the same form as its checkpoint copies.
BATON_API FileDigest write_state_dict_atomic(const std::string& path, const StateDict& content);

struct BATON_API SafetensorsContents {
  NamedTensors tensors;  // CPU tensors, in file order
  std::map<std::string, std::string> metadata;
};

/// Reads and validates a file: header length within the file, JSON well formed, dtypes known, offsets in order,
/// inside the data and matching the shapes. Throws CheckpointError naming the file and what is wrong
/// ("truncated: header says 1234 bytes, file has 1000").
BATON_API SafetensorsContents read_safetensors(const std::string& path);

/// Loads a file of named tensors into `module`'s parameters and buffers, by name (the dotted names of
/// named_parameters()/named_buffers(), which baton's model.safetensors, ema.safetensors, checkpoints' tensors and
/// Python's `safetensors.torch.save_file(model.state_dict(), ...)` all use), without gradients, in place (an
/// optimizer holding the parameters keeps them). Each tensor must have the module's shape; its dtype and device
/// are converted to the module's. `strict`: every module tensor must be in the file and every file tensor must
/// belong to the module; otherwise the names both have are loaded. Returns how many were. Throws SafetensorsError
/// naming the file and the tensor:
///   baton::load_safetensors_into(*model, "runs/fashion_mnist/ema.safetensors");   // the run's EMA weights
BATON_API std::size_t load_safetensors_into(torch::nn::Module& module, const std::string& path, bool strict = true);

/// Validates the header and the data layout (everything read_safetensors checks) without reading the tensor
/// bytes. Throws SafetensorsError.
BATON_API void validate_safetensors(const std::string& path);

/// What read_safetensors and validate_safetensors throw: what() is "<file>: <problem>"; the parts are kept apart
/// so a caller can report the problem under its own prefix (e.g. a checkpoint folder).
class BATON_API SafetensorsError : public CheckpointError {
 public:
  SafetensorsError(std::string file, std::string problem);
  ~SafetensorsError() override;
  const std::string& file() const noexcept { return file_; }
  const std::string& problem() const noexcept { return problem_; }

 private:
  std::string file_;
  std::string problem_;
};

}  // namespace baton
