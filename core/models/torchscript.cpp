// A TorchScript module as a baton::Model. The trainer, its checkpoints, the EMA and data-parallel averaging all
// walk a torch::nn::Module's tensors, and a torch::jit::Module is not one; so the module's tree is mirrored by plain
// nn::Modules that register the very same tensors (not copies) under the same names. Everything that updates
// weights in place (the optimizer, copy_, set_data for a device or memory-format move) then updates the scripted
// module too, and the dotted names come from the nesting itself, as in Python.
#include "baton/torchscript.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>

#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/module.h>

#include "baton/components.h"
#include "baton/error.h"
#include "components/builtins.h"

namespace baton {
namespace {

void mirror(torch::nn::Module& into, const torch::jit::Module& from) {
  for (const auto& p : from.named_parameters(/*recurse=*/false))
    if (p.value.defined()) into.register_parameter(p.name, p.value, p.value.requires_grad());
  for (const auto& b : from.named_buffers(/*recurse=*/false))
    if (b.value.defined()) into.register_buffer(b.name, b.value);
  for (const auto& c : from.named_children()) {
    auto child = std::make_shared<torch::nn::Module>(c.value.type()->name() ? c.value.type()->name()->name() : c.name);
    mirror(*child, c.value);
    into.register_module(c.name, child);
  }
}

class ScriptedModule final : public torch::nn::Module {
 public:
  explicit ScriptedModule(torch::jit::Module script) : torch::nn::Module("TorchScript"), script_(std::move(script)) {
    mirror(*this, script_);
  }

  // Mode changes reach the scripted module, whose own `training` flags its code reads.
  void train(bool on) override {
    script_.train(on);
    torch::nn::Module::train(on);
  }

  at::Tensor forward(const at::Tensor& inputs) {
    c10::IValue out = script_.forward({inputs});
    if (!out.isTensor())
      throw Error("the TorchScript model's forward returned " + out.tagKind() +
                  "; baton trains models whose forward returns one tensor");
    return out.toTensor();
  }

 private:
  torch::jit::Module script_;
};

}  // namespace

Model torchscript_model(const torch::jit::Module& module) {
  if (!module.find_method("forward")) throw Error("the TorchScript module has no forward method");
  // LibTorch's TensorExpr fuser compiles fused CPU kernels with LLVM at the first steps; on Debian 13's LibTorch
  // 2.6 that compilation ran for minutes on a three-layer model. The interpreter runs the same operators unfused.
  torch::jit::setTensorExprFuserEnabled(false);
  auto scripted = std::make_shared<ScriptedModule>(module);
  scripted->train(module.is_training());
  return Model(scripted);  // its forward(Tensor) -> Tensor
}

Model load_torchscript(const std::string& path) {
  // The archive reader's own message for a missing file is a stack of C++ frames: check it first.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) throw Error(path + ": is a folder, expected a file saved by torch.jit.save");
  if (std::ifstream probe(path, std::ios::binary); !probe) throw Error(path + ": cannot read: " + std::strerror(errno));
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, at::Device(at::kCPU));
  } catch (const c10::Error& e) {
    throw Error(path + ": not a TorchScript archive (torch.jit.save writes one): " + e.what_without_backtrace());
  }
  try {
    return torchscript_model(module);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void register_torchscript_model(Components& components) {
  components.models.add("torchscript", "a module saved by Python's torch.jit.save: [model] torchscript = \"file.pt\"",
                        [](const PluginConfig& config, const DataSpec&) -> Model {
                          const std::string path = config.get_text("torchscript");
                          try {
                            return load_torchscript(path);
                          } catch (const Error& e) {
                            config.fail("torchscript", e.what());
                          }
                        });
}

}  // namespace baton
