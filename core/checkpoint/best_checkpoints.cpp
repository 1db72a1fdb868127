#include "checkpoint/best_checkpoints.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/durable_file.h"
#include "baton/error.h"
#include "baton/safetensors.h"
#include "baton/time.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/row_shards.h"

namespace fs = std::filesystem;

namespace baton {

Ranking::Ranking(std::string metric, bool maximize, std::int64_t keep)
    : metric_(std::move(metric)), maximize_(maximize), keep_(keep) {}

bool Ranking::better(double a, double b) const { return maximize_ ? a > b : a < b; }

bool Ranking::offer(const RankedCheckpoint& candidate) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->name == candidate.name) {
      entries_.erase(it);
      break;
    }
  if (std::isnan(candidate.value)) return false;
  auto position = entries_.begin();
  while (position != entries_.end() && !better(candidate.value, position->value)) ++position;
  if (position - entries_.begin() >= keep_) return false;
  entries_.insert(position, candidate);
  if (static_cast<std::int64_t>(entries_.size()) > keep_) entries_.resize(static_cast<std::size_t>(keep_));
  return true;
}

void Ranking::save(StateDict& out, const std::string& prefix) const {
  out.set_string(prefix + "metric", metric_);
  out.set_string(prefix + "mode", mode());
  out.set_int(prefix + "count", static_cast<std::int64_t>(entries_.size()));
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const std::string at = prefix + std::to_string(i) + "/";
    out.set_string(at + "name", entries_[i].name);
    out.set_string(at + "path", entries_[i].path);
    out.set_double(at + "value", entries_[i].value);
    out.set_int(at + "epoch", entries_[i].epoch);
    out.set_int(at + "batch", entries_[i].batch);
  }
}

bool Ranking::saved_in(const StateDict& in, const std::string& prefix) { return in.has(prefix + "count"); }

bool Ranking::load(const StateDict& in, const std::string& prefix) {
  entries_.clear();
  if (!saved_in(in, prefix)) return true;
  if (in.get_string(prefix + "metric") != metric_ || in.get_string(prefix + "mode") != mode()) return false;
  std::int64_t count = in.get_int(prefix + "count");
  for (std::int64_t i = 0; i < count; ++i) {
    const std::string at = prefix + std::to_string(i) + "/";
    RankedCheckpoint entry;
    entry.name = in.get_string(at + "name");
    entry.path = in.get_string(at + "path");
    entry.value = in.get_double(at + "value");
    entry.epoch = in.get_int(at + "epoch");
    entry.batch = in.get_int(at + "batch");
    entries_.push_back(std::move(entry));
  }
  // A smaller `keep` in the resumed run applies at once.
  if (static_cast<std::int64_t>(entries_.size()) > keep_) entries_.resize(static_cast<std::size_t>(keep_));
  return true;
}

namespace {

// A sibling name that no real file uses (the checkpoint store's convention: hidden, with the process id).
fs::path temporary_sibling(const fs::path& target, const char* kind) {
  return target.parent_path() / ("." + std::string(kind) + "-" + target.filename().string() + "-" +
                                 std::to_string(::getpid()));
}

void link_or_copy_file(const fs::path& source, const fs::path& target) {
  std::error_code ec;
  fs::create_hard_link(source, target, ec);
  if (!ec) return;
  fs::copy_file(source, target, fs::copy_options::overwrite_existing);
  fsync_path(target.string());
}

void link_or_copy_atomically(const fs::path& source, const fs::path& target) {
  std::error_code ec;
  if (fs::exists(target, ec) && fs::equivalent(source, target, ec)) return;
  fs::path temporary = temporary_sibling(target, "tmp");
  fs::remove(temporary, ec);
  link_or_copy_file(source, temporary);
  rename_durably(temporary.string(), target.string());
  // rename() between two names of one file does nothing and leaves the temporary name behind.
  fs::remove(temporary, ec);
}

void copy_folder_atomically(const fs::path& source, const fs::path& target) {
  if (!fs::is_directory(source)) throw Error("cannot copy " + source.string() + ": no such folder");
  fs::path temporary = temporary_sibling(target, "tmp");
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  for (const auto& entry : fs::recursive_directory_iterator(source)) {
    fs::path relative = fs::relative(entry.path(), source);
    if (entry.is_directory())
      fs::create_directories(temporary / relative);
    else if (entry.is_regular_file())
      link_or_copy_file(entry.path(), temporary / relative);
  }
  fsync_path(temporary.string());
  // An existing target is moved aside first: the real name always holds one complete copy.
  fs::path old = temporary_sibling(target, "old");
  bool replacing = fs::exists(target);
  if (replacing) {
    fs::remove_all(old);
    fs::rename(target, old);
  }
  rename_durably(temporary.string(), target.string());
  if (replacing) fs::remove_all(old);
}


std::string ranking_json(const Ranking& ranking, const std::vector<RankedCheckpoint>& kept) {
  nlohmann::json list = nlohmann::json::array();
  for (std::size_t i = 0; i < kept.size(); ++i)
    list.push_back({{"rank", i + 1},
                    {"name", kept[i].name},
                    {"folder", kept[i].name},
                    {"checkpoint", kept[i].path},
                    {"value", kept[i].value},
                    {"timestamp", {{"epoch", kept[i].epoch}, {"batch", kept[i].batch}}}});
  nlohmann::json doc = {{"metric", ranking.metric()}, {"mode", ranking.mode()}, {"checkpoints", list}};
  return doc.dump(2) + "\n";
}

// Removes checkpoint folders that are no longer ranked, and what an interrupted copy or write left behind (hidden
// .tmp-/.old- names). Files of other names are the user's and stay.
void remove_unranked(const fs::path& best, const std::set<std::string>& ranked) {
  std::vector<fs::path> doomed;
  for (const auto& entry : fs::directory_iterator(best)) {
    std::string name = entry.path().filename().string();
    bool leftover = name.rfind(".tmp-", 0) == 0 || name.rfind(".old-", 0) == 0;
    bool unranked = entry.is_directory() && name[0] != '.' && !ranked.count(name);
    if (leftover || unranked) doomed.push_back(entry.path());
  }
  for (const auto& path : doomed) fs::remove_all(path);
}

}  // namespace

// A file a plugin names (ema.safetensors) that the checkpoint holds as that plugin's folder of row tensors instead
// (a sharded run's ema/, each rank's rows): put together whole from the folder, its tensors named as the model's.
bool put_together(const fs::path& checkpoint, const std::string& file, const fs::path& target) {
  const CheckpointData data = load_checkpoint(checkpoint.string(), [](const std::string&) { return false; });
  const std::vector<RowShardSource> sources = folder_sources(data, checkpoint.string(), fs::path(file).stem().string());
  if (sources.empty()) return false;
  const RowShardReader reader(sources, "checkpoint " + checkpoint.string());
  write_safetensors_atomic(target.string(), model_named_tensors(reader));
  return true;
}

std::vector<std::string> publish_best(const std::string& best_dir, const Ranking& ranking,
                                      const std::vector<std::string>& top_files, const std::string& refresh) {
  std::vector<std::string> warnings;
  fs::path best(best_dir);
  fs::create_directories(best);
  std::vector<RankedCheckpoint> kept;
  std::set<std::string> names;
  for (const auto& entry : ranking.entries()) {
    fs::path copy = best / entry.name;
    bool present = fs::exists(copy / "meta.json");
    if ((!present || entry.name == refresh) && fs::exists(fs::path(entry.path) / "meta.json")) {
      copy_folder_atomically(entry.path, copy);
      present = true;
    }
    if (!present) {
      warnings.push_back("checkpoint selection: " + entry.name + " (" + ranking.metric() + " " +
                         format_number(entry.value) + ") is gone from " + entry.path + " and from " +
                         copy.string() + "; it is left out of best/");
      continue;
    }
    kept.push_back(entry);
    names.insert(entry.name);
  }
  remove_unranked(best, names);
  write_file_atomic((best / "best.json").string(), ranking_json(ranking, kept));
  for (const std::string& file : top_files) {
    const fs::path top = kept.empty() ? fs::path() : best / kept.front().name / file;
    std::error_code ec;
    if (!kept.empty() && fs::exists(top))
      link_or_copy_atomically(top, best / file);
    else if (kept.empty() || !put_together(best / kept.front().name, file, best / file))
      fs::remove(best / file, ec);
  }
  return warnings;
}

}  // namespace baton
