#include "baton/unit.h"

#include <map>
#include <mutex>

#include <torch/nn/modules/container/any.h>

#include "baton/error.h"
#include "sdk/unit_runner.h"

namespace baton {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<const torch::nn::Module*, detail::UnitRunner*> runners;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

at::Tensor run_unit(const torch::nn::Module& module, const UnitForward& forward, const at::Tensor& input) {
  detail::UnitRunner* runner = nullptr;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto found = r.runners.find(&module);
    if (found != r.runners.end()) runner = found->second;
  }
  return runner ? runner->run(module, forward, input) : forward(input);
}

at::Tensor run_unit(torch::nn::AnyModule& part, const at::Tensor& input) {
  // The part by value in the forward: a zero3 backward calls it again, after this call returned.
  return run_unit(*part.ptr(), [part](const at::Tensor& x) mutable { return part.forward(x); }, input);
}

namespace detail {

void register_unit(const torch::nn::Module& module, UnitRunner& runner) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, added] = r.runners.emplace(&module, &runner);
  if (!added && it->second != &runner)
    throw Error("run_unit: the module is a unit of another sharded run already (one module, one run)");
}

void unregister_unit(const torch::nn::Module& module, const UnitRunner& runner) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto found = r.runners.find(&module);
  if (found != r.runners.end() && found->second == &runner) r.runners.erase(found);
}

}  // namespace detail
}  // namespace baton
