#include "baton/model.h"

#include "baton/error.h"

namespace baton {

Model::Model(std::shared_ptr<torch::nn::Module> module, Forward forward)
    : module_(std::move(module)), forward_(std::move(forward)) {
  if (!module_) throw Error("a model needs a module (got a null one)");
  if (!forward_) throw Error("a model needs a forward function (got an empty one)");
}

Model::Model(torch::nn::AnyModule module)
    : Model(module.is_empty() ? nullptr : module.ptr(),
            [module](const at::Tensor& inputs) mutable -> at::Tensor { return module.forward(inputs); }) {}

}  // namespace baton
