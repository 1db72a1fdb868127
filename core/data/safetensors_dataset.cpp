// The `safetensors` dataset: rows of named tensors of a safetensors file, read when a batch asks for them.
//
// How rows reach a batch: by pread into the batch's own tensor, not through a memory mapping of the file.
// - Address space: a mapping of the whole file needs as much virtual memory as the file is large, which a
//   `ulimit -v` below the file size refuses; pread needs only the batch being filled.
// - Resident memory: the pages pread brings in belong to the kernel's page cache, which it reclaims under pressure
//   and which is not this process's memory; mapped pages count as the process's until they are unmapped, so
//   windows mapped per batch would need an munmap per batch from every loader thread (and a TLB shootdown each).
// - Copies: a batch's rows are scattered over the file (the sampler permutes them), so mapped or not they are
//   copied once into the batch tensor; pread does that copy in the kernel, with no extra one in between.
// - Threads: pread takes its offset as an argument, so the loader's threads share one descriptor with no lock.
// Runs of consecutive rows (an evaluation's batches; the sorted rows of a split) are read with one call each.
#include "baton/text.h"
#include "data/safetensors_dataset.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "baton/safetensors.h"
#include "checkpoint/safetensors_file.h"
#include "data/row_split.h"

namespace baton {
namespace {

constexpr std::size_t kListedTensors = 20;         // a missing-tensor error names at most these many of the file's
constexpr std::int64_t kScanBytes = 4 << 20;       // class targets are checked this many bytes at a time
constexpr std::uint64_t kSplitSeedSalt = 0x5afe7e45u;

std::string describe(const SafetensorsEntry& entry) {
  return entry.name + " (" + safetensors_dtype_name(entry.dtype) + " " + format_shape(entry.shape) + ")";
}

// One tensor of a file, read as rows along dim 0.
struct RowSource {
  std::shared_ptr<const SafetensorsFile> file;
  std::string tensor;  // its name in the file
  at::ScalarType dtype = at::kFloat;
  std::int64_t rows = 0;
  std::vector<std::int64_t> row_shape;  // one row's shape as a batch holds it
  std::uint64_t first_row_offset = 0;   // in the file
  std::uint64_t row_bytes = 0;

  // Rows first .. first + count - 1 into `into`.
  void read_range(std::int64_t first, std::int64_t count, char* into) const {
    file->read_at(first_row_offset + static_cast<std::uint64_t>(first) * row_bytes, into,
                  static_cast<std::uint64_t>(count) * row_bytes);
  }

  // The rows `rows[0 .. count)` (each in [0, this->rows)) as a [count, row_shape...] tensor of the file's dtype.
  at::Tensor read(const std::int64_t* rows_wanted, std::int64_t count) const {
    at::Tensor out = empty_rows(count);
    char* into = static_cast<char*>(out.data_ptr());
    for (std::int64_t i = 0; i < count;) {
      std::int64_t end = i + 1;
      while (end < count && rows_wanted[end] == rows_wanted[end - 1] + 1) ++end;
      read_range(rows_wanted[i], end - i, into + static_cast<std::uint64_t>(i) * row_bytes);
      i = end;
    }
    return out;
  }

  at::Tensor read_range(std::int64_t first, std::int64_t count) const {
    at::Tensor out = empty_rows(count);
    read_range(first, count, static_cast<char*>(out.data_ptr()));
    return out;
  }

  // A [count, row_shape...] tensor of the file's dtype, to read rows into.
  at::Tensor empty_rows(std::int64_t count) const {
    std::vector<std::int64_t> shape{count};
    shape.insert(shape.end(), row_shape.begin(), row_shape.end());
    return at::empty(shape, at::TensorOptions().dtype(dtype));
  }
};

// One batch field: the tensor it reads and the dtype the batch holds it in (kUndefined: the file's own).
struct FieldSource {
  std::string name;
  RowSource rows;
  at::ScalarType as = at::ScalarType::Undefined;
  std::int64_t num_classes = 0;
};

class SafetensorsDataset final : public Dataset {
 public:
  // `rows`: the file rows this split holds (int64, sorted), or undefined for all of them in order.
  SafetensorsDataset(std::vector<FieldSource> fields, at::Tensor rows, std::string dataset_name)
      : fields_(std::move(fields)), rows_(std::move(rows)) {
    name = std::move(dataset_name);
  }

  std::int64_t size() const override { return rows_.defined() ? rows_.size(0) : fields_.front().rows.rows; }

  Batch get(const at::Tensor& indices) const override {
    const at::Tensor wanted = indices.to(at::kLong).contiguous().reshape({-1});
    const std::int64_t count = wanted.size(0);
    const std::int64_t* index = wanted.data_ptr<std::int64_t>();
    const std::int64_t* table = rows_.defined() ? rows_.data_ptr<std::int64_t>() : nullptr;
    const std::int64_t samples = size();
    std::vector<std::int64_t> rows(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
      // Checked here, not trusted: a wrong index would otherwise read another tensor's bytes without complaint.
      if (index[i] < 0 || index[i] >= samples)
        throw Error("dataset '" + name + "': sample " + std::to_string(index[i]) + " is outside [0, " +
                    std::to_string(samples) + ")");
      rows[static_cast<std::size_t>(i)] = table ? table[index[i]] : index[i];
    }
    Batch batch;
    for (const auto& field : fields_) {
      at::Tensor t = field.rows.read(rows.data(), count);
      // to() returns the tensor itself when it already has the dtype (F32 inputs): no second copy of the batch.
      batch.set(field.name, field.as == at::ScalarType::Undefined ? t : t.to(field.as));
    }
    return batch;
  }

  DataSpec spec() const override {
    DataSpec spec;
    for (const auto& field : fields_) {
      const at::ScalarType dtype = field.as == at::ScalarType::Undefined ? field.rows.dtype : field.as;
      spec.fields.push_back(FieldSpec{field.name, field.rows.row_shape, dtype, field.num_classes});
      if (field.name == "inputs") spec.input_shape = field.rows.row_shape;
      if (field.name == "targets") {
        spec.target_shape = field.rows.row_shape;
        spec.num_classes = field.num_classes;
      }
    }
    return spec;
  }

 private:
  std::vector<FieldSource> fields_;
  at::Tensor rows_;
};

// ---- the factory ----

struct OpenedFile {
  RowSource inputs;   // rows == 0 when the data has no inputs field (inputs = "")
  RowSource targets;  // rows == 0 when the data has no targets (targets = "")
  std::vector<std::pair<std::string, RowSource>> more;  // `fields`, under their own names
  std::int64_t rows = 0;
  bool has_inputs() const { return !inputs.tensor.empty(); }
  bool has_targets() const { return !targets.tensor.empty(); }
};

// Errors about the training file are reported at the key that names the tensor (a misspelt name is the likely
// cause); errors about the evaluation file at eval_path.
struct Keys {
  std::string file;     // "path" or "eval_path"
  std::string inputs;   // "inputs" or "eval_path"
  std::string targets;  // "targets" or "eval_path"
};

RowSource row_source(const PluginConfig& config, const std::string& key,
                     const std::shared_ptr<const SafetensorsFile>& file, const std::string& tensor, bool inputs) {
  const SafetensorsEntry* entry = file->find(tensor);
  if (!entry) {
    std::string present;
    std::size_t listed = 0;
    for (const auto& e : file->entries()) {
      if (listed++ == kListedTensors) {
        present += ", and " + std::to_string(file->entries().size() - kListedTensors) + " more";
        break;
      }
      present += (present.empty() ? "" : ", ") + describe(e);
    }
    config.fail(key, file->path() + ": no tensor '" + tensor + "'; the file holds " +
                         (present.empty() ? std::string("no tensors") : present) +
                         " (name yours with the keys inputs, targets and fields)");
  }
  const std::string what = file->path() + ": tensor " + describe(*entry);
  if (entry->shape.empty()) config.fail(key, what + " is a scalar; the samples are its rows, along dim 0");
  if (entry->shape[0] == 0) config.fail(key, what + " holds no rows");
  RowSource source;
  source.file = file;
  source.tensor = tensor;
  source.dtype = entry->dtype;
  source.rows = entry->shape[0];
  source.row_shape.assign(entry->shape.begin() + 1, entry->shape.end());
  // A 1-D inputs tensor holds one value per sample: a model sees one feature. (1-D targets stay scalars: a class
  // index or one value, as DataSpec has them.)
  if (inputs && source.row_shape.empty()) source.row_shape = {1};
  source.row_bytes = (entry->end - entry->begin) / static_cast<std::uint64_t>(source.rows);
  if (source.row_bytes == 0) config.fail(key, what + " has no values in a row");
  source.first_row_offset = file->data_start() + entry->begin;
  return source;
}

OpenedFile open_file(const PluginConfig& config, const Keys& keys, const std::string& inputs_name,
                     const std::string& targets_name, const std::vector<std::string>& fields) {
  const std::string path = config.get_text(keys.file);
  std::shared_ptr<const SafetensorsFile> file;
  try {
    file = std::make_shared<const SafetensorsFile>(path);
  } catch (const SafetensorsError& e) {
    config.fail(keys.file, e.what());
  }
  OpenedFile opened;
  // Every tensor read holds a row per sample: the first one read sets the count the others must match.
  std::string first;
  const auto check_rows = [&](const RowSource& source, const std::string& key) {
    if (first.empty()) {
      first = source.tensor;
      opened.rows = source.rows;
    } else if (source.rows != opened.rows) {
      config.fail(key, path + ": tensor '" + source.tensor + "' holds " + std::to_string(source.rows) +
                           " rows, but '" + first + "' holds " + std::to_string(opened.rows) +
                           " (a sample is row i of each)");
    }
  };
  if (!inputs_name.empty()) {
    opened.inputs = row_source(config, keys.inputs, file, inputs_name, /*inputs=*/true);
    check_rows(opened.inputs, keys.inputs);
  }
  if (!targets_name.empty()) {
    opened.targets = row_source(config, keys.targets, file, targets_name, /*inputs=*/false);
    check_rows(opened.targets, keys.targets);
  }
  const std::string fields_key = keys.file == "path" ? "fields" : keys.file;
  for (const auto& name : fields) {
    opened.more.emplace_back(name, row_source(config, fields_key, file, name, /*inputs=*/false));
    check_rows(opened.more.back().second, fields_key);
  }
  return opened;
}

// The smallest and largest class in an integer targets tensor, read a few MiB at a time (never the whole tensor:
// it is small beside the inputs, but not bounded).
struct ClassRange {
  std::int64_t min = 0, max = 0;
  std::int64_t min_row = 0, max_row = 0;
};

ClassRange scan_classes(const RowSource& targets) {
  ClassRange range;
  bool first = true;
  const std::int64_t chunk = std::max<std::int64_t>(1, kScanBytes / static_cast<std::int64_t>(targets.row_bytes));
  for (std::int64_t from = 0; from < targets.rows; from += chunk) {
    const std::int64_t count = std::min(chunk, targets.rows - from);
    const at::Tensor values = targets.read_range(from, count).to(at::kLong);
    const std::int64_t* v = values.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < count; ++i) {
      if (first || v[i] < range.min) range.min = v[i], range.min_row = from + i;
      if (first || v[i] > range.max) range.max = v[i], range.max_row = from + i;
      first = false;
    }
  }
  return range;
}

// Checks an integer targets tensor as class indices and returns its range.
ClassRange check_classes(const PluginConfig& config, const std::string& key, const RowSource& targets) {
  const std::string what = targets.file->path() + ": tensor '" + targets.tensor + "'";
  if (!targets.row_shape.empty())
    config.fail(key, what + " has shape [" + std::to_string(targets.rows) + ", ...]; class targets are one index " +
                         "per row, shape [rows] (for values to regress, set task = \"regression\")");
  const ClassRange range = scan_classes(targets);
  if (range.min < 0)
    config.fail(key, what + " holds class " + std::to_string(range.min) + " at row " + std::to_string(range.min_row) +
                         "; classes are 0, 1, 2, ...");
  return range;
}

}  // namespace

DatasetSplits make_safetensors_dataset(const PluginConfig& config, const DatasetContext& context) {
  // inputs / targets name the tensors that become the fields "inputs" and "targets" ("" for none); `fields` names
  // more tensors, each a field of its own name in its file's dtype. `float_fields` are converted to float32 (the
  // inputs, by default: features or images).
  const std::string inputs_name = config.get_or("inputs", "inputs");
  const std::string targets_name = config.get_or("targets", "targets");
  const std::vector<std::string> fields = config.get_or("fields", std::vector<std::string>{});
  std::vector<std::string> float_fields =
      config.get_or("float_fields", inputs_name.empty() ? std::vector<std::string>{} : std::vector<std::string>{"inputs"});
  {
    std::vector<std::string> all;
    if (!inputs_name.empty()) all.push_back("inputs");
    if (!targets_name.empty()) all.push_back("targets");
    for (const auto& f : fields) {
      if (f.empty() || f == "inputs" || f == "targets" || std::find(all.begin(), all.end(), f) != all.end())
        config.fail("fields", "field names must be unique, not empty and not \"inputs\" or \"targets\" (name "
                              "those with the keys inputs and targets), got \"" + f + "\"");
      all.push_back(f);
    }
    if (all.empty()) config.fail("inputs", "the dataset would have no fields: name tensors with inputs, targets or fields");
    for (const auto& f : float_fields)
      if (std::find(all.begin(), all.end(), f) == all.end())
        config.fail("float_fields", "names '" + f + "', which is not a field of this dataset (its fields: " +
                                        [&] {
                                          std::string names;
                                          for (const auto& a : all) names += (names.empty() ? "" : ", ") + a;
                                          return names;
                                        }() + ")");
  }
  const OpenedFile train = open_file(config, Keys{"path", "inputs", "targets"}, inputs_name, targets_name, fields);
  const bool separate_eval = config.has("eval_path");
  OpenedFile eval;
  if (separate_eval) {
    if (config.has("eval_fraction"))
      config.fail("eval_fraction", "cannot be used with eval_path (the evaluation rows come from that file)");
    eval = open_file(config, Keys{"eval_path", "eval_path", "eval_path"}, inputs_name, targets_name, fields);
    const auto differ = [&](const RowSource& a, const RowSource& b, const char* which) {
      if (a.row_shape != b.row_shape)
        config.fail("eval_path", b.file->path() + ": tensor '" + b.tensor + "' has rows of shape " +
                                     format_shape(b.row_shape) + ", but the training file's " + which + " rows have " +
                                     format_shape(a.row_shape));
    };
    if (train.has_inputs()) differ(train.inputs, eval.inputs, "input");
    if (train.has_targets()) differ(train.targets, eval.targets, "target");
    for (std::size_t i = 0; i < train.more.size(); ++i)
      differ(train.more[i].second, eval.more[i].second, ("'" + train.more[i].first + "'").c_str());
  }

  // Class indices or values: by the targets' dtype unless task says.
  const bool integer_targets = train.has_targets() && at::isIntegralType(train.targets.dtype, /*includeBool=*/true);
  if (!train.has_targets() && config.has("task"))
    config.fail("task", "applies to targets, but this dataset has none (targets = \"\")");
  const std::string task =
      config.get_choice_or("task", integer_targets ? "classification" : "regression", {"classification", "regression"});
  const bool classification = task == "classification" && train.has_targets();
  for (const OpenedFile* file : {&train, separate_eval ? &eval : static_cast<const OpenedFile*>(nullptr)}) {
    if (!file || !classification) continue;
    if (!at::isIntegralType(file->targets.dtype, /*includeBool=*/true))
      config.fail(file == &eval ? "eval_path" : config.has("task") ? "task" : "targets",
                  file->targets.file->path() + ": tensor '" + targets_name + "' holds " +
                      safetensors_dtype_name(file->targets.dtype) +
                      " values; class targets are stored as integers (U8, I16, I32, I64, ...)");
  }
  std::int64_t num_classes = 0;
  if (classification) {
    const ClassRange train_range = check_classes(config, "targets", train.targets);
    std::int64_t largest = train_range.max;
    const RowSource* largest_in = &train.targets;
    std::int64_t largest_row = train_range.max_row;
    if (separate_eval) {
      const ClassRange eval_range = check_classes(config, "eval_path", eval.targets);
      if (eval_range.max > largest) {
        largest = eval_range.max;
        largest_in = &eval.targets;
        largest_row = eval_range.max_row;
      }
    }
    if (config.has("num_classes")) {
      num_classes = config.get_int("num_classes", Range::at_least(1));
      if (largest >= num_classes)
        config.fail("num_classes", "is " + std::to_string(num_classes) + ", but " + largest_in->file->path() +
                                       ": tensor '" + targets_name + "' holds class " + std::to_string(largest) +
                                       " at row " + std::to_string(largest_row));
    } else {
      num_classes = largest + 1;  // the classes are 0 .. the largest that occurs
    }
  } else if (config.has("num_classes")) {
    config.fail("num_classes", "applies to class targets, but the targets are values to regress (task = \"regression\")");
  }

  // The fields of a file's batches: inputs, targets, then `fields`, each in the dtype the batch holds.
  const auto field_sources = [&](const OpenedFile& file) {
    std::vector<FieldSource> out;
    const auto add = [&](const std::string& name, const RowSource& rows, at::ScalarType natural,
                         std::int64_t classes) {
      const bool to_float = std::find(float_fields.begin(), float_fields.end(), name) != float_fields.end();
      out.push_back(FieldSource{name, rows, to_float ? at::kFloat : natural, classes});
    };
    if (file.has_inputs()) add("inputs", file.inputs, at::ScalarType::Undefined, 0);
    if (file.has_targets()) add("targets", file.targets, num_classes > 0 ? at::kLong : at::kFloat, num_classes);
    for (const auto& [name, rows] : file.more) add(name, rows, at::ScalarType::Undefined, 0);
    return out;
  };

  DatasetSplits splits;
  if (separate_eval) {
    if (context.need_train)
      splits.train = std::make_shared<SafetensorsDataset>(field_sources(train), at::Tensor(), "safetensors/train");
    splits.eval = std::make_shared<SafetensorsDataset>(field_sources(eval), at::Tensor(), "safetensors/eval");
    return splits;
  }

  // A seeded split of the one file, drawn as the csv dataset draws its own. It keeps one 8-byte row number per row
  // in memory (eval_path keeps none); eval_fraction = 0 evaluates on the training rows.
  const RowSplit split = draw_row_split(config, train.rows, context.seed ^ kSplitSeedSalt);
  if (!split.held_out()) {
    const auto all = std::make_shared<SafetensorsDataset>(field_sources(train), at::Tensor(), "safetensors/train");
    splits.train = context.need_train ? all : nullptr;
    splits.eval = all;
    return splits;
  }
  if (context.need_train)
    splits.train = std::make_shared<SafetensorsDataset>(field_sources(train), split.train, "safetensors/train");
  splits.eval = std::make_shared<SafetensorsDataset>(field_sources(train), split.eval,
                                                     "safetensors/eval");
  return splits;
}

}  // namespace baton
