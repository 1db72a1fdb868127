#include "baton/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <nlohmann/json.hpp>

#include "baton/text.h"
#include "baton/model_tensors.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors_file.h"

// The format stores little-endian bytes and tensors are written straight from memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace baton {
namespace {

using Json = nlohmann::ordered_json;

// Python's safetensors refuses headers above this size; so do we, before allocating for one.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DtypeInfo {
  at::ScalarType type;
  const char* name;
};

constexpr std::array<DtypeInfo, 10> kDtypes{{
    {at::kDouble, "F64"},
    {at::kFloat, "F32"},
    {at::kHalf, "F16"},
    {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},
    {at::kInt, "I32"},
    {at::kShort, "I16"},
    {at::kChar, "I8"},
    {at::kByte, "U8"},
    {at::kBool, "BOOL"},
}};

const char* dtype_name(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return nullptr;
}

const DtypeInfo* dtype_by_name(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------------------
// Writing

struct PlannedTensor {
  const std::string* name;
  at::Tensor tensor;
  std::uint64_t bytes;
};

std::vector<PlannedTensor> plan_tensors(const std::string& path, const NamedTensors& tensors) {
  std::vector<PlannedTensor> planned;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    const std::string where = path + ": tensor '" + name + "'";
    if (name.empty() || name == kMetadataKey) throw Error(path + ": invalid tensor name '" + name + "'");
    if (!seen.insert(name).second) throw Error(where + " appears twice");
    if (!tensor.defined()) throw Error(where + " is undefined");
    if (!dtype_name(tensor.scalar_type())) {
      throw Error(where + " has unsupported dtype " + std::string(c10::toString(tensor.scalar_type())) +
                  " (supported: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL)");
    }
    planned.push_back({&name, tensor, static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size()});
  }
  return planned;
}

std::string header_text(const std::vector<PlannedTensor>& planned, const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::uint64_t offset = 0;
  for (const auto& p : planned) {
    header[*p.name] = Json{{"dtype", dtype_name(p.tensor.scalar_type())},
                           {"shape", p.tensor.sizes().vec()},
                           {"data_offsets", {offset, offset + p.bytes}}};
    offset += p.bytes;
  }
  std::string text = header.dump();
  // Padding keeps the data start 8-aligned, as the spec asks, so readers can map tensors without copying.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_tensor_bytes(DurableFileWriter& out, const PlannedTensor& p) {
  if (p.bytes == 0) return;
  // One tensor at a time: only the tensor being written is ever duplicated (when it is not CPU-contiguous).
  at::Tensor cpu = p.tensor.cpu().contiguous();
  out.write(cpu.data_ptr(), p.bytes);
}

void write_file(const std::string& path, const std::vector<PlannedTensor>& planned, const std::string& header,
                FileDigest& digest) {
  DurableFileWriter out(path);
  std::array<unsigned char, 8> length{};
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(length.data(), length.size());
  out.write(header.data(), header.size());
  for (const auto& p : planned) {
    try {
      write_tensor_bytes(out, p);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(path + ": tensor '" + *p.name + "': " + e.what());
    }
  }
  out.finish();
  digest.bytes = out.bytes();
  digest.crc32 = out.crc32();
}

// ---------------------------------------------------------------------------------------------------------------
// Reading

struct Layout {
  std::vector<SafetensorsEntry> entries;  // header order
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;
};

class HeaderParser {
 public:
  explicit HeaderParser(std::string path) : path_(std::move(path)) {}

  Layout parse(const SafetensorsFile& file) {
    Layout layout;
    const std::uint64_t header_bytes = read_header_length(file);
    layout.data_start = 8 + header_bytes;
    Json header = parse_json(file, header_bytes);
    for (const auto& [key, value] : header.items()) {
      if (key == kMetadataKey) {
        layout.metadata = parse_metadata(value);
      } else {
        layout.entries.push_back(parse_entry(key, value));
      }
    }
    check_layout(layout.entries, file.file_bytes() - layout.data_start);
    return layout;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const { throw SafetensorsError(path_, problem); }

  // A file whose first 8 bytes, read as the header length, point past its end is rarely a truncated safetensors
  // file: name what it looks like instead of quoting a length of 8 bytes of text. "" when nothing is recognised.
  static std::string other_format(const std::array<unsigned char, 8>& head) {
    const std::string expected = " (a safetensors file starts with its header's length, 8 bytes little-endian, then "
                                 "a JSON header)";
    if (head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4)
      return "not a safetensors file: a zip archive, as torch.save and TorchScript write" + expected;
    if (head[0] == 0x1f && head[1] == 0x8b) return "not a safetensors file: gzip-compressed data" + expected;
    if (head[0] == 0x80 && head[1] >= 2 && head[1] <= 5) return "not a safetensors file: a Python pickle" + expected;
    std::string text;
    for (unsigned char c : head) {
      if (c == '\n' || c == '\r' || c == '\t') {
        text += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      } else if (c >= 0x20 && c < 0x7f) {
        text += static_cast<char>(c);
      } else {
        return "";
      }
    }
    return "not a safetensors file: it starts with the text \"" + text + "\"" + expected;
  }

  std::uint64_t read_header_length(const SafetensorsFile& file) const {
    if (file.file_bytes() < 8) {
      fail("truncated: file has " + std::to_string(file.file_bytes()) +
           " bytes, too short for the 8-byte header length");
    }
    std::array<unsigned char, 8> length{};
    file.read_at(0, length.data(), length.size());
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
    if (n > file.file_bytes() - 8) {
      if (const std::string other = other_format(length); !other.empty()) fail(other);
      fail("truncated: header says " + std::to_string(n) + " bytes, file has " + std::to_string(file.file_bytes() - 8) +
           " after the 8-byte length");
    }
    if (n > kMaxHeaderBytes) {
      fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes));
    }
    return n;
  }

  Json parse_json(const SafetensorsFile& file, std::uint64_t header_bytes) const {
    std::string text(header_bytes, '\0');
    file.read_at(8, text.data(), header_bytes);
    Json header;
    try {
      header = Json::parse(text);
    } catch (const Json::exception& e) {
      fail(std::string("invalid JSON header: ") + e.what());
    }
    if (!header.is_object()) fail(std::string("header is a JSON ") + header.type_name() + ", expected an object");
    return header;
  }

  std::map<std::string, std::string> parse_metadata(const Json& value) const {
    if (!value.is_object()) fail(std::string(kMetadataKey) + " is a JSON " + value.type_name() + ", expected an object");
    std::map<std::string, std::string> metadata;
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string()) {
        fail(std::string(kMetadataKey) + " entry '" + key + "' is a JSON " + item.type_name() + ", expected a string");
      }
      metadata[key] = item.get<std::string>();
    }
    return metadata;
  }

  std::uint64_t non_negative(const std::string& where, const Json& value) const {
    if (value.is_number_unsigned()) return value.get<std::uint64_t>();
    if (value.is_number_integer() && value.get<std::int64_t>() >= 0) return value.get<std::uint64_t>();
    fail(where + ": expected a non-negative integer, got " + value.dump());
  }

  SafetensorsEntry parse_entry(const std::string& name, const Json& value) const {
    const std::string where = "tensor '" + name + "'";
    if (!value.is_object()) fail(where + ": entry is a JSON " + std::string(value.type_name()) + ", expected an object");
    for (const auto& [field, ignored] : value.items()) {
      if (field != "dtype" && field != "shape" && field != "data_offsets") fail(where + ": unknown field '" + field + "'");
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) fail(where + ": missing field '" + field + "'");
    }
    SafetensorsEntry entry;
    entry.name = name;
    entry.dtype = parse_dtype(where, value["dtype"]);
    if (!value["shape"].is_array()) fail(where + ": shape must be an array, got " + value["shape"].dump());
    for (const auto& dim : value["shape"]) {
      std::uint64_t d = non_negative(where + ": shape", dim);
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) fail(where + ": shape too large");
      entry.shape.push_back(static_cast<std::int64_t>(d));
    }
    const Json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      fail(where + ": data_offsets must be [begin, end], got " + offsets.dump());
    }
    entry.begin = non_negative(where + ": data_offsets", offsets[0]);
    entry.end = non_negative(where + ": data_offsets", offsets[1]);
    if (entry.end < entry.begin) fail(where + ": data_offsets out of order: " + offsets.dump());
    check_size(where, entry);
    return entry;
  }

  at::ScalarType parse_dtype(const std::string& where, const Json& value) const {
    if (!value.is_string()) fail(where + ": dtype must be a string, got " + value.dump());
    const DtypeInfo* info = dtype_by_name(value.get<std::string>());
    if (!info) fail(where + ": unknown dtype '" + value.get<std::string>() + "'");
    return info->type;
  }

  void check_size(const std::string& where, const SafetensorsEntry& entry) const {
    // Computed with overflow checks: a hostile shape must not wrap around to a plausible size.
    std::uint64_t expected = c10::elementSize(entry.dtype);
    for (std::int64_t dim : entry.shape) {
      const auto d = static_cast<std::uint64_t>(dim);
      if (d != 0 && expected > std::numeric_limits<std::uint64_t>::max() / d) fail(where + ": shape too large");
      expected *= d;
    }
    if (entry.end - entry.begin != expected) {
      fail(where + ": data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "] span " +
           std::to_string(entry.end - entry.begin) + " bytes, but shape " + format_shape(entry.shape) + " of " +
           dtype_name(entry.dtype) + " needs " + std::to_string(expected));
    }
  }

  // The tensors must tile the data exactly: in offset order, each begins where the previous ended, and the last
  // ends at the end of the file.
  void check_layout(const std::vector<SafetensorsEntry>& entries, std::uint64_t data_bytes) const {
    std::vector<const SafetensorsEntry*> sorted;
    for (const auto& e : entries) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
      return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    std::uint64_t expected = 0;
    const SafetensorsEntry* previous = nullptr;
    for (const SafetensorsEntry* e : sorted) {
      const std::string where = "tensor '" + e->name + "'";
      if (e->end > data_bytes) {
        fail(where + ": data_offsets [" + std::to_string(e->begin) + ", " + std::to_string(e->end) +
             "] lie outside the data (" + std::to_string(data_bytes) + " bytes; file truncated?)");
      }
      if (e->begin < expected) fail(where + " overlaps tensor '" + previous->name + "'");
      if (e->begin > expected) {
        fail("gap of " + std::to_string(e->begin - expected) + " bytes before " + where + " at offset " +
             std::to_string(expected));
      }
      expected = e->end;
      if (e->end > e->begin) previous = e;
    }
    if (expected < data_bytes) {
      fail(std::to_string(data_bytes - expected) + " trailing bytes after the last tensor (data is " +
           std::to_string(expected) + " bytes, file holds " + std::to_string(data_bytes) + ")");
    }
  }

  std::string path_;
};

}  // namespace

SafetensorsError::SafetensorsError(std::string file, std::string problem)
    : CheckpointError(file + ": " + problem), file_(std::move(file)), problem_(std::move(problem)) {}
SafetensorsError::~SafetensorsError() = default;

FileDigest write_safetensors(const std::string& path, const NamedTensors& tensors,
                             const std::map<std::string, std::string>& metadata) {
  const auto planned = plan_tensors(path, tensors);
  const std::string header = header_text(planned, metadata);
  FileDigest digest;
  try {
    write_file(path, planned, header, digest);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);  // never leave a file that looks complete but is not
    throw;
  }
  return digest;
}

FileDigest write_safetensors_atomic(const std::string& path, const NamedTensors& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  const std::string temporary = path + ".tmp";
  FileDigest digest = write_safetensors(temporary, tensors, metadata);  // removes the temporary when it fails
  rename_durably(temporary, path);
  return digest;
}

std::map<std::string, std::string> state_dict_metadata(const StateDict& content) {
  std::map<std::string, std::string> metadata;
  const Json scalars = Json::parse(content.scalars_json());
  for (const auto& [key, value] : scalars.items()) metadata[key] = value.dump();
  return metadata;
}

FileDigest write_state_dict_atomic(const std::string& path, const StateDict& content) {
  NamedTensors tensors;
  for (const auto& key : content.tensor_keys()) tensors.emplace_back(key, content.tensor(key));
  return write_safetensors_atomic(path, tensors, state_dict_metadata(content));
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw SafetensorsError(path_, std::string("cannot open: ") + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw SafetensorsError(path_, std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw SafetensorsError(path_, "not a regular file");
    size_ = static_cast<std::uint64_t>(st.st_size);
    Layout layout = HeaderParser(path_).parse(*this);
    entries_ = std::move(layout.entries);
    metadata_ = std::move(layout.metadata);
    data_start_ = layout.data_start;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { ::close(fd_); }

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const auto& entry : entries_)
    if (entry.name == name) return &entry;
  return nullptr;
}

void SafetensorsFile::read_at(std::uint64_t offset, void* into, std::uint64_t count) const {
  auto* out = static_cast<char*>(into);
  while (count > 0) {
    ssize_t got = ::pread(fd_, out, count, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw SafetensorsError(path_, std::string("cannot read: ") + std::strerror(errno));
    if (got == 0) throw SafetensorsError(path_, "file shrank while being read");
    out += got;
    offset += static_cast<std::uint64_t>(got);
    count -= static_cast<std::uint64_t>(got);
  }
}

const char* safetensors_dtype_name(at::ScalarType type) { return dtype_name(type); }

void validate_safetensors(const std::string& path) { SafetensorsFile file(path); }

SafetensorsContents read_safetensors(const std::string& path) {
  const SafetensorsFile file(path);
  SafetensorsContents contents;
  contents.metadata = file.metadata();
  for (const auto& entry : file.entries()) {
    // Each tensor's bytes are read straight into its own storage: no intermediate buffer of the whole file.
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
    if (entry.end > entry.begin) file.read_at(file.data_start() + entry.begin, tensor.data_ptr(), entry.end - entry.begin);
    contents.tensors.emplace_back(entry.name, std::move(tensor));
  }
  return contents;
}

std::size_t load_safetensors_into(torch::nn::Module& module, const std::string& path, bool strict) {
  const SafetensorsContents file = read_safetensors(path);
  const auto fail = [&](const std::string& problem) { throw SafetensorsError(path, problem); };
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, tensor] : file.tensors) by_name[name] = &tensor;
  c10::NoGradGuard no_grad;
  std::size_t loaded = 0;
  std::set<std::string> used;
  for (auto& item : model_tensors(module)) {
    auto it = by_name.find(item.name);
    if (it == by_name.end()) {
      if (strict)
        fail("the module's " + std::string(item.parameter ? "parameter" : "buffer") + " '" + item.name +
             "' is not in the file (load_safetensors_into with strict = false loads the names both have)");
      continue;
    }
    const at::Tensor& value = *it->second;
    if (value.sizes() != item.tensor.sizes()) {
      fail("tensor '" + item.name + "' is " + format_shape(value.sizes()) + " in the file but " +
           format_shape(item.tensor.sizes()) + " in the module");
    }
    item.tensor.copy_(value);  // converts dtype and device
    used.insert(item.name);
    ++loaded;
  }
  if (strict)
    for (const auto& [name, tensor] : file.tensors)
      if (used.count(name) == 0) fail("tensor '" + name + "' belongs to no parameter or buffer of the module");
  return loaded;
}

}  // namespace baton
