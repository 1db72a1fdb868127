#pragma once
// The plugin SDK: what a plugin includes. Deliberately light (no <torch/torch.h>): a plugin that only watches
// events compiles in well under a second.
//
// Two kinds of plugins, as in Composer:
//   Algorithm — match(event, state) says whether it runs; apply(event, state, logger) does the work.
//   Callback  — one virtual per event, empty by default; override the ones you need.
// Both may keep state in checkpoints (state_dict / load_state_dict) and are closed once at the end of a run.
//
// Export a plugin with one macro in one .cpp file:
//   BATON_PLUGIN(MyAlgorithm, "my_algorithm", "1.0.0", "what it does")
// The class needs a constructor taking `const baton::PluginConfig&` (or a default constructor).
#include <cstdint>
#include <type_traits>

#include <torch/version.h>

#include "baton/error.h"
#include "baton/event.h"
#include "baton/export.h"
#include "baton/logger.h"
#include "baton/plugin_config.h"
#include "baton/state.h"
#include "baton/state_dict.h"
#include "baton/time.h"

namespace baton {

struct Components;  // baton/components.h: the registries of models, datasets, optimizers, ...

class BATON_API Plugin {
 public:
  virtual ~Plugin();
  /// Saves the plugin's state into a checkpoint.
  virtual void state_dict(StateDict& out) const;
  /// Restores it; `in` is what state_dict wrote (empty when the checkpoint has no state for this plugin).
  virtual void load_state_dict(const StateDict& in);
  /// Called once when the run ends, on every exit path.
  virtual void close();
};

class BATON_API Algorithm : public Plugin {
 public:
  ~Algorithm() override;
  virtual bool match(Event event, const State& state) = 0;
  virtual void apply(Event event, State& state, Logger& logger) = 0;
};

class BATON_API Callback : public Plugin {
 public:
  ~Callback() override;
#define BATON_EVENT(name) virtual void name(State& state, Logger& logger);
#include "baton/events.def"
#undef BATON_EVENT
  /// Calls the method named after event.
  void run_event(Event event, State& state, Logger& logger);
};

}  // namespace baton

/// Bump on any change that breaks binary compatibility of this SDK: the layout of baton_plugin_info, State,
/// Batch, Progress, Timestamp; the virtual functions of Plugin/Algorithm/Callback/Logger/CheckpointInProgress; the
/// signatures of exported SDK functions; the event list (Callback's vtable follows it). docs/plugins.md lists them.
#define BATON_PLUGIN_ABI_VERSION 3u

extern "C" {
/// Read by the loader before any C++ type of the plugin is touched.
struct baton_plugin_info {
  std::uint32_t struct_size;  // sizeof(baton_plugin_info) when the plugin was built; lets the struct grow
  std::uint32_t abi_version;  // BATON_PLUGIN_ABI_VERSION when the plugin was built
  const char* name;
  const char* version;
  const char* description;
  const char* torch_version;  // TORCH_VERSION the plugin was built against
  int cxx11_abi;              // _GLIBCXX_USE_CXX11_ABI the plugin was built with
  int kind;                   // BATON_PLUGIN_ALGORITHM, BATON_PLUGIN_CALLBACK or BATON_PLUGIN_COMPONENTS
  baton::Plugin* (*create)(const baton::PluginConfig& config);  // null for BATON_PLUGIN_COMPONENTS
  // Appended after ABI 3's first release; the loader reads it only when struct_size covers it, so a plugin built
  // before it was added loads as it did (no components).
  void (*register_components)(baton::Components& components);  // null: registers nothing
};
}

#define BATON_PLUGIN_ALGORITHM 1
#define BATON_PLUGIN_CALLBACK 2
/// A library that only registers components (BATON_COMPONENTS in baton/components.h).
#define BATON_PLUGIN_COMPONENTS 3
/// The entry point's name, as the loader looks it up.
#define BATON_PLUGIN_ENTRY_NAME "baton_plugin_entry"

#ifndef _GLIBCXX_USE_CXX11_ABI
#define BATON_CXX11_ABI_VALUE 0
#else
#define BATON_CXX11_ABI_VALUE _GLIBCXX_USE_CXX11_ABI
#endif

namespace baton::detail {
template <class T>
Plugin* create_plugin(const PluginConfig& config) {
  if constexpr (std::is_constructible_v<T, const PluginConfig&>)
    return new T(config);
  else
    return new T();
}
template <class T>
constexpr int plugin_kind() {
  static_assert(std::is_base_of_v<Algorithm, T> || std::is_base_of_v<Callback, T>,
                "BATON_PLUGIN: the class must derive from baton::Algorithm or baton::Callback");
  return std::is_base_of_v<Algorithm, T> ? BATON_PLUGIN_ALGORITHM : BATON_PLUGIN_CALLBACK;
}
}  // namespace baton::detail

/// The exported entry point with its info struct; BATON_PLUGIN and BATON_COMPONENTS (baton/components.h) fill it.
#define BATON_PLUGIN_ENTRY_POINT(name_, version_, description_, kind_, create_, register_)                  \
  extern "C" BATON_PLUGIN_EXPORT const baton_plugin_info* baton_plugin_entry() {                          \
    static const baton_plugin_info info = {sizeof(baton_plugin_info),                                     \
                                           BATON_PLUGIN_ABI_VERSION,                                      \
                                           name_,                                                         \
                                           version_,                                                      \
                                           description_,                                                  \
                                           TORCH_VERSION,                                                 \
                                           BATON_CXX11_ABI_VALUE,                                         \
                                           kind_,                                                         \
                                           create_,                                                       \
                                           register_};                                                    \
    return &info;                                                                                         \
  }

#define BATON_PLUGIN(Class, name_, version_, description_)                                     \
  BATON_PLUGIN_ENTRY_POINT(name_, version_, description_, ::baton::detail::plugin_kind<Class>(), \
                           &::baton::detail::create_plugin<Class>, nullptr)
