// image_grid driven with the outputs of evaluation and prediction batches the test makes; the grid is read back
// with libpng's own reader and its pixels checked against the values worked out by hand.
#include "baton_test.h"

#include <png.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/cat.h>

#include "baton/error.h"
#include "monitor_test_support.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace image_grid_test {

using monitor_test::contains;
using monitor_test::RecordingLogger;

namespace {

namespace fs = std::filesystem;

struct Picture {
  int width = 0, height = 0;
  std::vector<std::uint8_t> grey;
  int at(int row, int column) const { return grey[static_cast<std::size_t>(row * width + column)]; }
};

// The PNG file read by libpng as 8-bit grey.
Picture read_png(const fs::path& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&image, path.c_str()) != 0);
  image.format = PNG_FORMAT_GRAY;
  Picture out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.grey.resize(PNG_IMAGE_SIZE(image));
  REQUIRE(png_image_finish_read(&image, nullptr, out.grey.data(), 0, nullptr) != 0);
  return out;
}

baton::LoadedPlugin grid_plugin(const std::string& toml) {
  return monitor_test::load_plugin(baton::test::plugin_file("image_grid"), "image_grid", toml);
}

// A batch of `n` grey 2x2 images, every pixel of image i equal to values[i].
at::Tensor images(const std::vector<double>& values) {
  std::vector<at::Tensor> each;
  for (double v : values) each.push_back(at::full({1, 1, 2, 2}, v));
  return at::cat(each);
}

void forward(baton::Callback& plugin, baton::State& state, RecordingLogger& logger, const at::Tensor& samples,
             bool predict = false) {
  state.outputs = baton::Outputs{{"samples", samples}};
  if (predict)
    plugin.predict_after_forward(state, logger);
  else
    plugin.eval_after_forward(state, logger);
}

}  // namespace

TEST_SUITE("image_grid") {
  TEST_CASE("an evaluation's first count images as one PNG grid, values mapped from range to black and white") {
    auto dir = baton::test::scratch_dir("image-grid");
    auto plugin = grid_plugin("count = 3\ncolumns = 2\nrange = [-1, 1]\n");
    REQUIRE(plugin.callback != nullptr);
    baton::State state;
    state.facts.set_run_dir(dir.string());
    state.eval_label = "eval";
    state.progress.now.batch = 7;
    RecordingLogger logger(&state);
    plugin.callback->eval_start(state, logger);
    forward(*plugin.callback, state, logger, images({-1.0, 0.5}));  // two images of the batch
    forward(*plugin.callback, state, logger, images({1.0, 0.0}));   // the third from here, the fourth left out
    plugin.callback->eval_end(state, logger);
    const fs::path file = dir / "samples" / "eval_ba7.png";
    REQUIRE(fs::exists(file));
    const Picture grid = read_png(file);
    // 2 columns x 2 rows of 2x2 cells, each with a 2-pixel border: 2 x (2 + 2) + 2 = 10 pixels each way.
    CHECK(grid.width == 10);
    CHECK(grid.height == 10);
    CHECK(grid.at(0, 0) == 32);  // the border
    CHECK(grid.at(2, 2) == 0);   // -1: black
    CHECK(grid.at(3, 3) == 0);
    CHECK(grid.at(2, 6) == 191);  // 0.5: (0.5 + 1) / 2 x 255 = 191.25
    CHECK(grid.at(6, 2) == 255);  // 1: white
    CHECK(grid.at(6, 6) == 32);   // no fourth image: the cell stays dark
    CHECK(grid.at(4, 2) == 32);   // between two rows of cells
    REQUIRE_FALSE(logger.lines.empty());
    CHECK(contains(logger.lines.back(), "image_grid: wrote " + file.string()));

    // An extra evaluation set's pass is named by both, and a prediction writes ./samples/predict.png elsewhere.
    state.eval_set = "holdout";
    state.progress.now.batch = 9;
    plugin.callback->eval_start(state, logger);
    forward(*plugin.callback, state, logger, images({0.0}));
    plugin.callback->eval_end(state, logger);
    CHECK(read_png(dir / "samples" / "eval_holdout_ba9.png").width == 6);  // one cell: 1 x (2 + 2) + 2
  }

  TEST_CASE("without a run folder an evaluation writes nothing; a missing output is an error at its key") {
    auto plugin = grid_plugin("output = \"pixels\"\n");
    baton::State state;
    state.eval_label = "eval";
    RecordingLogger logger(&state);
    plugin.callback->eval_start(state, logger);
    try {
      forward(*plugin.callback, state, logger, images({0.0}));
      FAIL("no error");
    } catch (const baton::ConfigError& e) {
      CHECK(contains(e.what(), "output"));
      CHECK(contains(e.what(), "the model's outputs have no field 'pixels' (they have: samples)"));
    }
    auto plain = grid_plugin("");
    plain.callback->eval_start(state, logger);
    forward(*plain.callback, state, logger, images({0.0}));
    plain.callback->eval_end(state, logger);
    CHECK(logger.lines.empty());  // no run folder: no grid (baton eval)
  }

  TEST_CASE("an output that is not images is refused, naming its shape") {
    auto plugin = grid_plugin("");
    baton::State state;
    RecordingLogger logger(&state);
    plugin.callback->eval_start(state, logger);
    state.outputs = baton::Outputs{{"samples", at::full({4, 10}, 0.0)}};
    try {
      plugin.callback->eval_after_forward(state, logger);
      FAIL("no error");
    } catch (const baton::ConfigError& e) {
      CHECK(contains(e.what(), "is not images [N, 1 or 3, H, W] (its shape: [4, 10])"));
    }
  }

  TEST_CASE("its keys are checked") {
    const std::string file = baton::test::plugin_file("image_grid");
    CHECK(contains(monitor_test::config_error(file, "image_grid", "count = 0"), "count"));
    CHECK(contains(monitor_test::config_error(file, "image_grid", "range = [1, -1]"), "low < high"));
    CHECK(contains(monitor_test::config_error(file, "image_grid", "range = [0]"), "range"));
    CHECK(contains(monitor_test::config_error(file, "image_grid", "grid = 4"), "grid"));
  }
}

}  // namespace image_grid_test
