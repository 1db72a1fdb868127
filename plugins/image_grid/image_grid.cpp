// image_grid: the images an evaluation or a prediction makes (an image generator's samples, a GAN's G(z), a
// reconstruction) as a PNG grid per evaluation pass in <run_dir>/samples/, logged as "samples/<pass>" images for
// the loggers that keep them (tensorboard). plugins/common/sample_grids.h holds the callback; its keys: output
// ("samples"), count, columns, range.
#include "baton/plugin.h"
#include "sample_grids.h"

namespace {

class ImageGrid final : public baton_plugins::SampleGrids {
 public:
  explicit ImageGrid(const baton::PluginConfig& config) : SampleGrids(config, "samples", "count", "image_grid") {}
};

}  // namespace

BATON_PLUGIN(ImageGrid, "image_grid", "1.0.0",
             "PNG grids of the images an evaluation or prediction makes (a generator's samples), also logged as images")
