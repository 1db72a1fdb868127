#include "baton/posthoc.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <ATen/ops/zeros.h>

#include "baton/error.h"
#include "baton/time.h"

namespace fs = std::filesystem;

namespace baton::posthoc {
namespace {

const std::string& metadata_value(const SafetensorsContents& contents, const std::string& path, const char* key) {
  auto it = contents.metadata.find(key);
  if (it == contents.metadata.end())
    throw Error(path + ": not a post-hoc EMA snapshot (no '" + key + "' in its metadata)");
  return it->second;
}

SnapshotInfo describe(const std::string& path, const SafetensorsContents& contents) {
  SnapshotInfo info;
  info.path = path;
  try {
    info.t = std::stoll(metadata_value(contents, path, kSnapshotTime));
    info.gamma = std::stod(metadata_value(contents, path, kSnapshotGamma));
    info.sigma_rel = std::stod(metadata_value(contents, path, kSnapshotSigmaRel));
  } catch (const std::logic_error&) {  // stoll/stod: not a number
    throw Error(path + ": the post-hoc metadata holds a value that is not a number");
  }
  info.profile = metadata_value(contents, path, kSnapshotProfile);
  return info;
}

void check_same_layout(const NamedTensors& first, const NamedTensors& other, const std::string& path) {
  bool same = first.size() == other.size();
  for (std::size_t i = 0; same && i < first.size(); ++i)
    same = first[i].first == other[i].first && first[i].second.sizes() == other[i].second.sizes();
  if (!same) throw Error(path + ": holds other tensors than the run's other snapshots (another model?)");
}

std::string list(const std::vector<double>& values) {
  std::string out;
  for (double v : values) out += (out.empty() ? "" : ", ") + format_number(v);
  return out;
}

}  // namespace

std::vector<double> SnapshotSet::sigma_rels() const {
  std::set<double> distinct;
  for (const auto& s : info) distinct.insert(s.sigma_rel);
  return {distinct.begin(), distinct.end()};
}

std::int64_t SnapshotSet::last_time() const {
  std::int64_t last = 0;
  for (const auto& s : info) last = std::max(last, s.t);
  return last;
}

SnapshotSet load_snapshots(const std::string& run_dir) {
  if (!fs::is_directory(run_dir)) throw Error("run folder " + run_dir + " does not exist");
  fs::path folder = fs::path(run_dir) / kSnapshotFolder;
  if (!fs::is_directory(folder))
    throw Error(run_dir + " has no posthoc/ folder: train with the ema plugin's posthoc table to write snapshots");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder)) {
    std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name[0] != '.' && entry.path().extension() == ".safetensors")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) throw Error(folder.string() + " holds no snapshots");
  SnapshotSet set;
  for (const auto& file : files) {
    SafetensorsContents contents = read_safetensors(file.string());
    set.info.push_back(describe(file.string(), contents));
    if (!set.tensors.empty()) check_same_layout(set.tensors.front(), contents.tensors, file.string());
    set.tensors.push_back(std::move(contents.tensors));
  }
  return set;
}

void check_target(const SnapshotSet& snapshots, double sigma_rel) {
  std::vector<double> tracked = snapshots.sigma_rels();
  if (tracked.size() < 2)
    throw Error("post-hoc EMA needs snapshots of at least two profiles; the run tracked only sigma_rel " +
                list(tracked) + " (posthoc.sigma_rels needs two or more values)");
  SigmaRange range = representable_sigma_rels(tracked);
  if (!(sigma_rel >= range.low && sigma_rel <= range.high))
    throw Error("sigma_rel " + format_number(sigma_rel) + " is outside what the tracked profiles (" + list(tracked) +
                ") can represent: [" + format_number(range.low) + ", " + format_number(range.high) + "]");
}

SynthesisResult synthesise(const SnapshotSet& snapshots, double sigma_rel) {
  check_target(snapshots, sigma_rel);
  SynthesisResult result;
  result.sigma_rel = sigma_rel;
  result.gamma = gamma_from_sigma_rel(sigma_rel);
  result.t = snapshots.last_time();
  std::vector<Profile> profiles;
  std::size_t newest = 0;
  for (std::size_t i = 0; i < snapshots.info.size(); ++i) {
    profiles.push_back({static_cast<double>(snapshots.info[i].t), snapshots.info[i].gamma});
    if (snapshots.info[i].t > snapshots.info[newest].t) newest = i;
  }
  result.weights = synthesis_weights(profiles, {static_cast<double>(result.t), result.gamma});
  const auto& layout = snapshots.tensors.front();
  for (std::size_t k = 0; k < layout.size(); ++k) {
    const at::Tensor& like = layout[k].second;
    // Integer buffers (BatchNorm's step count) are not averaged: they come from the newest snapshot.
    if (!like.is_floating_point()) {
      result.tensors.emplace_back(layout[k].first, snapshots.tensors[newest][k].second.clone());
      continue;
    }
    at::Tensor sum = at::zeros(like.sizes(), like.options().dtype(at::kDouble));
    for (std::size_t i = 0; i < snapshots.tensors.size(); ++i)
      sum.add_(snapshots.tensors[i][k].second.to(at::kDouble), result.weights.weights[i]);
    result.tensors.emplace_back(layout[k].first, sum.to(like.scalar_type()));
  }
  return result;
}

}  // namespace baton::posthoc
