#include "ema_selection.h"

#include <cmath>
#include <filesystem>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/durable_file.h"
#include "baton/time.h"
#include "ema_files.h"

namespace fs = std::filesystem;

namespace baton::ema_plugin {

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

void Ranking::save(StateDict& out) const {
  out.set_string("select/metric", metric_);
  out.set_string("select/mode", mode());
  out.set_int("select/count", static_cast<std::int64_t>(entries_.size()));
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const std::string prefix = "select/" + std::to_string(i) + "/";
    out.set_string(prefix + "name", entries_[i].name);
    out.set_string(prefix + "path", entries_[i].path);
    out.set_double(prefix + "value", entries_[i].value);
    out.set_int(prefix + "epoch", entries_[i].epoch);
    out.set_int(prefix + "batch", entries_[i].batch);
  }
}

bool Ranking::load(const StateDict& in) {
  entries_.clear();
  if (!in.has("select/count")) return true;
  if (in.get_string("select/metric") != metric_ || in.get_string("select/mode") != mode()) return false;
  std::int64_t count = in.get_int("select/count");
  for (std::int64_t i = 0; i < count; ++i) {
    const std::string prefix = "select/" + std::to_string(i) + "/";
    RankedCheckpoint entry;
    entry.name = in.get_string(prefix + "name");
    entry.path = in.get_string(prefix + "path");
    entry.value = in.get_double(prefix + "value");
    entry.epoch = in.get_int(prefix + "epoch");
    entry.batch = in.get_int(prefix + "batch");
    entries_.push_back(std::move(entry));
  }
  // A smaller `keep` in the resumed run applies at once.
  if (static_cast<std::int64_t>(entries_.size()) > keep_) entries_.resize(static_cast<std::size_t>(keep_));
  return true;
}

namespace {

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

std::vector<std::string> publish_best(const std::string& best_dir, const Ranking& ranking, const std::string& refresh) {
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
  fs::path top_ema = kept.empty() ? fs::path() : best / kept.front().name / "ema.safetensors";
  std::error_code ec;
  if (!kept.empty() && fs::exists(top_ema))
    link_or_copy_atomically(top_ema, best / "ema.safetensors");
  else
    fs::remove(best / "ema.safetensors", ec);
  return warnings;
}

}  // namespace baton::ema_plugin
