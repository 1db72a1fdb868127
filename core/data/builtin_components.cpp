// The built-in datasets as components: [data] name = "fashion-mnist" | "mnist" | "idx" | "synthetic" | "csv" |
// "safetensors".
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "baton/text.h"
#include "baton/builtin_datasets.h"
#include "baton/components.h"
#include "components/builtins.h"
#include "data/csv.h"
#include "data/row_split.h"
#include "data/safetensors_dataset.h"

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
    // mnist and fashion-mnist are normalised with their own statistics; a folder of another IDX dataset says
    // which it resembles, or "none".
    const std::string statistics =
        name == "idx" ? config.get_choice_or("normalize", "mnist", {"mnist", "fashion-mnist", "none"}) : name;
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
        splits.train =
            std::make_shared<TensorDataset>(load_idx_dataset(path, /*train=*/true, train_subset, name, statistics));
      splits.eval =
          std::make_shared<TensorDataset>(load_idx_dataset(path, /*train=*/false, eval_subset, name, statistics));
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

// ---- csv ----

csv::Format read_format(const PluginConfig& config) {
  csv::Format format;
  const std::string delimiter = config.get_text_or("delimiter", ",");
  if (delimiter == "whitespace")
    format.delimiter = '\0';
  else if (delimiter.size() == 1)
    format.delimiter = delimiter[0];
  else
    config.fail("delimiter", "expected one character (\",\", \";\", \"\\t\") or \"whitespace\", got \"" + delimiter + "\"");
  const std::string header = config.get_choice_or("header", "names", {"names", "none", "skip"});
  format.header = header == "names" ? csv::Header::names : header == "none" ? csv::Header::none : csv::Header::skip;
  return format;
}

// `target` as a column name or an index; TOML may give either a string or an integer.
std::string read_target(const PluginConfig& config) {
  if (!config.has("target")) return "-1";
  try {
    return config.get<std::string>("target");
  } catch (const ConfigError&) {
    return std::to_string(config.get<std::int64_t>("target"));
  }
}

csv::Table read_csv(const PluginConfig& config, const std::string& key, const csv::Format& format) {
  try {
    return csv::read_table(config.get_text(key), format);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    config.fail(key, e.what());
  }
}

// A table split into input columns and one target column, as tensors.
struct Columns {
  at::Tensor inputs;   // float32 [N, F]
  at::Tensor targets;  // float64 [N], converted by the task below
  std::vector<std::string> input_names;
};

Columns columns_of(const csv::Table& table, const csv::Table* target_table, std::size_t target,
                   const PluginConfig& config) {
  const csv::Table& targets_from = target_table ? *target_table : table;
  if (target_table && target_table->rows != table.rows)
    config.fail("target_path", "holds " + std::to_string(target_table->rows) + " rows, but path holds " +
                                   std::to_string(table.rows));
  Columns out;
  for (std::size_t c = 0; c < table.names.size(); ++c)
    if (target_table || c != target) out.input_names.push_back(table.names[c]);
  if (out.input_names.empty()) config.fail("path", "has no input columns besides the target");
  const auto rows = table.rows;
  const auto features = static_cast<std::int64_t>(out.input_names.size());
  out.inputs = at::empty({rows, features}, at::kFloat);
  out.targets = at::empty({rows}, at::kDouble);
  float* in = out.inputs.data_ptr<float>();
  double* t = out.targets.data_ptr<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < table.names.size(); ++c)
      if (target_table || c != target) *in++ = static_cast<float>(table.at(r, c));
    t[r] = targets_from.at(r, target);
  }
  return out;
}

TensorDataset to_dataset(const Columns& columns, const at::Tensor& rows, bool classification,
                         std::int64_t num_classes, const std::string& name) {
  TensorDataset data;
  data.name = name;
  data.inputs = columns.inputs.index_select(0, rows).contiguous();
  const at::Tensor targets = columns.targets.index_select(0, rows);
  data.targets = classification ? targets.to(at::kLong) : targets.to(at::kFloat);
  data.num_classes = classification ? num_classes : 0;
  return data;
}

DatasetSplits make_csv(const PluginConfig& config, const DatasetContext& context) {
  const csv::Format format = read_format(config);
  const bool classification = config.get_choice("task", {"classification", "regression"}) == "classification";
  const std::string target_name = read_target(config);
  const csv::Table table = read_csv(config, "path", format);
  csv::Table target_table;
  const bool separate_targets = config.has("target_path");
  if (separate_targets) target_table = read_csv(config, "target_path", format);
  std::size_t target = 0;
  try {
    target = csv::find_column(separate_targets ? target_table : table, target_name,
                              config.get_text(separate_targets ? "target_path" : "path"), format.delimiter);
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& e) {
    config.fail("target", e.what());
  }
  Columns all = columns_of(table, separate_targets ? &target_table : nullptr, target, config);

  // Class targets: whole numbers from 0; the classes are 0 .. the largest.
  std::int64_t num_classes = 0;
  if (classification) {
    const double* t = all.targets.data_ptr<double>();
    for (std::int64_t r = 0; r < table.rows; ++r) {
      if (t[r] < 0 || t[r] != std::floor(t[r]))
        config.fail("task", "classification needs class numbers 0, 1, 2, ... in the target column, but row " +
                                std::to_string(r + 1) + " holds " + format_number(t[r]) +
                                " (for values, set task = \"regression\")");
      num_classes = std::max(num_classes, static_cast<std::int64_t>(t[r]) + 1);
    }
  }

  // A seeded split (the files hold no split of their own); eval_fraction = 0 evaluates on the training rows
  // themselves (the fit, not generalisation).
  const RowSplit split = draw_row_split(config, table.rows, context.seed ^ 0xc5f0u);
  const at::Tensor train_rows = split.held_out() ? split.train : at::arange(table.rows, at::kLong);
  const at::Tensor eval_rows = split.held_out() ? split.eval : train_rows;

  // Inputs standardised with the training rows' mean and standard deviation (a constant column is only centred),
  // so that one learning rate suits columns of any scale.
  if (config.get_or<bool>("standardize", true)) {
    const at::Tensor train_inputs = all.inputs.index_select(0, train_rows);
    const at::Tensor mean = train_inputs.mean(0);
    at::Tensor std = train_inputs.std(0, /*unbiased=*/false);
    std = at::where(std > 0, std, at::ones_like(std));
    all.inputs = (all.inputs - mean) / std;
  }
  DatasetSplits splits;
  if (context.need_train)
    splits.train = std::make_shared<TensorDataset>(to_dataset(all, train_rows, classification, num_classes, "csv/train"));
  splits.eval = std::make_shared<TensorDataset>(
      to_dataset(all, eval_rows, classification, num_classes, split.held_out() ? "csv/eval" : "csv/train"));
  return splits;
}

}  // namespace

void register_builtin_datasets(Components& components) {
  components.datasets.add("csv",
                          "a numeric table from a CSV file (gzip too): path, task (classification | regression), "
                          "target (name or index, default the last), header, delimiter, target_path, eval_fraction, "
                          "standardize",
                          &make_csv);
  components.datasets.add("fashion-mnist",
                          "Fashion-MNIST from IDX files (path default /usr/share/datasets/fashion-mnist); "
                          "train_subset, eval_subset",
                          idx_factory("fashion-mnist", "/usr/share/datasets/fashion-mnist"));
  components.datasets.add("mnist",
                          "MNIST from IDX files (path default /usr/share/datasets/mnist); train_subset, eval_subset",
                          idx_factory("mnist", "/usr/share/datasets/mnist"));
  components.datasets.add("idx",
                          "any IDX image/label folder (path required); train_subset, eval_subset, normalize "
                          "(mnist | fashion-mnist | none)",
                          idx_factory("idx", ""));
  components.datasets.add("safetensors",
                          "named tensors of a safetensors file, read a batch's rows at a time (files larger than "
                          "memory): path, inputs, targets, task, num_classes, eval_path, eval_fraction",
                          &make_safetensors_dataset);
  components.datasets.add("synthetic", "a seeded learnable 10-class set of 1x28x28 images; train_size, eval_size",
                          &make_synthetic);
}

}  // namespace baton
