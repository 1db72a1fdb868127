#include "baton/posthoc.h"

#include <cstdio>
#include <map>
#include <utility>

#include <torch/nn/module.h>

#include "baton/error.h"
#include "baton/time.h"


namespace fs = std::filesystem;

namespace baton::posthoc {
namespace {

constexpr const char* kTimeKey = "posthoc.time";
constexpr const char* kLastSnapshotKey = "posthoc.last_snapshot";
constexpr const char* kProfilesKey = "posthoc.profiles";

std::string tensor_prefix(std::size_t i) { return "posthoc/" + std::to_string(i) + "/"; }
std::string gamma_key(std::size_t i) { return "posthoc.gamma." + std::to_string(i); }

std::string exact(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

// Zero-padded so that a listing sorts by time.
std::string snapshot_file_name(const std::string& profile, std::int64_t t) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "_%010lld.safetensors", static_cast<long long>(t));
  return profile + buffer;
}

// The time in a snapshot's file name, or -1 for another file.
std::int64_t time_in_file_name(const std::string& name) {
  const std::string suffix = ".safetensors";
  if (name.empty() || name[0] == '.' || name.size() < suffix.size() + 12 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  std::string digits = name.substr(name.size() - suffix.size() - 10, 10);
  if (name[name.size() - suffix.size() - 11] != '_' || digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(digits);
}

}  // namespace

std::string profile_name_for(double sigma_rel) { return "sigma" + format_number(sigma_rel); }

PosthocTracker::PosthocTracker(std::vector<double> sigma_rels, EmaOptions options)
    : sigma_rels_(std::move(sigma_rels)) {
  for (double sigma : sigma_rels_) {
    gammas_.push_back(gamma_from_sigma_rel(sigma));
    names_.push_back(profile_name_for(sigma));
    profiles_.emplace_back(options);
  }
}

void PosthocTracker::reset(const torch::nn::Module& model) {
  for (auto& profile : profiles_) profile.reset(model);
  time_ = 0;
  last_snapshot_ = 0;
}

void PosthocTracker::restart_at(const torch::nn::Module& model, std::int64_t t) {
  for (auto& profile : profiles_) profile.reset(model);
  time_ = t;
  last_snapshot_ = 0;
}

bool PosthocTracker::initialized() const { return !profiles_.empty() && profiles_.front().initialized(); }

void PosthocTracker::update(const torch::nn::Module& model, std::int64_t t) {
  if (t <= time_)
    throw Error("post-hoc EMA: update at batch " + std::to_string(t) + " does not follow batch " +
                std::to_string(time_));
  for (std::size_t i = 0; i < profiles_.size(); ++i) {
    // At time 0 nothing has been averaged: β is 0 and the profile becomes the weights, exactly.
    if (time_ == 0)
      profiles_[i].update(model, 0.0);
    else
      profiles_[i].update(model, power_ema_beta(static_cast<double>(time_), static_cast<double>(t),
                                                          gammas_[i]));
  }
  time_ = t;
}

void PosthocTracker::to(const std::string& device) {
  for (auto& profile : profiles_) profile.to(device);
}

NamedTensors PosthocTracker::profile_tensors(std::size_t i) const { return profiles_.at(i).state_dict(); }

std::int64_t PosthocTracker::bytes() const {
  std::int64_t total = 0;
  for (const auto& profile : profiles_) total += profile.bytes();
  return total;
}

std::int64_t PosthocTracker::write_snapshots(const fs::path& run_dir, bool write) {
  if (time_ == 0 || time_ == last_snapshot_) return 0;
  if (write) fs::create_directories(run_dir / kSnapshotFolder);
  std::int64_t written = 0;
  for (std::size_t i = 0; i < profiles_.size(); ++i) {
    NamedTensors tensors = profile_tensors(i);  // every rank: sharded profiles gather
    if (!write) continue;
    std::map<std::string, std::string> metadata{{"format", "pt"},
                                                {kSnapshotTime, std::to_string(time_)},
                                                {kSnapshotGamma, exact(gammas_[i])},
                                                {kSnapshotSigmaRel, exact(sigma_rels_[i])},
                                                {kSnapshotProfile, names_[i]}};
    fs::path path = run_dir / kSnapshotFolder / snapshot_file_name(names_[i], time_);
    write_safetensors_atomic(path.string(), tensors, metadata);
    written += static_cast<std::int64_t>(fs::file_size(path));
  }
  last_snapshot_ = time_;
  return written;
}

void PosthocTracker::remove_snapshots_after_now(const fs::path& run_dir) const {
  std::error_code ec;
  fs::path folder = run_dir / kSnapshotFolder;
  if (!fs::is_directory(folder, ec)) return;
  for (const auto& entry : fs::directory_iterator(folder))
    if (time_in_file_name(entry.path().filename().string()) > time_) fs::remove(entry.path());
}

std::int64_t snapshot_disk_use(const fs::path& run_dir) {
  std::error_code ec;
  fs::path folder = run_dir / kSnapshotFolder;
  std::int64_t total = 0;
  if (!fs::is_directory(folder, ec)) return 0;
  for (const auto& entry : fs::directory_iterator(folder))
    if (time_in_file_name(entry.path().filename().string()) >= 0)
      total += static_cast<std::int64_t>(entry.file_size());
  return total;
}

void PosthocTracker::save(StateDict& out) const {
  out.set_int(kTimeKey, time_);
  out.set_int(kLastSnapshotKey, last_snapshot_);
  out.set_int(kProfilesKey, static_cast<std::int64_t>(profiles_.size()));
  for (std::size_t i = 0; i < profiles_.size(); ++i) {
    out.set_double(gamma_key(i), gammas_[i]);
    // Sharded profiles: each rank its rows (the checkpoint writes each rank's file, no gather).
    if (profiles_[i].sharded()) {
      profiles_[i].save_rows(out, tensor_prefix(i));
      continue;
    }
    for (auto& [name, tensor] : profiles_[i].state_dict()) out.set_tensor(tensor_prefix(i) + name, tensor);
  }
}

bool PosthocTracker::saved_in(const StateDict& in) { return in.has(kTimeKey); }

void PosthocTracker::load(const StateDict& in) {
  std::int64_t count = in.get_int(kProfilesKey);
  std::string configured;
  for (double sigma : sigma_rels_) configured += (configured.empty() ? "" : ", ") + profile_name_for(sigma);
  bool same = count == static_cast<std::int64_t>(profiles_.size());
  for (std::size_t i = 0; same && i < profiles_.size(); ++i) same = in.get_double(gamma_key(i)) == gammas_[i];
  if (!same)
    throw CheckpointError("the checkpoint's post-hoc EMA profiles differ from posthoc.sigma_rels (" + configured +
                          "): resume with the sigma_rels the run started with");
  for (std::size_t i = 0; i < profiles_.size(); ++i) {
    const std::string prefix = tensor_prefix(i);
    NamedTensors tensors;
    for (const auto& key : in.tensor_keys())
      if (key.rfind(prefix, 0) == 0) tensors.emplace_back(key.substr(prefix.size()), in.tensor(key));
    try {
      if (profiles_[i].saved_as_rows(in, prefix))
        profiles_[i].load_rows(in, prefix);
      else
        profiles_[i].load_state_dict(tensors, /*strict=*/true);
    } catch (const Error& e) {
      throw CheckpointError("the post-hoc EMA profile " + names_[i] + " in the checkpoint does not match the model: " +
                            e.what());
    }
  }
  time_ = in.get_int(kTimeKey);
  last_snapshot_ = in.get_int(kLastSnapshotKey);
}

}  // namespace baton::posthoc
