#include "baton/model.h"

#include <torch/nn/modules/container/sequential.h>

#include "baton/error.h"
#include "baton/unit.h"

namespace baton {
namespace {

// A Sequential's parts one after another, each through run_unit: under zero3 the parts holding parameters are the
// default units, gathered one at a time.
Model::Forward sequential_forward(std::shared_ptr<torch::nn::SequentialImpl> sequential) {
  return [sequential](const at::Tensor& inputs) {
    at::Tensor h = inputs;
    for (auto& part : *sequential) h = run_unit(part, h);
    return h;
  };
}

}  // namespace

Model::Model(std::shared_ptr<torch::nn::Module> module, BatchForward forward)
    : module_(std::move(module)), forward_(std::move(forward)) {
  if (!module_) throw Error("a model needs a module (got a null one)");
  if (!forward_) throw Error("a model needs a forward function (got an empty one)");
}

Model::Model(std::shared_ptr<torch::nn::Module> module, Forward forward)
    : Model(std::move(module),
            forward ? BatchForward([forward](const Batch& batch) -> Outputs { return forward(batch.inputs()); })
                    : BatchForward()) {}

Model::Model(torch::nn::AnyModule module)
    : Model(module.is_empty() ? nullptr : module.ptr(),
            !module.is_empty() && std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module.ptr())
                ? sequential_forward(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(module.ptr()))
                : Forward([module](const at::Tensor& inputs) mutable -> at::Tensor { return module.forward(inputs); })) {}

Model::Model(std::shared_ptr<torch::nn::SequentialImpl> sequential)
    : Model(sequential, sequential ? sequential_forward(sequential) : Forward()) {}

Model& Model::with_eval_forward(BatchForward forward) {
  eval_forward_ = std::move(forward);
  return *this;
}

Model& Model::with_loss(LossFunction loss, bool replaceable) {
  loss_ = std::move(loss);
  loss_replaceable_ = replaceable;
  return *this;
}

Model& Model::with_optimizers(std::vector<NamedOptimizer> optimizers) {
  for (std::size_t i = 0; i < optimizers.size(); ++i) {
    if (optimizers[i].name.empty() || !optimizers[i].optimizer)
      throw Error("a model's optimizer needs a name and an optimizer (entry " + std::to_string(i) + ")");
    for (std::size_t j = 0; j < i; ++j)
      if (optimizers[j].name == optimizers[i].name)
        throw Error("a model has two optimizers named '" + optimizers[i].name + "'");
  }
  optimizers_ = std::move(optimizers);
  return *this;
}

Model& Model::with_training_step(TrainingStep step) {
  training_step_ = std::move(step);
  return *this;
}

StepContext::~StepContext() = default;

at::Tensor Model::forward(const at::Tensor& inputs) const {
  Batch batch;
  batch.set("inputs", inputs);
  return forward_(batch).main();
}

}  // namespace baton
