#pragma once
// Models exported from Python with torch.jit.save (scripted or traced), trained as they are. The module's
// parameters and buffers become a baton::Model's under their Python names ("features.0.weight"), so checkpoints,
// model.safetensors and ema.safetensors load back into the Python model with load_state_dict(strict=True). The
// config form is [model] torchscript = "model.pt" (docs/config.md).
//
// A traced module keeps the control flow of the mode it was traced in (dropout traced in eval mode stays off);
// a scripted one follows train()/eval() as in Python.
#include <string>

#include "baton/export.h"
#include "baton/model.h"

namespace torch::jit {
struct Module;
}

namespace baton {

/// Loads `path` onto the CPU. Throws baton::Error naming the file: missing or unreadable (with the OS reason), not
/// a TorchScript archive, or a module without a forward method.
BATON_API Model load_torchscript(const std::string& path);

/// A module already loaded (torch::jit::load) as a Model; the Model shares its tensors.
BATON_API Model torchscript_model(const torch::jit::Module& module);

}  // namespace baton
