#pragma once
// Models exported from Python with torch.jit.save (scripted or traced), trained as they are. The module's
// parameters and buffers become a baton::Model's under their Python names ("features.0.weight"), so checkpoints,
// model.safetensors and ema.safetensors load back into the Python model with load_state_dict(strict=True). The
// config form is [model] torchscript = "model.pt" (docs/config.md).
//
// The forward takes the batch's fields named by `inputs` (default the one field "inputs"), in order: a forward(x, t)
// is trained with inputs = ["x", "t"]. It may return a tensor (the output "outputs"), a tuple or list of tensors
// (named by `outputs`, else "outputs", "outputs_1", ...) or a dict of strings to tensors (named by its keys).
//
// A traced module keeps the control flow of the mode it was traced in (dropout traced in eval mode stays off);
// a scripted one follows train()/eval() as in Python.
#include <string>
#include <vector>

#include "baton/export.h"
#include "baton/model.h"

namespace torch::jit {
struct Module;
}

namespace baton {

/// Which batch fields feed the forward's arguments, and the names of the items of a tuple it returns.
struct BATON_API TorchScriptFields {
  std::vector<std::string> inputs = {"inputs"};
  std::vector<std::string> outputs;  // empty: "outputs", "outputs_1", ...
};

/// Loads `path` onto the CPU. Throws baton::Error naming the file: missing or unreadable (with the OS reason), not
/// a TorchScript archive, a module without a forward method, or a forward whose arguments the fields do not fit.
BATON_API Model load_torchscript(const std::string& path, TorchScriptFields fields = {});

/// A module already loaded (torch::jit::load) as a Model; the Model shares its tensors.
BATON_API Model torchscript_model(const torch::jit::Module& module, TorchScriptFields fields = {});

}  // namespace baton
