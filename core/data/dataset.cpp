#include "baton/builtin_datasets.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <vector>

#include "baton/error.h"
#include "data/idx.h"
#include "data/random.h"

namespace baton {
namespace {

constexpr std::int64_t kClasses = 10;
constexpr std::int64_t kSide = 28;
// The synthetic class patterns do not depend on the dataset's seed, so train and eval sets drawn with different
// seeds share them and a model trained on one generalises to the other.
constexpr std::uint64_t kPatternSeed = 0x5eed0fba70aULL;
constexpr double kNoise = 0.5;

struct Normalisation {
  double mean;
  double std;
};

// Statistics of the training split, used for both splits as torchvision's examples do. Chosen by the dataset's
// name or an explicit choice, never by the folder's path: a folder's name says nothing reliable about its data.
Normalisation normalisation_for(const std::string& name, const std::string& statistics) {
  const std::string chosen = statistics.empty() ? (name == "fashion-mnist" ? "fashion-mnist" : "mnist") : statistics;
  if (chosen == "fashion-mnist") return {0.2860, 0.3530};
  if (chosen == "mnist") return {0.1307, 0.3081};
  if (chosen == "none") return {0.0, 1.0};
  throw Error("unknown IDX statistics '" + chosen + "': expected \"mnist\", \"fashion-mnist\" or \"none\"");
}

std::string find_idx_file(const std::string& folder, const std::string& stem) {
  const auto plain = std::filesystem::path(folder) / stem;
  const auto gz = std::filesystem::path(folder) / (stem + ".gz");
  if (std::filesystem::exists(gz)) return gz.string();
  if (std::filesystem::exists(plain)) return plain.string();
  throw Error("dataset folder '" + folder + "': neither " + gz.string() + " nor " + plain.string() + " exists");
}

at::Tensor bytes_to_tensor(const std::vector<std::uint8_t>& bytes, const std::vector<std::int64_t>& shape) {
  at::Tensor t = at::empty(shape, at::kByte);
  std::memcpy(t.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  return t;
}

at::Tensor load_images(const std::string& path, const Normalisation& norm) {
  const IdxArray images = read_idx_file(path);
  if (images.shape.size() != 3)
    throw Error("IDX file '" + path + "': expected 3 dimensions (count, rows, columns), found " +
                std::to_string(images.shape.size()));
  const auto& s = images.shape;
  return bytes_to_tensor(images.data, {s[0], 1, s[1], s[2]})
      .to(at::kFloat)
      .div_(255.0)
      .sub_(norm.mean)
      .div_(norm.std);
}

at::Tensor load_labels(const std::string& path) {
  const IdxArray labels = read_idx_file(path);
  if (labels.shape.size() != 1)
    throw Error("IDX file '" + path + "': expected 1 dimension (count), found " +
                std::to_string(labels.shape.size()));
  for (std::size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= kClasses)
      throw Error("IDX file '" + path + "': label " + std::to_string(labels.data[i]) + " of sample " +
                  std::to_string(i) + " is not below " + std::to_string(kClasses));
  return bytes_to_tensor(labels.data, labels.shape).to(at::kLong);
}

std::vector<float> make_patterns() {
  detail::PortableRandom random(kPatternSeed);
  std::vector<float> patterns(static_cast<std::size_t>(kClasses * kSide * kSide));
  for (auto& v : patterns) v = static_cast<float>(random.normal());
  return patterns;
}

}  // namespace

TensorDataset load_idx_dataset(const std::string& folder, bool train, std::int64_t subset, const std::string& name,
                               const std::string& statistics) {
  const Normalisation norm = normalisation_for(name, statistics);
  const std::string split = train ? "train" : "t10k";
  const std::string images_path = find_idx_file(folder, split + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(folder, split + "-labels-idx1-ubyte");

  TensorDataset data;
  data.name = name + (train ? "/train" : "/test");
  data.inputs = load_images(images_path, norm);
  data.targets = load_labels(labels_path);
  if (data.inputs.size(0) != data.targets.size(0))
    throw Error("dataset folder '" + folder + "': " + images_path + " holds " + std::to_string(data.inputs.size(0)) +
                " images but " + labels_path + " holds " + std::to_string(data.targets.size(0)) + " labels");
  if (subset > 0 && subset < data.size()) {
    data.inputs = data.inputs.narrow(0, 0, subset).contiguous();
    data.targets = data.targets.narrow(0, 0, subset).contiguous();
  }
  data.num_classes = kClasses;
  return data;
}

std::int64_t idx_dataset_size(const std::string& folder, bool train, std::int64_t subset) {
  const std::string split = train ? "train" : "t10k";
  const std::string images_path = find_idx_file(folder, split + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(folder, split + "-labels-idx1-ubyte");
  const std::vector<std::int64_t> images = read_idx_shape(images_path);
  const std::vector<std::int64_t> labels = read_idx_shape(labels_path);
  if (images.empty() || labels.empty() || images.front() != labels.front())
    throw Error("dataset folder '" + folder + "': " + images_path + " and " + labels_path +
                " do not hold the same number of samples");
  return subset > 0 ? std::min(subset, labels.front()) : labels.front();
}

TensorDataset make_synthetic_dataset(std::int64_t size, std::uint64_t seed, const std::string& name) {
  if (size < 1) throw Error("synthetic dataset '" + name + "': size must be positive, got " + std::to_string(size));
  static const std::vector<float> patterns = make_patterns();
  constexpr std::int64_t pixels = kSide * kSide;

  TensorDataset data;
  data.name = name;
  data.num_classes = kClasses;
  data.inputs = at::empty({size, 1, kSide, kSide}, at::kFloat);
  data.targets = at::empty({size}, at::kLong);
  float* inputs = data.inputs.data_ptr<float>();
  std::int64_t* targets = data.targets.data_ptr<std::int64_t>();

  detail::PortableRandom random(seed);
  for (std::int64_t i = 0; i < size; ++i) {
    const auto label = static_cast<std::int64_t>(random.below(kClasses));
    targets[i] = label;
    const float* pattern = patterns.data() + label * pixels;
    float* sample = inputs + i * pixels;
    for (std::int64_t p = 0; p < pixels; ++p) sample[p] = pattern[p] + static_cast<float>(kNoise * random.normal());
  }
  return data;
}

}  // namespace baton
