#pragma once
// The components a run is built from, each kind found by name in its registry: model, dataset, optimizer,
// scheduler, loss, metric, logger. baton registers its built-ins; a plugin library registers more with
// BATON_COMPONENTS, and a config then names them like the built-ins ([model] name = "my_resnet"). Each factory gets the keys of its
// config table (all but `name`) as a PluginConfig: read them with get/get_or (types, choices and ranges are
// checked there, errors name the file, line and key); a key the factory never reads is an error, as for plugins.
//
//   void register_mine(baton::Components& c) {
//     c.models.add("my_resnet", "ResNet-20", [](const baton::PluginConfig& config, const baton::DataSpec& data) {
//       return MyResNet(config.get_or<std::int64_t>("depth", 20), data.output_size());  // a baton::Model
//     });
//   }
//   BATON_COMPONENTS("my_models", "1.0.0", "a ResNet for 32x32 images", register_mine)
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "baton/dataset.h"
#include "baton/export.h"
#include "baton/logger_destination.h"
#include "baton/metric.h"
#include "baton/mix64.h"  // kDefaultSeed
#include "baton/model.h"
#include "baton/plugin.h"
#include "baton/plugin_config.h"
#include "baton/registry.h"
#include "baton/time.h"

namespace torch::optim {
class Optimizer;
}

namespace baton {

/// What a dataset factory knows of the run.
struct BATON_API DatasetContext {
  std::uint64_t seed = kDefaultSeed;  // the run's seed, for datasets that draw (synthetic, random splits)
  bool need_train = true;   // false when only the evaluation split is used (baton eval, predict): skip loading it
};

/// The two splits of a dataset. `eval` may be null (no evaluation).
struct BATON_API DatasetSplits {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> eval;
};

/// A loss of one output against one field, written on the two tensors: the form of most losses.
BATON_API LossFunction tensor_loss(FieldKeys keys,
                                   std::function<at::Tensor(const at::Tensor& outputs, const at::Tensor& targets)> fn);
/// The learning-rate multiplier (of the optimizer's configured lr) at a point of training.
using LrSchedule = std::function<double(const Progress& progress)>;

using ModelFactory = std::function<Model(const PluginConfig& config, const DataSpec& data)>;
using DatasetFactory = std::function<DatasetSplits(const PluginConfig& config, const DatasetContext& context)>;
using OptimizerFactory = std::function<std::shared_ptr<torch::optim::Optimizer>(
    const PluginConfig& config, const std::vector<at::Tensor>& parameters)>;
using SchedulerFactory = std::function<LrSchedule(const PluginConfig& config)>;
using LossFactory = std::function<LossFunction(const PluginConfig& config, const DataSpec& data)>;
using MetricFactory = std::function<std::unique_ptr<Metric>(const PluginConfig& config, const DataSpec& data)>;

struct BATON_API Components {
  Registry<ModelFactory> models{"model"};
  Registry<DatasetFactory> datasets{"dataset"};
  Registry<OptimizerFactory> optimizers{"optimizer"};
  Registry<SchedulerFactory> schedulers{"scheduler"};
  Registry<LossFactory> losses{"loss"};
  Registry<MetricFactory> metrics{"metric"};
  /// Logger destinations ([[loggers]], docs/logging.md). Appended: only baton creates a Components, so a plugin
  /// built before this member reads the others where they were.
  Registry<LoggerFactory> loggers{"logger"};
};

/// The process's registries, with baton's built-ins in them.
BATON_API Components& components();

}  // namespace baton

/// Exports a library that registers components (and is no algorithm or callback): `register_fn`, a function
/// taking baton::Components&, is called once, when the library is loaded through [[plugins]] (or listed by
/// `baton plugins`). What it adds is stamped with the library's file and version.
#define BATON_COMPONENTS(name_, version_, description_, register_fn) \
  BATON_PLUGIN_ENTRY_POINT(name_, version_, description_, BATON_PLUGIN_COMPONENTS, nullptr, &register_fn)
