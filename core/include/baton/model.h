#pragma once
// What the trainer trains: a torch::nn::Module (the parameters and buffers that the optimizer, checkpoints, the EMA
// and data-parallel averaging walk, its train/eval mode, its device) together with a tensor-to-tensor forward.
// LibTorch's AnyModule cannot hold a module whose forward is a template (torch::nn::Sequential) and a TorchScript
// module is no nn::Module at all, so the trainer takes this instead. It converts implicitly from
//   - a module with `Tensor forward(Tensor)`, as a holder (torch::nn::Linear, a TORCH_MODULE of one's own) or a
//     std::shared_ptr to its Impl;
//   - torch::nn::Sequential (each part's forward taking and returning one tensor);
//   - torch::nn::AnyModule;
// and baton::load_torchscript (baton/torchscript.h) makes one from a file saved by Python's torch.jit.save.
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include "baton/export.h"

namespace baton {

namespace detail {
// A module type with a forward taking one tensor and returning one.
template <typename Impl, typename = void>
struct tensor_module : std::false_type {};
template <typename Impl>
struct tensor_module<Impl, std::enable_if_t<std::is_base_of_v<torch::nn::Module, Impl> &&
                                            std::is_convertible_v<decltype(std::declval<Impl&>().forward(
                                                                      std::declval<const at::Tensor&>())),
                                                                  at::Tensor>>> : std::true_type {};
}  // namespace detail

class BATON_API Model {
 public:
  using Forward = std::function<at::Tensor(const at::Tensor&)>;

  Model() = default;
  /// The general form: `module` owns the tensors, `forward` computes the outputs (it may use anything `module`
  /// keeps alive). Throws baton::Error when either is missing.
  Model(std::shared_ptr<torch::nn::Module> module, Forward forward);
  Model(torch::nn::AnyModule module);  // NOLINT(google-explicit-constructor): a model is what the trainer takes

  template <typename Impl, typename = std::enable_if_t<detail::tensor_module<Impl>::value>>
  Model(std::shared_ptr<Impl> module)  // NOLINT(google-explicit-constructor)
      : Model(module, [module](const at::Tensor& x) -> at::Tensor { return module->forward(x); }) {}

  template <typename Impl, typename = std::enable_if_t<detail::tensor_module<Impl>::value>>
  Model(const torch::nn::ModuleHolder<Impl>& holder)  // NOLINT(google-explicit-constructor)
      : Model(holder.ptr()) {}

  at::Tensor forward(const at::Tensor& inputs) const { return forward_(inputs); }
  torch::nn::Module& module() const { return *module_; }
  const std::shared_ptr<torch::nn::Module>& ptr() const { return module_; }
  explicit operator bool() const { return module_ != nullptr; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  Forward forward_;
};

}  // namespace baton
