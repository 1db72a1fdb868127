// The built-in datasets as components: [data] name = "fashion-mnist" | "mnist" | "idx" | "synthetic".
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "baton/builtin_datasets.h"
#include "baton/components.h"
#include "components/builtins.h"

namespace baton {
namespace {

const Range kNonNegative = Range::at_least(0);

std::int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
}

// IDX files in a folder (MNIST's format); a relative path is relative to the working directory, as run.dir is. A missing folder or a damaged file is an error at `path`, before
// anything is loaded; `subset` keys keep the first N samples of a split.
DatasetFactory idx_factory(const std::string& name, const std::string& default_path) {
  return [name, default_path](const PluginConfig& config, const DatasetContext& context) {
    const std::string path = default_path.empty() ? config.get_text("path") : config.get_text_or("path", default_path);
    const std::int64_t train_subset = config.get_int_or("train_subset", 0, kNonNegative);
    const std::int64_t eval_subset = config.get_int_or("eval_subset", 0, kNonNegative);
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec))
      config.fail("path", "no such folder: '" + path + "' (the IDX files go there" +
                              (default_path.empty() ? std::string(")")
                                                    : "; Debian's dataset-" + name + " package installs them in " +
                                                          default_path + ")"));
    DatasetSplits splits;
    try {
      idx_dataset_size(path, /*train=*/true, train_subset);  // the headers first: a damaged file fails fast
      idx_dataset_size(path, /*train=*/false, eval_subset);
      if (context.need_train)
        splits.train = std::make_shared<TensorDataset>(load_idx_dataset(path, /*train=*/true, train_subset, name));
      splits.eval = std::make_shared<TensorDataset>(load_idx_dataset(path, /*train=*/false, eval_subset, name));
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      config.fail("path", e.what());
    }
    return splits;
  };
}

std::int64_t synthetic_size(const PluginConfig& config, const char* key, std::int64_t fallback) {
  const std::int64_t size = config.get_int_or(key, fallback, Range::at_least(1));
  // 1x28x28 float32 inputs: a size that cannot fit in memory fails here rather than in an allocation.
  constexpr std::int64_t kSampleBytes = 28 * 28 * 4;
  const std::int64_t memory = physical_memory_bytes();
  if (memory > 0 && size > memory / kSampleBytes)
    config.fail(key, "expected at most " + std::to_string(memory / kSampleBytes) +
                         " (the samples that fit in this machine's " + std::to_string(memory >> 20) +
                         " MiB of memory), got " + std::to_string(size));
  return size;
}

DatasetSplits make_synthetic(const PluginConfig& config, const DatasetContext& context) {
  const std::int64_t train_size = synthetic_size(config, "train_size", 2048);
  const std::int64_t eval_size = synthetic_size(config, "eval_size", 512);
  DatasetSplits splits;
  if (context.need_train)
    splits.train = std::make_shared<TensorDataset>(make_synthetic_dataset(train_size, context.seed, "synthetic/train"));
  splits.eval = std::make_shared<TensorDataset>(make_synthetic_dataset(eval_size, context.seed + 1, "synthetic/eval"));
  return splits;
}

}  // namespace

void register_builtin_datasets(Components& components) {
  components.datasets.add("fashion-mnist",
                          "Fashion-MNIST from IDX files (path default /usr/share/datasets/fashion-mnist); "
                          "train_subset, eval_subset",
                          idx_factory("fashion-mnist", "/usr/share/datasets/fashion-mnist"));
  components.datasets.add("mnist",
                          "MNIST from IDX files (path default /usr/share/datasets/mnist); train_subset, eval_subset",
                          idx_factory("mnist", "/usr/share/datasets/mnist"));
  components.datasets.add("idx", "any IDX image/label folder (path required); train_subset, eval_subset",
                          idx_factory("idx", ""));
  components.datasets.add("synthetic", "a seeded learnable 10-class set of 1x28x28 images; train_size, eval_size",
                          &make_synthetic);
}

}  // namespace baton
