#include "trainer/weights_init.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <system_error>

#include <c10/core/GradMode.h>
#include <torch/nn/module.h>

#include "baton/model_tensors.h"
#include "baton/safetensors.h"
#include "baton/text.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/row_shards.h"
#include "sdk/nearest.h"
#include "sharding/sharded_state.h"

namespace baton {
namespace fs = std::filesystem;
namespace {

constexpr const char* kEmaFile = "ema.safetensors";
constexpr const char* kModelFile = "model.safetensors";

struct Source {
  std::string description;
  NamedTensors tensors;
};

std::string format_shape(const at::Tensor& t) {
  std::string text = "[";
  for (std::int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.size(i));
  return text + "]";
}

// Every tensor of a set of files of row blocks (row_shards.h), whole.
NamedTensors whole_tensors(const std::vector<RowShardSource>& files, const std::string& what) {
  NamedTensors out;
  const RowShardReader reader(files, what);
  for (const auto& [name, info] : reader.tensors()) out.emplace_back(name, reader.read(name));
  return out;
}

// A checkpoint's raw weights: its model section, and under sharding the tensors of its model/ folder (or, written
// before the folders, the rows of its model shard files put together at the module's shapes).
NamedTensors checkpoint_weights(const CheckpointData& data, const torch::nn::Module& module, const std::string& path) {
  NamedTensors out;
  if (const StateDict* saved = data.section("model"))
    for (const auto& key : saved->tensor_keys()) out.emplace_back(key, saved->tensor(key));
  for (auto& item : whole_tensors(folder_sources(data, path, "model"), "checkpoint " + path))
    out.push_back(std::move(item));
  NamedTensors full;
  for (const auto& [name, t] : named_model_tensors(module)) full.emplace_back(name, at::empty_like(t, at::kCPU));
  sharding::RowsSeen rows;
  for (const auto& [file, content] : data.files)
    if (sharding::is_shard_file("model", file))
      sharding::copy_rows(content, full, rows, "checkpoint " + path + ": " + file);
  for (auto& [name, t] : full)
    if (rows.count(name)) out.emplace_back(name, t);
  return out;
}

Source read_source(const torch::nn::Module& module, const WeightsInit& init, const std::string& key) {
  const std::string& path = init.path;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw Error(key + ": cannot read \"" + path + "\": " + (ec ? ec.message() : "No such file or directory"));
  const bool folder = fs::is_directory(status);
  if (!folder) {
    if (init.weights != "auto")
      throw Error(key + "_weights = \"" + init.weights + "\" chooses among a checkpoint's or run folder's weights, " +
                  "but \"" + path + "\" is a file, loaded as it is (leave init_weights out)");
    return {"\"" + path + "\"", read_safetensors(path).tensors};
  }
  const bool want_ema = init.weights == "ema", want_raw = init.weights == "raw";
  const fs::path dir(path);
  if (fs::exists(dir / "meta.json")) {
    // A checkpoint: read its own tensors and files, never the optimizer shards of its ranks; the model/ folder's
    // files are read by checkpoint_weights.
    const CheckpointData data = load_checkpoint(path, [](const std::string& file) {
      return file.find('/') == std::string::npos && !sharding::is_shard_file("optimizer", file);
    });
    const StateDict* ema = nullptr;
    for (const auto& [file, content] : data.files)
      if (file == kEmaFile) ema = &content;
    // A sharded EMA's checkpoint holds its average as the ranks' rows in ema/ instead of ema.safetensors.
    const std::vector<RowShardSource> ema_rows = folder_sources(data, path, "ema");
    if (!ema && !ema_rows.empty() && !want_raw) {
      const RowShardReader reader(ema_rows, "checkpoint " + path);
      return {"checkpoint \"" + path + "\" (its EMA weights, the ranks' rows in ema/)", model_named_tensors(reader)};
    }
    if (want_ema && !ema)
      throw Error(key + "_weights = \"ema\": checkpoint \"" + path + "\" holds no EMA weights (" + kEmaFile +
                  "; the run had no ema plugin): use init_weights = \"raw\"");
    if (ema && !want_raw) {
      Source s{"checkpoint \"" + path + "\" (its EMA weights, " + kEmaFile + ")", {}};
      for (const auto& k : ema->tensor_keys()) s.tensors.emplace_back(k, ema->tensor(k));
      return s;
    }
    return {"checkpoint \"" + path + "\" (its trained weights)", checkpoint_weights(data, module, path)};
  }
  const bool has_model = fs::exists(dir / kModelFile), has_ema = fs::exists(dir / kEmaFile);
  if (!has_model && !has_ema) {
    // A folder PyTorch's distributed checkpoint wrote in safetensors form: its tensors, put together from the blocks.
    const std::vector<RowShardSource> pieces = safetensors_in(path);
    if (!pieces.empty()) {
      if (init.weights != "auto")
        throw Error(key + "_weights = \"" + init.weights + "\" chooses among a checkpoint's or run folder's weights, " +
                    "but \"" + path + "\" is a folder of safetensors files, loaded as they are (leave init_weights out)");
      return {"\"" + path + "\" (" + std::to_string(pieces.size()) + " safetensors files of a distributed checkpoint)",
              whole_tensors(pieces, "\"" + path + "\"")};
    }
  }
  if (!has_model && !has_ema)
    throw Error(key + ": folder \"" + path + "\" is neither a checkpoint (no meta.json) nor a run folder (no " +
                kModelFile + " or " + kEmaFile + ") nor a distributed checkpoint (no *.safetensors); give a " +
                "checkpoint folder, a run folder, a folder of safetensors files or a safetensors file");
  if (want_ema && !has_ema)
    throw Error(key + "_weights = \"ema\": run folder \"" + path + "\" has no " + kEmaFile +
                " (the run had no ema plugin): use init_weights = \"raw\"");
  if (want_raw && !has_model)
    throw Error(key + "_weights = \"raw\": run folder \"" + path + "\" has no " + kModelFile);
  const std::string file = (dir / (has_ema && !want_raw ? kEmaFile : kModelFile)).string();
  return {"\"" + file + "\" (of run folder \"" + path + "\")", read_safetensors(file).tensors};
}

bool ignored(const WeightsInit& init, const std::string& name) {
  return std::any_of(init.ignore.begin(), init.ignore.end(), [&](const auto& g) { return glob_match(g, name); });
}

// The name the user probably meant: one the same but for a prefix (a Python wrapper's "module." or "_orig_mod."),
// else the closest by edits.
std::string meant(const std::string& name, const std::vector<std::string>& candidates) {
  for (const auto& c : candidates) {
    const auto ends_with = [](const std::string& a, const std::string& b) {
      return a.size() > b.size() && a.compare(a.size() - b.size(), b.size(), b) == 0 && a[a.size() - b.size() - 1] == '.';
    };
    if (ends_with(c, name) || ends_with(name, c)) return c;
  }
  const auto close = detail::nearest_names(name, candidates);
  return close.empty() ? "" : close.front();
}

constexpr std::size_t kShown = 8;

// The first kShown entries joined by `separator`, then "and N more".
std::string cut(const std::vector<std::string>& entries, const char* separator) {
  std::string text;
  for (std::size_t i = 0; i < entries.size() && i < kShown; ++i) text += (i ? separator : "") + entries[i];
  if (entries.size() > kShown) text += " and " + std::to_string(entries.size() - kShown) + " more";
  return text;
}

// The names, each with the one probably meant.
std::string listed(const std::vector<std::string>& names, const std::vector<std::string>& candidates) {
  std::vector<std::string> entries;
  for (const auto& name : names) {
    const std::string m = meant(name, candidates);
    entries.push_back(m.empty() ? name : name + " (did you mean " + m + "?)");
  }
  return cut(entries, ", ");
}

}  // namespace

std::string InitReport::summary() const {
  std::string line = "model.init: " + std::to_string(loaded) + " tensors from " + source;
  if (!kept.empty()) line += "; " + std::to_string(kept.size()) + " kept as initialised (" + cut(kept, ", ") + ")";
  if (!unused.empty())
    line += "; " + std::to_string(unused.size()) + " of the source's not used (" + cut(unused, ", ") + ")";
  return line;
}

InitReport init_weights(torch::nn::Module& module, const WeightsInit& init, const std::string& key) {
  if (init.weights != "auto" && init.weights != "ema" && init.weights != "raw")
    throw Error(key + "_weights: expected \"auto\", \"ema\" or \"raw\", got \"" + init.weights + "\"");
  Source source = read_source(module, init, key);
  std::map<std::string, at::Tensor> given;
  std::vector<std::string> source_names;
  for (const auto& [name, t] : source.tensors) {
    given.emplace(name, t);
    source_names.push_back(name);
  }
  InitReport report;
  report.source = source.description;
  const NamedTensors model = named_model_tensors(module);
  std::vector<std::string> model_names, missing, unknown, shapes;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // model tensor, value
  for (const auto& [name, t] : model) {
    model_names.push_back(name);
    if (ignored(init, name)) {
      report.kept.push_back(name);
      continue;
    }
    const auto found = given.find(name);
    if (found == given.end()) {
      missing.push_back(name);
      report.kept.push_back(name);
    } else if (found->second.sizes() != t.sizes()) {
      shapes.push_back(name + " " + format_shape(found->second) + " in the source, " + format_shape(t) + " in the model");
    } else {
      copies.emplace_back(t, found->second);
    }
  }
  for (const auto& name : source_names) {
    const bool known = std::find(model_names.begin(), model_names.end(), name) != model_names.end();
    if (ignored(init, name) || !known) report.unused.push_back(name);
    if (!known && !ignored(init, name)) unknown.push_back(name);
  }
  std::string problems;
  if (!shapes.empty()) problems += "\n  shapes differ: " + cut(shapes, "; ");
  if (init.strict && !missing.empty())
    problems += "\n  model tensors not in the source: " + listed(missing, source_names);
  if (init.strict && !unknown.empty())
    problems += "\n  source tensors the model does not have: " + listed(unknown, model_names);
  if (!problems.empty())
    throw Error(key + ": the model does not match " + source.description + ":" + problems +
                "\n  Leave tensors as the model initialises them with " + key.substr(0, key.rfind('.') + 1) +
                "ignore = [\"classifier.*\"] (globs), or load the names both have with " +
                key.substr(0, key.rfind('.') + 1) + "strict = false");
  c10::NoGradGuard no_grad;
  for (auto& [target, value] : copies) target.copy_(value);
  report.loaded = copies.size();
  return report;
}

}  // namespace baton
