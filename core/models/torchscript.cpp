// A TorchScript module as a baton::Model. The trainer, its checkpoints, the EMA and data-parallel averaging all
// walk a torch::nn::Module's tensors, and a torch::jit::Module is not one; so the module's tree is mirrored by plain
// nn::Modules that register the very same tensors (not copies) under the same names. Everything that updates
// weights in place (the optimizer, copy_, set_data for a device or memory-format move) then updates the scripted
// module too, and the dotted names come from the nesting itself, as in Python.
#include "baton/torchscript.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
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

// The mode a traced module was recorded in, read from its mode-dependent operators: a trace records their
// `train`/`training` argument as a constant, where a scripted module reads its `training` attribute at run time.
// "" when no such operator reads a constant (a scripted module, or a trace without dropout or batch norm).
std::string traced_mode(const torch::jit::Module& module) {
  static const std::vector<std::string> kinds = {"aten::dropout",       "aten::dropout_",
                                                 "aten::feature_dropout", "aten::alpha_dropout",
                                                 "aten::feature_alpha_dropout", "aten::batch_norm",
                                                 "aten::_batch_norm_impl_index"};
  auto graph = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);  // a submodule's operators are inside its own method until inlined
  for (torch::jit::Node* node : graph->nodes()) {
    if (std::find(kinds.begin(), kinds.end(), node->kind().toQualString()) == kinds.end()) continue;
    const torch::jit::FunctionSchema* schema = node->maybeSchema();
    if (schema == nullptr) continue;
    for (const char* name : {"train", "training"}) {
      const auto index = schema->argumentIndexWithName(name);
      if (!index) continue;
      const auto value = torch::jit::toIValue(node->input(*index));
      if (value && value->isBool()) return value->toBool() ? "train" : "eval";
    }
  }
  return "";
}

class ScriptedModule final : public torch::nn::Module {
 public:
  ScriptedModule(torch::jit::Module script, TorchScriptFields fields)
      : torch::nn::Module("TorchScript"), script_(std::move(script)), fields_(std::move(fields)) {
    mirror(*this, script_);
  }

  // Mode changes reach the scripted module, whose own `training` flags its code reads.
  void train(bool on) override {
    script_.train(on);
    torch::nn::Module::train(on);
  }

  // The batch's fields named by `inputs`, in order, as the forward's arguments; a tensor, a tuple or a dict of
  // tensors back as named outputs.
  Outputs forward(const Batch& batch) {
    std::vector<c10::IValue> args;
    args.reserve(fields_.inputs.size());
    for (const auto& name : fields_.inputs) args.emplace_back(batch[name]);
    return outputs_of(script_.forward(std::move(args)));
  }

 private:
  Outputs outputs_of(const c10::IValue& out) const {
    Outputs outputs;
    if (out.isTensor()) {
      outputs.set(fields_.outputs.empty() ? "outputs" : fields_.outputs.front(), out.toTensor());
    } else if (out.isTuple() || out.isTensorList() || out.isList()) {
      const std::vector<c10::IValue> items =
          out.isTuple() ? out.toTupleRef().elements().vec() : out.toListRef().vec();
      if (!fields_.outputs.empty() && fields_.outputs.size() != items.size())
        throw Error("the TorchScript model's forward returned " + std::to_string(items.size()) +
                    " values, but `outputs` names " + std::to_string(fields_.outputs.size()));
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (!items[i].isTensor())
          throw Error("the TorchScript model's forward returned a " + std::string(out.tagKind()) + " whose item " +
                      std::to_string(i) + " is a " + items[i].tagKind() + ", not a tensor");
        const std::string name = !fields_.outputs.empty() ? fields_.outputs[i]
                                 : i == 0                 ? std::string("outputs")
                                                          : "outputs_" + std::to_string(i);
        outputs.set(name, items[i].toTensor());
      }
    } else if (out.isGenericDict()) {
      for (const auto& item : out.toGenericDict()) {
        if (!item.key().isString() || !item.value().isTensor())
          throw Error("the TorchScript model's forward returned a dict that is not of strings to tensors");
        outputs.set(item.key().toStringRef(), item.value().toTensor());
      }
    } else {
      throw Error("the TorchScript model's forward returned " + std::string(out.tagKind()) +
                  "; baton trains models whose forward returns a tensor, or a tuple or dict of tensors");
    }
    return outputs;
  }

  torch::jit::Module script_;
  TorchScriptFields fields_;
};

}  // namespace

Model torchscript_model(const torch::jit::Module& module, TorchScriptFields fields) {
  if (!module.find_method("forward")) throw Error("the TorchScript module has no forward method");
  if (fields.inputs.empty()) throw Error("a TorchScript model needs at least one input field");
  // The forward's arguments after `self`: as many as the fields that feed them (defaulted ones may be left out).
  const auto& schema = module.get_method("forward").function().getSchema();
  const std::size_t arguments = schema.arguments().empty() ? 0 : schema.arguments().size() - 1;
  std::size_t required = 0;
  for (std::size_t i = 1; i < schema.arguments().size(); ++i)
    if (!schema.arguments()[i].default_value()) ++required;
  if (fields.inputs.size() > arguments || fields.inputs.size() < required) {
    std::string names;
    for (std::size_t i = 1; i < schema.arguments().size(); ++i) names += (i > 1 ? ", " : "") + schema.arguments()[i].name();
    throw Error("the TorchScript model's forward takes " + std::to_string(arguments) + " argument" +
                (arguments == 1 ? "" : "s") + " (" + names + "), but " + std::to_string(fields.inputs.size()) +
                " input field" + (fields.inputs.size() == 1 ? " is" : "s are") + " given (`inputs`)");
  }
  // LibTorch's TensorExpr fuser compiles fused CPU kernels with LLVM at the first steps; on Debian 13's LibTorch
  // 2.6 that compilation ran for minutes on a three-layer model. The interpreter runs the same operators unfused.
  torch::jit::setTensorExprFuserEnabled(false);
  // A trace fixed its dropout and batch norm in one mode, whatever mode training and evaluation set: say which, once
  // per load (rank 0 only under torchrun).
  if (const std::string mode = traced_mode(module); !mode.empty()) {
    const char* rank = std::getenv("RANK");
    if (rank == nullptr || std::string(rank) == "0")
      std::printf("baton: the TorchScript model was traced in %s mode: its dropout and batch norm act as in %s mode "
                  "in training and evaluation alike (a trace records one mode; torch.jit.script keeps both)\n",
                  mode.c_str(), mode.c_str());
  }
  auto scripted = std::make_shared<ScriptedModule>(module, std::move(fields));
  scripted->train(module.is_training());
  return Model(scripted);  // its forward(Batch) -> Outputs
}

Model load_torchscript(const std::string& path, TorchScriptFields fields) {
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
    return torchscript_model(module, std::move(fields));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

void register_torchscript_model(Components& components) {
  components.models.add("torchscript",
                        "a module saved by Python's torch.jit.save: [model] torchscript = \"file.pt\"; keys inputs "
                        "(the batch fields its forward takes, default [\"inputs\"]) and outputs (names of a tuple's "
                        "items)",
                        [](const PluginConfig& config, const DataSpec& data) -> Model {
                          const std::string path = config.get_text("torchscript");
                          TorchScriptFields fields;
                          fields.inputs = config.get_or("inputs", fields.inputs);
                          fields.outputs = config.get_or("outputs", fields.outputs);
                          for (const auto& name : fields.inputs)
                            if (!data.fields.empty() && data.field(name) == nullptr)
                              config.fail("inputs", "the data has no field '" + name + "' (its fields: " +
                                                        data.field_names() + ")");
                          try {
                            return load_torchscript(path, fields);
                          } catch (const Error& e) {
                            config.fail("torchscript", e.what());
                          }
                        });
}

}  // namespace baton
