#include "baton/run_facts.h"

#include <utility>

#include "baton/error.h"

namespace baton {

struct RunFacts::Data {
  torch::nn::Module* model = nullptr;
  NamedOptimizerPointers optimizers;
  std::string device = "cpu";
  std::string run_dir;
  int rank = 0;
  int world_size = 1;
  std::shared_ptr<Communicator> communicator;
  std::uint64_t seed = 0;
  std::string requested_weights;
  std::vector<std::string> plugins;
  TrainingPasses* passes = nullptr;
  bool sharded = false;
  std::string sharding = "none";
  std::function<std::vector<HeldRows>()> held_rows;
  std::function<Outputs(const Batch&)> probe;
  Batch example;
  std::vector<std::string> metric_names;
  std::map<std::string, bool> higher_is_better;
  std::vector<std::string> families;
  std::vector<std::string> weight_sets;
  std::vector<std::string> eval_passes = {"eval"};
};

TrainingPasses::~TrainingPasses() = default;

RunFacts::RunFacts() : data_(std::make_unique<Data>()) {}
RunFacts::~RunFacts() = default;

torch::nn::Module* RunFacts::model() const { return data_->model; }
torch::optim::Optimizer* RunFacts::optimizer() const {
  return data_->optimizers.empty() ? nullptr : data_->optimizers.front().second;
}
const NamedOptimizerPointers& RunFacts::optimizers() const { return data_->optimizers; }
const std::string& RunFacts::device() const { return data_->device; }
const std::string& RunFacts::run_dir() const { return data_->run_dir; }
int RunFacts::rank() const { return data_->rank; }
int RunFacts::world_size() const { return data_->world_size; }
std::uint64_t RunFacts::seed() const { return data_->seed; }
const std::shared_ptr<Communicator>& RunFacts::communicator() const { return data_->communicator; }
const std::string& RunFacts::requested_weights() const { return data_->requested_weights; }
const std::vector<std::string>& RunFacts::plugins() const { return data_->plugins; }
TrainingPasses* RunFacts::passes() const { return data_->passes; }
bool RunFacts::sharded() const { return data_->sharded; }
const std::string& RunFacts::sharding() const { return data_->sharding; }
std::vector<HeldRows> RunFacts::held_rows() const {
  return data_->held_rows ? data_->held_rows() : std::vector<HeldRows>();
}

bool RunFacts::can_probe() const { return static_cast<bool>(data_->probe); }
Outputs RunFacts::probe_forward(const Batch& batch) const {
  if (!data_->probe) throw Error("probe_forward: no trainer runs this State");
  return data_->probe(batch);
}
const Batch& RunFacts::example_batch() const { return data_->example; }

const std::vector<std::string>& RunFacts::metric_names() const { return data_->metric_names; }

bool RunFacts::logs(const std::string& name) const {
  for (const auto& logged : data_->metric_names)
    if (logged == name) return true;
  for (const auto& prefix : data_->families)
    if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

std::optional<bool> RunFacts::higher_is_better(const std::string& metric) const {
  auto it = data_->higher_is_better.find(metric);
  if (it == data_->higher_is_better.end()) return std::nullopt;
  return it->second;
}

bool RunFacts::maximizes(const WatchedMetric& metric) const {
  if (metric.maximize) return *metric.maximize;
  if (auto higher = higher_is_better(metric.metric)) return *higher;
  // The one wording for every plugin that ranks by a metric's direction.
  throw ConfigError(metric.where, metric.key,
                    "whether a higher or lower '" + metric.metric + "' is better is not known to the run (it knows "
                    "the direction of evaluation metrics and losses, and of the metrics plugins declare with one); "
                    "set mode = \"max\" or \"min\" beside it");
}

const std::vector<std::string>& RunFacts::weight_sets() const { return data_->weight_sets; }
const std::vector<std::string>& RunFacts::eval_passes() const { return data_->eval_passes; }

void RunFacts::set_model(torch::nn::Module* model) { data_->model = model; }
void RunFacts::set_optimizers(NamedOptimizerPointers optimizers) { data_->optimizers = std::move(optimizers); }
void RunFacts::set_device(std::string device) { data_->device = std::move(device); }
void RunFacts::set_run_dir(std::string run_dir) { data_->run_dir = std::move(run_dir); }
void RunFacts::set_ranks(int rank, int world_size, std::shared_ptr<Communicator> communicator) {
  data_->rank = rank;
  data_->world_size = world_size;
  data_->communicator = std::move(communicator);
}
void RunFacts::set_seed(std::uint64_t seed) { data_->seed = seed; }
void RunFacts::set_requested_weights(std::string weights) { data_->requested_weights = std::move(weights); }
void RunFacts::add_plugin(std::string id) { data_->plugins.push_back(std::move(id)); }
void RunFacts::set_passes(TrainingPasses* passes) { data_->passes = passes; }
void RunFacts::set_sharded(bool sharded) { data_->sharded = sharded; }
void RunFacts::set_sharding(std::string sharding) { data_->sharding = std::move(sharding); }
void RunFacts::set_held_rows(std::function<std::vector<HeldRows>()> held_rows) {
  data_->held_rows = std::move(held_rows);
}
void RunFacts::set_probe(std::function<Outputs(const Batch&)> forward, Batch example) {
  data_->probe = std::move(forward);
  data_->example = std::move(example);
}
void RunFacts::set_metrics(std::vector<std::string> names, std::map<std::string, bool> higher_is_better,
                           std::vector<std::string> families) {
  data_->metric_names = std::move(names);
  data_->higher_is_better = std::move(higher_is_better);
  data_->families = std::move(families);
}
void RunFacts::set_weight_sets(std::vector<std::string> sets) { data_->weight_sets = std::move(sets); }
void RunFacts::set_eval_passes(std::vector<std::string> passes) { data_->eval_passes = std::move(passes); }

}  // namespace baton
