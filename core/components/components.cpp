#include "baton/components.h"

#include "components/builtins.h"

namespace baton {

Components& components() {
  // Built once, on first use, and never destroyed: factories registered by plugin libraries keep those libraries
  // loaded, and unloading them during static destruction, after objects made from them may still be alive in
  // other statics, is not worth the risk.
  static Components* registries = [] {
    auto* c = new Components;
    // The built-ins are baton's whatever the origin of the registration that asked for the registries first
    // (a plugin library's, when its registration function is the first to use them).
    ComponentOriginScope builtin(ComponentOrigin{});
    register_builtin_models(*c);
    register_torchscript_model(*c);
    register_builtin_datasets(*c);
    register_builtin_optimizers(*c);
    register_builtin_schedulers(*c);
    register_builtin_losses(*c);
    register_builtin_metrics(*c);
    return c;
  }();
  return *registries;
}

}  // namespace baton
