#pragma once
// Where each concept folder registers its built-in components; components() calls them all once.
namespace baton {

struct Components;

void register_builtin_models(Components& components);      // core/models
void register_torchscript_model(Components& components);   // core/models: [model] torchscript = "file.pt"
void register_builtin_datasets(Components& components);    // core/data
void register_builtin_optimizers(Components& components);  // core/optim
void register_builtin_schedulers(Components& components);  // core/optim: learning-rate schedules
void register_builtin_losses(Components& components);      // core/metrics
void register_builtin_metrics(Components& components);     // core/metrics

}  // namespace baton
