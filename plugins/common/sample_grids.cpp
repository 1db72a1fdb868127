#include "sample_grids.h"

#include <ATen/ops/cat.h>

#include <filesystem>

#include "baton/durable_file.h"
#include "baton/image.h"
#include "baton/logger_destination.h"
#include "baton/text.h"

namespace baton_plugins {

SampleGrids::SampleGrids(const baton::PluginConfig& config, const std::string& default_output,
                         const std::string& count_key, std::string log_prefix)
    : config_(config),
      output_(config.get_text_or("output", default_output)),
      count_(config.get_int_or(count_key, 64, baton::Range::at_least(1))),
      columns_(config.get_int_or("columns", 8, baton::Range::at_least(1))),
      log_prefix_(std::move(log_prefix)) {
  if (config.has("range")) {
    const auto range = config.get<std::vector<double>>("range");
    if (range.size() != 2 || !(range[0] < range[1]))
      config.fail("range", "expected [low, high] with low < high (the values shown black and white), such as [-1, 1]");
    low_ = range[0];
    high_ = range[1];
  }
}

void SampleGrids::init(baton::State&, baton::Logger&) { collected_.clear(); }

void SampleGrids::eval_start(baton::State&, baton::Logger&) {
  collected_.clear();
  seen_output_ = false;
}
void SampleGrids::eval_after_forward(baton::State& state, baton::Logger&) { collect(state); }
void SampleGrids::eval_end(baton::State& state, baton::Logger& logger) {
  // A standalone evaluation (baton eval, each width of baton posthoc --sweep) has no run folder: no grid, rather
  // than one in the current folder that every evaluation overwrites.
  if (state.facts.run_dir().empty()) return;
  std::string name = state.eval_label;
  if (!state.eval_set.empty()) name += "_" + state.eval_set;
  write(state, logger, name, name + "_ba" + std::to_string(state.timestamp().batch) + ".png");
}
void SampleGrids::predict_start(baton::State&, baton::Logger&) {
  collected_.clear();
  seen_output_ = false;
}
void SampleGrids::predict_after_forward(baton::State& state, baton::Logger&) { collect(state); }
void SampleGrids::predict_end(baton::State& state, baton::Logger& logger) { write(state, logger, "", "predict.png"); }

void SampleGrids::collect(const baton::State& state) {
  const at::Tensor* images = state.outputs.find(output_);
  if (images == nullptr) {
    std::string fields;
    for (const auto& [name, t] : state.outputs) fields += (fields.empty() ? "" : ", ") + name;
    config_.fail("output", "the model's outputs have no field '" + output_ + "' (they have: " +
                               (fields.empty() ? std::string("none") : fields) + ")");
  }
  seen_output_ = true;
  std::int64_t have = 0;
  for (const auto& t : collected_) have += t.size(0);
  if (have >= count_) return;
  if (images->dim() != 4 || (images->size(1) != 1 && images->size(1) != 3))
    config_.fail("output", "output '" + output_ + "' is not images [N, 1 or 3, H, W] (its shape: " +
                               baton::format_shape(images->sizes()) + ")");
  collected_.push_back(images->detach().slice(0, 0, count_ - have).to(at::kFloat).cpu());
}

// `tag` names the grid for the run's loggers ("samples/<tag>"); empty: the file only.
void SampleGrids::write(const baton::State& state, baton::Logger& logger, const std::string& tag,
                        const std::string& file) {
  // Rank 0 draws its own share (the grid's first samples); a run that writes nothing gets no pictures.
  if (collected_.empty() || state.facts.rank() != 0) return;
  const std::filesystem::path folder =
      std::filesystem::path(state.facts.run_dir().empty() ? "." : state.facts.run_dir()) / "samples";
  std::filesystem::create_directories(folder);
  const std::string path = (folder / file).string();
  const baton::Image grid = baton::image_grid(at::cat(collected_), columns_, low_, high_, "sample grid '" + path + "'");
  collected_.clear();
  const std::vector<std::uint8_t> png = baton::encode_png(grid, "sample grid '" + path + "'");
  // Durable like a checkpoint: a reader finds the previous grid or the complete new one.
  baton::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
  if (!tag.empty()) baton::log_image(logger, "samples/" + tag, grid);
  logger.info(log_prefix_ + ": wrote " + path);
}

}  // namespace baton_plugins
