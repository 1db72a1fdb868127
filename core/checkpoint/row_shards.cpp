#include "checkpoint/row_shards.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/text.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/safetensors_file.h"

namespace baton {
namespace {

using RowJson = nlohmann::json;

constexpr const char* kOffsetsKey = "DCP_SHARDING_INFO";  // PyTorch's name, read by its safetensors reader
constexpr const char* kSavedOffsets = "saved_offsets";
constexpr const char* kChecksumsKey = "baton.row_crc32";
constexpr std::int64_t kBlockBytes = 4096;

std::uint32_t crc_of(const void* data, std::uint64_t bytes, std::uint32_t crc = 0) {
  const auto* p = static_cast<const Bytef*>(data);
  // zlib takes a uInt length: feed it in pieces below 4 GiB.
  while (bytes > 0) {
    const auto piece = static_cast<uInt>(std::min<std::uint64_t>(bytes, 1u << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, piece));
    p += piece;
    bytes -= piece;
  }
  return crc;
}

// A tensor as rows: [d0, ...] itself, a 0-d tensor one row of one element.
std::int64_t row_count(const std::vector<std::int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }
std::int64_t row_elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

std::string describe(at::ScalarType dtype, const std::vector<std::int64_t>& shape) {
  return std::string(c10::toString(dtype)) + format_shape(shape);
}

}  // namespace

// One file's block of a tensor, and how to find and check its rows.
struct RowShardReader::Chunk {
  const SafetensorsFile* file = nullptr;
  const std::string* label = nullptr;  // the file's name in errors
  const SafetensorsEntry* entry = nullptr;
  std::vector<std::int64_t> offsets;  // where the block starts in the global tensor, per dim
  std::int64_t block_rows = 0;        // rows per checksummed block; 0: unchecked
  std::vector<std::uint32_t> crcs;

  std::int64_t rows() const { return row_count(entry->shape); }
  std::int64_t first_row() const { return offsets.empty() ? 0 : offsets[0]; }
  // Whether the block spans the tensor's other dims whole, so its rows are rows of the global tensor.
  bool whole_rows(const std::vector<std::int64_t>& global) const {
    for (std::size_t d = 1; d < global.size(); ++d)
      if (offsets[d] != 0 || entry->shape[d] != global[d]) return false;
    return true;
  }
};

std::string row_shard_file_name(int rank) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-model-00001-of-00001.safetensors", rank + 1);
  return name;
}

RowShardDigest write_row_shard_file(const std::string& path, const std::vector<RowBlock>& blocks,
                                    const StateDict& scalars) {
  NamedTensors tensors;
  RowJson offsets = RowJson::object(), checksums = RowJson::object();
  for (const RowBlock& block : blocks) {
    if (offsets.contains(block.name)) throw Error(path + ": tensor '" + block.name + "' is given twice");
    const at::Tensor rows = block.rows.detach().cpu().contiguous();
    const std::vector<std::int64_t> shape = rows.sizes().vec();
    std::vector<std::int64_t> at(shape.size(), 0);
    if (!at.empty()) at[0] = block.first_row;
    offsets[block.name] = RowJson{{kSavedOffsets, at}};
    const std::int64_t row_bytes = row_elements(shape) * static_cast<std::int64_t>(rows.element_size());
    const std::int64_t per_block = std::max<std::int64_t>(1, kBlockBytes / std::max<std::int64_t>(1, row_bytes));
    std::vector<std::uint32_t> crcs;
    const auto* data = static_cast<const char*>(rows.data_ptr());
    const std::int64_t count = row_count(shape);
    for (std::int64_t r = 0; r < count; r += per_block) {
      const std::int64_t n = std::min(per_block, count - r);
      crcs.push_back(crc_of(data + r * row_bytes, static_cast<std::uint64_t>(n * row_bytes)));
    }
    checksums[block.name] = RowJson{{"rows", per_block}, {"crc32", crcs}};
    tensors.emplace_back(block.name, rows);
  }
  std::map<std::string, std::string> metadata = state_dict_metadata(scalars);
  metadata[kOffsetsKey] = offsets.dump();
  metadata[kChecksumsKey] = checksums.dump();
  RowShardDigest digest;
  digest.file = write_safetensors(path, tensors, metadata);
  digest.header_crc32 = header_crc32(SafetensorsFile(path));
  return digest;
}

std::uint32_t header_crc32(const SafetensorsFile& file) {
  std::vector<char> header(file.data_start());
  file.read_at(0, header.data(), header.size());
  return crc_of(header.data(), header.size());
}

std::string read_report(const std::vector<std::uint64_t>& read, const std::vector<std::uint64_t>& taken) {
  std::string text;
  for (std::size_t q = 0; q < read.size() && q < taken.size(); ++q) {
    const double ratio = taken[q] ? static_cast<double>(read[q]) / static_cast<double>(taken[q]) : 0.0;
    text += (q ? "; rank " : "rank ") + std::to_string(q) + " read " +
            format_bytes(static_cast<std::int64_t>(read[q])) + " for its " +
            format_bytes(static_cast<std::int64_t>(taken[q])) + " (" + format_decimals(ratio, 3) + " x)";
  }
  return text;
}

std::vector<RowShardSource> safetensors_in(const std::string& folder) {
  std::vector<RowShardSource> out;
  std::error_code error;
  const std::string suffix = ".safetensors";
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back({entry.path().string(), std::nullopt, std::nullopt, {}});
  }
  if (error) throw Error("cannot list " + folder + ": " + error.message());
  std::sort(out.begin(), out.end(), [](const RowShardSource& a, const RowShardSource& b) { return a.path < b.path; });
  return out;
}

RowShardReader::RowShardReader(const std::vector<RowShardSource>& sources, std::string what) : what_(std::move(what)) {
  const auto fail = [&](const std::string& file, const std::string& problem) -> void {
    throw CheckpointError(what_ + ": " + file + ": " + problem);
  };
  labels_.reserve(sources.size());  // chunks point at the labels: no reallocation
  for (const RowShardSource& source : sources) {
    const std::string& label = labels_.emplace_back(source.label.empty() ? source.path : source.label);
    std::unique_ptr<SafetensorsFile> file;
    try {
      file = std::make_unique<SafetensorsFile>(source.path);
    } catch (const SafetensorsError& e) {
      fail(label, e.problem());
    }
    if (source.bytes && file->file_bytes() != *source.bytes)
      fail(label, "size is " + std::to_string(file->file_bytes()) + " bytes, meta.json says " +
                            std::to_string(*source.bytes) + " (file truncated or overwritten)");
    bytes_read_ += file->data_start();
    if (source.header_crc32 && header_crc32(*file) != *source.header_crc32)
      fail(label, "the header's crc32 does not match meta.json's (file corrupted)");
    RowJson offsets, checksums;
    try {
      const auto& metadata = file->metadata();
      if (auto it = metadata.find(kOffsetsKey); it != metadata.end()) offsets = RowJson::parse(it->second);
      if (auto it = metadata.find(kChecksumsKey); it != metadata.end()) checksums = RowJson::parse(it->second);
    } catch (const RowJson::exception& e) {
      fail(label, std::string("its offsets or checksums do not parse: ") + e.what());
    }
    for (const SafetensorsEntry& entry : file->entries()) {
      Chunk chunk;
      chunk.file = file.get();
      chunk.label = &label;
      chunk.entry = &entry;
      chunk.offsets.assign(entry.shape.size(), 0);
      try {
        if (!offsets.is_null()) {
          // PyTorch's reader requires an entry for every tensor of a file that has the metadata at all.
          if (!offsets.contains(entry.name))
            fail(label, "tensor '" + entry.name + "' has no entry in " + kOffsetsKey);
          chunk.offsets = offsets.at(entry.name).at(kSavedOffsets).get<std::vector<std::int64_t>>();
        }
        if (checksums.contains(entry.name)) {
          chunk.block_rows = checksums.at(entry.name).at("rows").get<std::int64_t>();
          chunk.crcs = checksums.at(entry.name).at("crc32").get<std::vector<std::uint32_t>>();
        }
      } catch (const RowJson::exception& e) {
        fail(label, "the offsets or checksums of tensor '" + entry.name + "' are malformed: " + e.what());
      }
      if (chunk.offsets.size() != entry.shape.size())
        fail(label, "tensor '" + entry.name + "' has " + std::to_string(entry.shape.size()) +
                              " dims but offsets " + format_shape(chunk.offsets));
      for (std::int64_t o : chunk.offsets)
        if (o < 0) fail(label, "tensor '" + entry.name + "' has a negative offset " + format_shape(chunk.offsets));
      if (chunk.block_rows > 0) {
        const std::int64_t blocks = (chunk.rows() + chunk.block_rows - 1) / chunk.block_rows;
        if (static_cast<std::int64_t>(chunk.crcs.size()) != blocks)
          fail(label, "tensor '" + entry.name + "' has " + std::to_string(chunk.crcs.size()) +
                                " block checksums for " + std::to_string(blocks) + " blocks");
      } else if (chunk.block_rows < 0 || !chunk.crcs.empty()) {
        fail(label, "tensor '" + entry.name + "' has malformed block checksums");
      }
      // The global tensor: the same dtype and dims everywhere; its shape the largest extent of any block.
      std::vector<std::int64_t> extent(entry.shape.size());
      for (std::size_t d = 0; d < extent.size(); ++d) extent[d] = chunk.offsets[d] + entry.shape[d];
      auto [it, fresh] = tensors_.emplace(entry.name, Info{entry.dtype, extent});
      if (!fresh) {
        Info& info = it->second;
        if (info.dtype != entry.dtype || info.shape.size() != extent.size())
          fail(label, "tensor '" + entry.name + "' is " + describe(entry.dtype, entry.shape) + " here but " +
                                describe(info.dtype, info.shape) + " in another file");
        for (std::size_t d = 0; d < extent.size(); ++d) info.shape[d] = std::max(info.shape[d], extent[d]);
      }
      auto& list = chunks_[entry.name];
      // The same block in several files (a count such as Adam's step, which every rank keeps): read from one.
      bool duplicate = false;
      for (const Chunk& other : list)
        duplicate = duplicate || (other.offsets == chunk.offsets && other.entry->shape == entry.shape);
      if (!duplicate) list.push_back(std::move(chunk));
    }
    files_.push_back(std::move(file));
  }
  // Blocks must not overlap: two values for one element would make the result depend on the order of reading.
  for (const auto& [name, list] : chunks_) {
    for (std::size_t a = 0; a < list.size(); ++a)
      for (std::size_t b = a + 1; b < list.size(); ++b) {
        bool overlap = true;
        for (std::size_t d = 0; d < list[a].offsets.size(); ++d)
          overlap = overlap && list[a].offsets[d] < list[b].offsets[d] + list[b].entry->shape[d] &&
                    list[b].offsets[d] < list[a].offsets[d] + list[a].entry->shape[d];
        if (overlap && !list[a].offsets.empty())
          throw CheckpointError(what_ + ": tensor '" + name + "': the blocks in " + *list[a].label + " and " + *list[b].label +
                                " overlap");
      }
  }
}

RowShardReader::~RowShardReader() = default;

namespace {

// Rows [from, to) of the global tensor within `chunk`, widened to the chunk's whole checksummed blocks: [lo, hi)
// relative to its first row.
std::pair<std::int64_t, std::int64_t> block_span(std::int64_t from, std::int64_t to, std::int64_t first,
                                                 std::int64_t rows, std::int64_t block_rows) {
  std::int64_t lo = from - first, hi = to - first;
  if (block_rows > 0) {
    lo = lo / block_rows * block_rows;
    hi = std::min(rows, (hi + block_rows - 1) / block_rows * block_rows);
  }
  return {lo, hi};
}

}  // namespace

std::uint64_t RowShardReader::bytes_for_rows(const std::string& name, std::int64_t begin, std::int64_t count) const {
  const auto found = chunks_.find(name);
  if (found == chunks_.end()) throw CheckpointError(what_ + ": no file holds tensor '" + name + "'");
  std::uint64_t bytes = 0;
  for (const Chunk& chunk : found->second) {
    const std::int64_t from = std::max(begin, chunk.first_row());
    const std::int64_t to = std::min(begin + count, chunk.first_row() + chunk.rows());
    if (from >= to) continue;
    const auto [lo, hi] = block_span(from, to, chunk.first_row(), chunk.rows(), chunk.block_rows);
    bytes += static_cast<std::uint64_t>((hi - lo) * row_elements(chunk.entry->shape) *
                                        static_cast<std::int64_t>(c10::elementSize(chunk.entry->dtype)));
  }
  return bytes;
}

void RowShardReader::read_rows(const std::string& name, std::int64_t begin, const at::Tensor& into) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) throw CheckpointError(what_ + ": no file holds tensor '" + name + "'");
  const Info& info = found->second;
  const std::vector<std::int64_t> want = into.sizes().vec();
  const bool shape_ok = want.size() == info.shape.size() && into.scalar_type() == info.dtype &&
                        into.is_contiguous() && into.device().is_cpu() &&
                        std::equal(want.begin() + (want.empty() ? 0 : 1), want.end(),
                                   info.shape.begin() + (info.shape.empty() ? 0 : 1));
  const std::int64_t count = row_count(want);
  if (!shape_ok || begin < 0 || begin + count > row_count(info.shape))
    throw CheckpointError(what_ + ": rows " + std::to_string(begin) + " to " + std::to_string(begin + count) +
                          " as " + describe(into.scalar_type(), want) + " are not rows of tensor '" + name + "' (" +
                          describe(info.dtype, info.shape) + ")");
  c10::NoGradGuard no_grad;
  const std::int64_t element = static_cast<std::int64_t>(into.element_size());
  std::int64_t covered = 0;
  std::vector<char> buffer;
  for (const Chunk& chunk : chunks_.at(name)) {
    const std::int64_t from = std::max(begin, chunk.first_row());
    const std::int64_t to = std::min(begin + count, chunk.first_row() + chunk.rows());
    if (from >= to) continue;
    const std::int64_t row_bytes = row_elements(chunk.entry->shape) * element;
    // The rows wanted, widened to whole checksummed blocks, relative to the chunk's first row.
    const auto [lo, hi] = block_span(from, to, chunk.first_row(), chunk.rows(), chunk.block_rows);
    buffer.resize(static_cast<std::size_t>((hi - lo) * row_bytes));
    const std::string& path = *chunk.label;
    try {
      chunk.file->read_at(chunk.file->data_start() + chunk.entry->begin + static_cast<std::uint64_t>(lo * row_bytes),
                          buffer.data(), buffer.size());
    } catch (const SafetensorsError& e) {
      throw CheckpointError(what_ + ": " + path + ": " + e.problem());
    }
    bytes_read_ += buffer.size();
    for (std::int64_t r = lo; r < hi && chunk.block_rows > 0; r += chunk.block_rows) {
      const std::int64_t n = std::min(chunk.block_rows, chunk.rows() - r);
      const std::size_t index = static_cast<std::size_t>(r / chunk.block_rows);
      if (crc_of(buffer.data() + (r - lo) * row_bytes, static_cast<std::uint64_t>(n * row_bytes)) != chunk.crcs[index])
        throw CheckpointError(what_ + ": " + path + ": tensor '" + name + "': rows " +
                              std::to_string(chunk.first_row() + r) + " to " +
                              std::to_string(chunk.first_row() + r + n) + " do not match their crc32 (file corrupted)");
    }
    const char* rows = buffer.data() + (from - chunk.first_row() - lo) * row_bytes;
    if (info.shape.empty() || chunk.whole_rows(info.shape)) {
      std::memcpy(static_cast<char*>(into.data_ptr()) + (from - begin) * row_bytes, rows,
                  static_cast<std::size_t>((to - from) * row_bytes));
    } else {
      // A block split along other dims too (as Python may write): its rows go into their columns.
      std::vector<std::int64_t> shape = chunk.entry->shape;
      shape[0] = to - from;
      at::Tensor part = at::empty(shape, into.options());
      std::memcpy(part.data_ptr(), rows, static_cast<std::size_t>((to - from) * row_bytes));
      at::Tensor target = into.narrow(0, from - begin, to - from);
      for (std::size_t d = 1; d < shape.size(); ++d)
        target = target.narrow(static_cast<std::int64_t>(d), chunk.offsets[d], shape[d]);
      target.copy_(part);
    }
    covered += (to - from) * row_elements(chunk.entry->shape);
  }
  if (covered != count * row_elements(want))
    throw CheckpointError(what_ + ": tensor '" + name + "': rows " + std::to_string(begin) + " to " +
                          std::to_string(begin + count) + " are not all in the files (" + std::to_string(covered) +
                          " of " + std::to_string(count * row_elements(want)) +
                          " elements found): a rank's file is missing");
}

at::Tensor RowShardReader::read(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) throw CheckpointError(what_ + ": no file holds tensor '" + name + "'");
  at::Tensor whole = at::empty(found->second.shape, at::TensorOptions().dtype(found->second.dtype));
  read_rows(name, 0, whole);
  return whole;
}

StateDict RowShardReader::read_all() const {
  StateDict out = scalars();
  for (const auto& [name, info] : tensors_) out.set_tensor(name, read(name));
  return out;
}

StateDict RowShardReader::scalars() const {
  StateDict out;
  if (files_.empty()) return out;
  RowJson scalars = RowJson::object();
  for (const auto& [key, text] : files_.front()->metadata()) {
    if (key == kOffsetsKey || key == kChecksumsKey) continue;
    try {
      scalars[key] = RowJson::parse(text);
    } catch (const RowJson::exception& e) {
      throw CheckpointError(what_ + ": " + labels_.front() + ": metadata '" + key + "' is not a JSON value: " +
                            e.what());
    }
  }
  out.set_scalars_json(scalars.dump());
  return out;
}

NamedTensors model_named_tensors(const RowShardReader& reader) {
  NamedTensors out;
  for (const auto& [name, info] : reader.tensors())
    if (name.find('/') == std::string::npos) out.emplace_back(name, reader.read(name));
  return out;
}

std::vector<RowShardSource> folder_sources(const CheckpointData& data, const std::string& path, const std::string& folder) {
  std::vector<RowShardSource> out;
  const std::string prefix = folder + "/";
  for (const SharedFile& file : data.listed)
    if (file.name.size() > prefix.size() && file.name.compare(0, prefix.size(), prefix) == 0)
      out.push_back({path + "/" + file.name, file.bytes, file.header_crc32, file.name});
  return out;
}

}  // namespace baton
