#include "checkpoint/checkpoint_store.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "checkpoint/durable_file.h"
#include "baton/safetensors.h"

namespace fs = std::filesystem;

namespace baton {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "baton-checkpoint";
constexpr const char* kMetaFile = "meta.json";
constexpr const char* kStateFile = "state.safetensors";
// Folder prefixes inside <dir>. A save builds ".tmp-<name>-<pid>"; replacing an existing <name> parks the old one
// as ".old-<name>-<pid>" for the moment between the two renames; pruning renames a checkpoint to ".del-..." before
// deleting it, so a crash halfway through a deletion never leaves a damaged checkpoint under a real name.
constexpr const char* kTmpPrefix = ".tmp-";
constexpr const char* kOldPrefix = ".old-";
constexpr const char* kDeletePrefix = ".del-";

using FileMeta = SharedFile;

struct SectionMeta {
  std::string name;
  Json scalars;
  std::vector<std::string> tensors;
};

struct Meta {
  std::string name;
  Timestamp timestamp;
  std::string config;
  std::vector<SectionMeta> sections;
  std::vector<FileMeta> files;
};

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

[[noreturn]] void corrupt(const std::string& checkpoint, const std::string& problem) {
  throw CheckpointError("checkpoint " + checkpoint + ": " + problem);
}

// A meta.json with a format version above this baton's: a checkpoint that a newer baton wrote, valid for it.
class NewerFormatError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// ---------------------------------------------------------------------------------------------------------------
// meta.json

Json timestamp_json(const Timestamp& t) {
  return Json{{"epoch", t.epoch},
              {"batch", t.batch},
              {"sample", t.sample},
              {"token", t.token},
              {"iteration", t.iteration},
              {"batch_in_epoch", t.batch_in_epoch},
              {"sample_in_epoch", t.sample_in_epoch}};
}

Timestamp timestamp_from_json(const Json& j) {
  Timestamp t;
  t.epoch = j.at("epoch").get<std::int64_t>();
  t.batch = j.at("batch").get<std::int64_t>();
  t.sample = j.at("sample").get<std::int64_t>();
  t.token = j.at("token").get<std::int64_t>();
  t.iteration = j.at("iteration").get<std::int64_t>();
  t.batch_in_epoch = j.at("batch_in_epoch").get<std::int64_t>();
  t.sample_in_epoch = j.at("sample_in_epoch").get<std::int64_t>();
  return t;
}

std::string meta_text(const std::string& name, const CheckpointData& data, const std::vector<FileMeta>& files) {
  Json sections = Json::array();
  for (const auto& [section, sd] : data.sections) {
    sections.push_back(Json{{"name", section}, {"scalars", Json::parse(sd.scalars_json())}, {"tensors", sd.tensor_keys()}});
  }
  Json file_entries = Json::object();
  bool in_folders = false;
  for (const auto& f : files) {
    file_entries[f.name] = Json{{"bytes", f.bytes}, {"crc32", f.crc32}};
    if (f.header_crc32) file_entries[f.name]["header_crc32"] = *f.header_crc32;
    in_folders = in_folders || f.name.find('/') != std::string::npos;
  }
  // Only a checkpoint with shard folders needs version 2: any other stays readable by a baton that reads 1.
  Json meta{{"format", kFormat},
            {"version", in_folders ? kCheckpointFormatVersion : 1},
            {"name", name},
            {"timestamp", timestamp_json(data.timestamp)},
            {"config", data.config_text},
            {"sections", std::move(sections)},
            {"files", std::move(file_entries)}};
  return meta.dump(2) + "\n";
}

Json read_meta_json(const std::string& checkpoint) {
  const fs::path path = fs::path(checkpoint) / kMetaFile;
  std::error_code error;
  if (!fs::is_directory(checkpoint, error)) corrupt(checkpoint, "no such checkpoint folder");
  if (fs::is_empty(checkpoint, error) && !error) corrupt(checkpoint, "the folder is empty (no meta.json)");
  if (!fs::exists(path, error)) corrupt(checkpoint, "meta.json is missing (the checkpoint is incomplete)");
  std::string text;
  try {
    text = read_text_file(path.string());
  } catch (const Error& e) {
    corrupt(checkpoint, std::string("meta.json: ") + e.what());
  }
  Json meta;
  try {
    meta = Json::parse(text);
  } catch (const Json::exception& e) {
    corrupt(checkpoint, std::string("meta.json does not parse: ") + e.what());
  }
  if (!meta.is_object()) corrupt(checkpoint, "meta.json: expected a JSON object");
  const Json& format = meta.contains("format") ? meta["format"] : Json();
  if (format != kFormat) {
    corrupt(checkpoint, "meta.json: unsupported format: got " + format.dump() + ", supported \"" + kFormat + "\"");
  }
  const Json& version = meta.contains("version") ? meta["version"] : Json();
  if (!version.is_number_integer() || version.get<std::int64_t>() < 1 ||
      version.get<std::int64_t>() > kCheckpointFormatVersion) {
    const std::string problem = "meta.json: unsupported version: got " + version.dump() + ", supported 1 to " +
                                std::to_string(kCheckpointFormatVersion);
    if (version.is_number_integer() && version.get<std::int64_t>() > kCheckpointFormatVersion)
      throw NewerFormatError("checkpoint " + checkpoint + ": " + problem);
    corrupt(checkpoint, problem);
  }
  return meta;
}

Meta parse_meta(const std::string& checkpoint) {
  const Json meta = read_meta_json(checkpoint);
  Meta out;
  // Field access throws nlohmann's exceptions, which name the missing key or the wrong type.
  try {
    out.name = meta.at("name").get<std::string>();
    out.timestamp = timestamp_from_json(meta.at("timestamp"));
    out.config = meta.at("config").get<std::string>();
    for (const auto& s : meta.at("sections")) {
      SectionMeta section{s.at("name").get<std::string>(), s.at("scalars"), s.at("tensors").get<std::vector<std::string>>()};
      if (!section.scalars.is_object()) corrupt(checkpoint, "meta.json: scalars of section '" + section.name + "' is not an object");
      out.sections.push_back(std::move(section));
    }
    for (const auto& [file, entry] : meta.at("files").items()) {
      FileMeta record{file, entry.at("bytes").get<std::uint64_t>(), entry.at("crc32").get<std::uint32_t>(), {}};
      if (entry.contains("header_crc32")) record.header_crc32 = entry.at("header_crc32").get<std::uint32_t>();
      out.files.push_back(std::move(record));
    }
  } catch (const Json::exception& e) {
    corrupt(checkpoint, std::string("meta.json is malformed: ") + e.what());
  }
  const bool has_state = std::any_of(out.files.begin(), out.files.end(), [](const FileMeta& f) { return f.name == kStateFile; });
  if (!has_state) corrupt(checkpoint, "meta.json does not list state.safetensors");
  return out;
}

// Present at the size meta.json records: all that is checked of a file the reader does not read.
void verify_size(const std::string& checkpoint, const FileMeta& file) {
  const fs::path path = fs::path(checkpoint) / file.name;
  std::error_code error;
  const auto bytes = fs::file_size(path, error);
  if (error) corrupt(checkpoint, file.name + ": missing (" + error.message() + ")");
  if (bytes != file.bytes) {
    corrupt(checkpoint, file.name + ": size is " + std::to_string(bytes) + " bytes, meta.json says " +
                            std::to_string(file.bytes) + " (file truncated or overwritten)");
  }
}

void verify_file(const std::string& checkpoint, const FileMeta& file) {
  const fs::path path = fs::path(checkpoint) / file.name;
  verify_size(checkpoint, file);
  std::uint32_t crc = 0;
  try {
    crc = crc32_of_file(path.string());
  } catch (const Error& e) {
    corrupt(checkpoint, file.name + ": " + e.what());
  }
  if (crc != file.crc32) corrupt(checkpoint, file.name + ": crc32 mismatch (file corrupted)");
}

template <typename F>
auto with_checkpoint_context(const std::string& checkpoint, const std::string& file, F&& read) {
  try {
    return read();
  } catch (const SafetensorsError& e) {
    corrupt(checkpoint, file + ": " + e.problem());
  }
}

bool reads(const FileFilter& read, const std::string& file) { return file == kStateFile || !read || read(file); }

Meta verify(const std::string& checkpoint, const FileFilter& read) {
  Meta meta = parse_meta(checkpoint);
  for (const auto& file : meta.files) {
    if (!reads(read, file.name)) {
      verify_size(checkpoint, file);
      continue;
    }
    verify_file(checkpoint, file);
    const std::string path = (fs::path(checkpoint) / file.name).string();
    with_checkpoint_context(checkpoint, file.name, [&] { validate_safetensors(path); });
  }
  return meta;
}

// ---------------------------------------------------------------------------------------------------------------
// Extra files keep their scalars in the safetensors metadata (state_dict_metadata, baton/safetensors.h).

void scalars_from_metadata(const std::string& checkpoint, const std::string& file,
                           const std::map<std::string, std::string>& metadata, StateDict& sd) {
  Json scalars = Json::object();
  for (const auto& [key, text] : metadata) {
    try {
      scalars[key] = Json::parse(text);
    } catch (const Json::exception& e) {
      corrupt(checkpoint, file + ": metadata '" + key + "' is not a JSON value: " + e.what());
    }
  }
  sd.set_scalars_json(scalars.dump());
}

NamedTensors prefixed_tensors(const std::string& prefix, const StateDict& sd) {
  NamedTensors out;
  for (const auto& key : sd.tensor_keys()) out.emplace_back(prefix + key, sd.tensor(key));
  return out;
}

void check_save_names(const std::string& name, const CheckpointData& data) {
  if (name.empty() || name == "." || name == ".." || name.front() == '.' || name.find('/') != std::string::npos) {
    throw Error("invalid checkpoint name '" + name + "': must be a plain folder name not starting with '.'");
  }
  std::set<std::string> sections;
  for (const auto& [section, sd] : data.sections) {
    if (section.empty()) throw Error("checkpoint '" + name + "': a section has an empty name");
    if (!sections.insert(section).second) throw Error("checkpoint '" + name + "': section '" + section + "' appears twice");
  }
  std::set<std::string> files;
  for (const auto& [file, sd] : data.files) {
    const bool plain = !file.empty() && file.front() != '.' && file.find('/') == std::string::npos;
    const std::string suffix = ".safetensors";
    const bool safetensors = file.size() > suffix.size() && file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (!plain || !safetensors || file == kStateFile) {
      throw Error("checkpoint '" + name + "': invalid extra file name '" + file +
                  "' (a plain name ending in .safetensors, other than state.safetensors)");
    }
    if (!files.insert(file).second) throw Error("checkpoint '" + name + "': extra file '" + file + "' appears twice");
  }
}

// Writes every file of the checkpoint into `folder`, each fsynced, meta.json last, then fsyncs the folder.
void write_checkpoint_files(const fs::path& folder, const std::string& name, const CheckpointData& data,
                            const std::vector<SharedFile>& shared) {
  NamedTensors state;
  for (const auto& [section, sd] : data.sections) {
    auto tensors = prefixed_tensors(section + "/", sd);
    state.insert(state.end(), tensors.begin(), tensors.end());
  }
  std::vector<FileMeta> files;
  auto digest = write_safetensors((folder / kStateFile).string(), state);
  files.push_back({kStateFile, digest.bytes, digest.crc32, {}});
  for (const auto& [file, sd] : data.files) {
    digest = write_safetensors((folder / file).string(), prefixed_tensors("", sd), state_dict_metadata(sd));
    files.push_back({file, digest.bytes, digest.crc32, {}});
  }
  for (const SharedFile& file : shared) {
    // Written by the ranks before this call: each must be there, whole, before meta.json commits it.
    std::error_code error;
    const auto bytes = fs::file_size(folder / file.name, error);
    if (error) throw Error("shard file " + (folder / file.name).string() + " is missing: " + error.message());
    if (bytes != file.bytes)
      throw Error("shard file " + (folder / file.name).string() + " is " + std::to_string(bytes) +
                  " bytes, its rank wrote " + std::to_string(file.bytes));
    files.push_back(file);
  }
  const std::string meta = meta_text(name, data, files);
  DurableFileWriter writer((folder / kMetaFile).string());
  writer.write(meta.data(), meta.size());
  writer.finish();
  fsync_path(folder.string());
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code error;
  fs::rename(from, to, error);
  if (error) throw Error("cannot rename " + from.string() + " to " + to.string() + ": " + error.message());
}

std::string suffix_pid(const std::string& prefix, const std::string& name) {
  return prefix + name + "-" + std::to_string(::getpid());
}

// The folder a sharded save of `name` is built in: one name that every rank computes alike. A stale one (a save
// that stopped before its commit) starts with the temporary prefix, so the next store over `dir` removes it.
std::string shared_folder(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / (std::string(kTmpPrefix) + name + "-shared")).string();
}

// The checkpoint name inside a ".old-<name>-<pid>" folder name.
std::string name_of_parked(const std::string& folder) {
  const std::string rest = folder.substr(std::strlen(kOldPrefix));
  return rest.substr(0, rest.rfind('-'));
}

}  // namespace

const StateDict* CheckpointData::section(const std::string& name) const {
  for (const auto& [section_name, sd] : sections) {
    if (section_name == name) return &sd;
  }
  return nullptr;
}

CheckpointStore::CheckpointStore(std::string dir, std::int64_t keep_last) : dir_(std::move(dir)), keep_last_(keep_last) {
  if (keep_last_ < 0) throw Error("checkpoint keep_last must be >= 0 (0 keeps all), got " + std::to_string(keep_last_));
  std::error_code error;
  if (!fs::is_directory(dir_, error)) return;
  // Collected first: renaming and removing entries while iterating the folder is unspecified.
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(dir_, error)) entries.push_back(entry.path());
  for (const auto& entry : entries) {
    const std::string folder = entry.filename().string();
    if (starts_with(folder, kTmpPrefix) || starts_with(folder, kDeletePrefix)) {
      fs::remove_all(entry, error);
    } else if (starts_with(folder, kOldPrefix)) {
      // A save that replaced a checkpoint stopped between its two renames: if the new one made it in, the old one
      // is garbage; otherwise the old one is the only copy and goes back under its name.
      const fs::path real = fs::path(dir_) / name_of_parked(folder);
      if (fs::exists(real, error)) {
        fs::remove_all(entry, error);
      } else {
        fs::rename(entry, real, error);
      }
    }
  }
}

std::string CheckpointStore::save(const std::string& name, const CheckpointData& data,
                                  const std::vector<SharedFile>& shared) {
  check_save_names(name, data);
  const fs::path dir(dir_);
  const fs::path final_path = dir / name;
  std::error_code exists_error;
  if (fs::is_directory(final_path, exists_error)) {
    try {
      read_meta_json(final_path.string());
    } catch (const NewerFormatError& e) {
      throw Error("cannot save checkpoint " + final_path.string() + ": the folder holds a checkpoint written by a "
                  "newer baton, which is never overwritten (" + e.what() + "); move it away to save here");
    } catch (const CheckpointError&) {
      // A damaged or incomplete folder under this name: the new checkpoint replaces it.
    }
  }
  // A sharded save is built in the folder the ranks wrote their files into; another in a folder of this process.
  const fs::path temporary = shared.empty() ? dir / suffix_pid(kTmpPrefix, name) : fs::path(shared_folder(dir_, name));
  const fs::path parked = dir / suffix_pid(kOldPrefix, name);
  bool old_parked = false;
  try {
    fs::create_directories(dir);
    if (shared.empty()) {
      fs::remove_all(temporary);
      fs::create_directory(temporary);
    }
    write_checkpoint_files(temporary, name, data, shared);
    // Between these two renames <name> does not exist; a crash there leaves the previous version parked as
    // ".old-<name>-<pid>", which the next CheckpointStore over this folder renames back.
    if (fs::exists(final_path)) {
      rename_or_throw(final_path, parked);
      old_parked = true;
    }
    rename_or_throw(temporary, final_path);
    fsync_path(dir.string());
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove_all(temporary, ignored);
    if (old_parked && !fs::exists(final_path, ignored)) fs::rename(parked, final_path, ignored);
    throw Error("cannot save checkpoint " + final_path.string() + ": " + e.what());
  }
  std::error_code ignored;
  if (old_parked) fs::remove_all(parked, ignored);
  prune(final_path.string());
  return final_path.string();
}

SharedFile CheckpointStore::write_shared(const std::string& name, const std::string& file,
                                         const std::function<SharedFile(const std::string& path)>& write) const {
  // The names are checked as save() checks them, a folder of the file's own allowed.
  const std::size_t slash = file.find('/');
  const std::string folder_name = slash == std::string::npos ? "" : file.substr(0, slash);
  CheckpointData probe;
  probe.files.emplace_back(slash == std::string::npos ? file : file.substr(slash + 1), StateDict());
  check_save_names(name, probe);
  if (slash != std::string::npos && (folder_name.empty() || folder_name.front() == '.'))
    throw Error("checkpoint '" + name + "': invalid shard file name '" + file + "'");
  const fs::path folder = fs::path(shared_folder(dir_, name)) / folder_name;
  try {
    std::error_code error;
    fs::create_directories(folder, error);
    if (error) throw Error("cannot create " + folder.string() + ": " + error.message());
    SharedFile written = write((fs::path(shared_folder(dir_, name)) / file).string());
    written.name = file;
    return written;
  } catch (const std::exception& e) {
    throw Error("cannot save checkpoint " + (fs::path(dir_) / name).string() + ": " + e.what());
  }
}

SharedFile CheckpointStore::write_shared(const std::string& name, const std::string& file,
                                         const StateDict& content) const {
  return write_shared(name, file, [&](const std::string& path) {
    const auto digest = write_safetensors(path, prefixed_tensors("", content), state_dict_metadata(content));
    return SharedFile{file, digest.bytes, digest.crc32, std::nullopt};
  });
}

void CheckpointStore::prune(const std::string& keep) const {
  if (keep_last_ == 0) return;
  auto checkpoints = list();
  auto excess = static_cast<std::int64_t>(checkpoints.size()) - keep_last_;
  for (const auto& info : checkpoints) {
    if (excess <= 0) break;
    if (info.path == keep) continue;  // never the checkpoint just written, even if its timestamp is older
    const fs::path doomed = fs::path(dir_) / suffix_pid(kDeletePrefix, fs::path(info.path).filename().string());
    // Best effort: a checkpoint that cannot be removed now is retried by the next save's pruning.
    std::error_code error;
    fs::rename(info.path, doomed, error);
    if (!error) fs::remove_all(doomed, error);
    --excess;
  }
  fsync_path(dir_);
}

std::vector<CheckpointInfo> CheckpointStore::list(std::vector<SkippedCheckpoint>* skipped) const {
  std::vector<CheckpointInfo> out;
  std::error_code error;
  if (!fs::is_directory(dir_, error)) return out;
  for (const auto& entry : fs::directory_iterator(dir_, error)) {
    const std::string folder = entry.path().filename().string();
    if (folder.empty() || folder.front() == '.' || !entry.is_directory(error)) continue;
    // A folder whose meta.json cannot be read is no checkpoint to list (nor to prune), but the caller hears of it:
    // it may be a damaged checkpoint, or one of a newer baton.
    try {
      out.push_back(read_checkpoint_info(entry.path().string()));
    } catch (const NewerFormatError& e) {
      if (skipped) skipped->push_back({entry.path().string(), e.what(), /*newer_format=*/true});
    } catch (const CheckpointError& e) {
      if (skipped) skipped->push_back({entry.path().string(), e.what(), /*newer_format=*/false});
    }
  }
  if (skipped)
    std::sort(skipped->begin(), skipped->end(),
              [](const SkippedCheckpoint& a, const SkippedCheckpoint& b) { return a.path < b.path; });
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.timestamp.batch != b.timestamp.batch ? a.timestamp.batch < b.timestamp.batch : a.name < b.name;
  });
  return out;
}

std::optional<CheckpointInfo> CheckpointStore::newest_valid(
    std::vector<std::string>& warnings, const FileFilter& read,
    const std::function<void(const std::string& path)>& check) const {
  std::vector<SkippedCheckpoint> skipped;
  const auto checkpoints = list(&skipped);
  for (const auto& folder : skipped)
    if (!folder.newer_format) warnings.push_back("skipping corrupt checkpoint: " + folder.reason);
  for (const auto& folder : skipped)
    if (folder.newer_format)
      throw CheckpointError(folder.reason + ": it was written by a newer baton, so --resume auto stops here rather "
                            "than continue from an older checkpoint and later overwrite it; resume with that newer "
                            "baton, or choose a checkpoint with --resume <folder> (saves never replace the newer "
                            "one)");
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    try {
      if (check)
        check(it->path);
      else
        verify_checkpoint(it->path, read);
      return *it;
    } catch (const CheckpointError& e) {
      warnings.push_back(std::string("skipping corrupt checkpoint: ") + e.what());
    }
  }
  return std::nullopt;
}

void verify_checkpoint(const std::string& path, const FileFilter& read) { verify(path, read); }

CheckpointData load_checkpoint(const std::string& path, const FileFilter& read) {
  const Meta meta = verify(path, read);
  CheckpointData data;
  data.timestamp = meta.timestamp;
  data.config_text = meta.config;
  data.listed = meta.files;

  auto state = with_checkpoint_context(path, kStateFile, [&] { return read_safetensors((fs::path(path) / kStateFile).string()); });
  std::map<std::string, at::Tensor> by_name(state.tensors.begin(), state.tensors.end());
  for (const auto& section : meta.sections) {
    StateDict sd;
    sd.set_scalars_json(section.scalars.dump());
    for (const auto& key : section.tensors) {
      auto found = by_name.find(section.name + "/" + key);
      if (found == by_name.end()) {
        corrupt(path, std::string(kStateFile) + ": tensor '" + section.name + "/" + key + "' listed in meta.json is missing");
      }
      sd.set_tensor(key, found->second);
    }
    data.sections.emplace_back(section.name, std::move(sd));
  }
  for (const auto& file : meta.files) {
    // A shard folder's files are read in parts, by their readers (row_shards.h); here only verified.
    if (file.name == kStateFile || !reads(read, file.name) || file.name.find('/') != std::string::npos) continue;
    auto contents = with_checkpoint_context(path, file.name, [&] { return read_safetensors((fs::path(path) / file.name).string()); });
    StateDict sd;
    for (auto& [key, tensor] : contents.tensors) sd.set_tensor(key, tensor);
    scalars_from_metadata(path, file.name, contents.metadata, sd);
    data.files.emplace_back(file.name, std::move(sd));
  }
  return data;
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const Json meta = read_meta_json(path);
  CheckpointInfo info;
  info.path = path;
  try {
    info.name = meta.at("name").get<std::string>();
    info.timestamp = timestamp_from_json(meta.at("timestamp"));
  } catch (const Json::exception& e) {
    corrupt(path, std::string("meta.json is malformed: ") + e.what());
  }
  return info;
}

}  // namespace baton
