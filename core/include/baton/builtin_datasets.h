#pragma once
// The built-in datasets, for `baton train` and for programs that embed baton (TensorDataset is in baton/dataset.h):
// Fashion-MNIST and MNIST from IDX files (gzip-compressed or plain), and a seeded synthetic set for tests and demos.
#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

#include "baton/dataset.h"
#include "baton/export.h"

namespace baton {

/// Loads the train or test split of an IDX dataset folder holding train-images-idx3-ubyte[.gz],
/// train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz].
/// Pixels become float32 in [0, 1], then normalised with the training split's mean/std of the dataset
/// `statistics` names: "mnist" (0.1307, 0.3081), "fashion-mnist" (0.2860, 0.3530) or "none" (pixels stay in
/// [0, 1]); "" takes them from `name` ("fashion-mnist" gives Fashion-MNIST's, anything else MNIST's), never from
/// the folder's path. `subset` > 0 keeps the first `subset` samples. The dataset is named "<name>/train" or
/// "<name>/test". Throws baton::Error naming the file on a missing file, a bad magic number, mismatched counts or a
/// truncated file, and for unknown `statistics`.
BATON_API TensorDataset load_idx_dataset(const std::string& folder, bool train, std::int64_t subset = 0,
                                         const std::string& name = "idx", const std::string& statistics = "");

/// The number of samples load_idx_dataset would give (the labels file's count, cut to `subset`), from the file
/// headers alone. Throws baton::Error as load_idx_dataset does for a missing or damaged file.
BATON_API std::int64_t idx_dataset_size(const std::string& folder, bool train, std::int64_t subset = 0);

/// A seeded, learnable 10-class dataset of 1x28x28 images (class-dependent patterns plus noise), identical for the
/// same seed on every machine.
BATON_API TensorDataset make_synthetic_dataset(std::int64_t size, std::uint64_t seed,
                                               const std::string& name = "synthetic");

}  // namespace baton
