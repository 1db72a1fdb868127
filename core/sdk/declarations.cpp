#include "baton/declarations.h"

#include <algorithm>

namespace baton {
namespace {

void add_once(std::vector<std::string>& list, const std::string& item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

}  // namespace

struct Declarations::Data {
  std::string device;
  int world_size = 1;
  std::string requested_weights;
  std::vector<std::string> metrics;
  std::map<std::string, bool> directions;
  std::vector<std::string> families;
  std::vector<WatchedMetric> watched;
  std::vector<std::string> weight_sets;
  std::vector<std::string> eval_passes;
  std::vector<std::string> replicated_only;
  std::vector<BestCheckpointsRequest> keep_best;
  std::vector<std::string> best_files;
  std::size_t capturable = 0;
};

Declarations::Declarations(std::string device, int world_size, std::string requested_weights)
    : data_(std::make_unique<Data>()) {
  data_->device = std::move(device);
  data_->world_size = world_size;
  data_->requested_weights = std::move(requested_weights);
}
Declarations::~Declarations() = default;

const std::string& Declarations::device() const { return data_->device; }
int Declarations::world_size() const { return data_->world_size; }
const std::string& Declarations::requested_weights() const { return data_->requested_weights; }

void Declarations::metric(const std::string& name) { add_once(data_->metrics, name); }
void Declarations::metric(const std::string& name, bool higher_is_better) {
  add_once(data_->metrics, name);
  data_->directions[name] = higher_is_better;
}
void Declarations::metric_family(const std::string& prefix) { add_once(data_->families, prefix); }
void Declarations::watch(const WatchedMetric& metric) { data_->watched.push_back(metric); }
void Declarations::weight_set(const std::string& name) { add_once(data_->weight_sets, name); }
void Declarations::eval_pass(const std::string& label) {
  if (label != "eval") add_once(data_->eval_passes, label);
}

void Declarations::keep_best(const WatchedMetric& metric, std::int64_t keep) {
  if (keep < 1) throw Error(metric.key + ": keep the best " + std::to_string(keep) + " checkpoints? at least 1");
  data_->keep_best.push_back({metric, keep});
  data_->watched.push_back(metric);  // checked as every watched metric is
}
void Declarations::best_file(const std::string& filename) { add_once(data_->best_files, filename); }

void Declarations::replicated_only(const std::string& what) { data_->replicated_only.push_back(what); }
void Declarations::capturable() { ++data_->capturable; }

const std::vector<std::string>& Declarations::metrics() const { return data_->metrics; }
const std::map<std::string, bool>& Declarations::directions() const { return data_->directions; }
const std::vector<std::string>& Declarations::metric_families() const { return data_->families; }
const std::vector<WatchedMetric>& Declarations::watched() const { return data_->watched; }
const std::vector<std::string>& Declarations::weight_sets() const { return data_->weight_sets; }
const std::vector<std::string>& Declarations::eval_passes() const { return data_->eval_passes; }
const std::vector<BestCheckpointsRequest>& Declarations::keep_best_requests() const { return data_->keep_best; }
const std::vector<std::string>& Declarations::best_files() const { return data_->best_files; }
const std::vector<std::string>& Declarations::replicated_only_reasons() const { return data_->replicated_only; }
std::size_t Declarations::capturable_count() const { return data_->capturable; }

}  // namespace baton
