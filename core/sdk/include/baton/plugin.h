#pragma once
// The plugin SDK: what a plugin includes. Deliberately light (no <torch/torch.h>): a plugin that only watches
// events compiles in well under a second.
//
// Two kinds of plugins, as in Composer, which differ in the order they run (docs/plugins.md):
//   Algorithm — registers one handler per event it acts on in subscribe (`events.on(Event::batch_end, this,
//               &MyAlgorithm::update)`); Composer's match/apply pair remains for one that decides per occurrence.
//   Callback  — one virtual per event, empty by default; override the ones you need.
// Both may keep state in checkpoints (state_dict / load_state_dict) and are closed once at the end of a run.
//
// A plugin tells the engine which events it handles once, when it is added to a run (Plugin::subscribe, as LLVM's
// pass plugins register their callbacks through one hook), and the engine calls only those. Events cross that line
// by name: the engine resolves each against its own event list, so a baton whose events.def gained events (anywhere
// in the list) still calls an older plugin on exactly the events it subscribed to. Callback subscribes for you; the
// core never calls its own virtuals, which therefore may follow events.def freely.
//
// What a plugin logs, watches, keeps and adds to evaluation it declares once too (Plugin::declare, methods of
// baton/declarations.h), before any model is built; what is fixed for the run it reads through State::facts.
//
// Export a plugin with one macro in one .cpp file:
//   BATON_PLUGIN(MyAlgorithm, "my_algorithm", "1.0.0", "what it does")
// The class needs a constructor taking `const baton::PluginConfig&` (or a default constructor).
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <torch/version.h>

#include "baton/declarations.h"
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
class Subscriptions;

class BATON_API Plugin {
 public:
  virtual ~Plugin();
  /// Saves the plugin's state into a checkpoint.
  virtual void state_dict(StateDict& out) const;
  /// Restores it; `in` is what state_dict wrote (empty when the checkpoint has no state for this plugin).
  virtual void load_state_dict(const StateDict& in);
  /// Called once when the run ends, on every exit path.
  virtual void close();
  /// Registers the plugin's handlers, once, when it is added to a run (before init); the engine calls nothing else
  /// of it on events. Algorithm and Callback implement it; override it to register handlers of your own.
  virtual void subscribe(Subscriptions& events);
  /// Declares what the plugin logs, watches, keeps and evaluates (baton/declarations.h), once it is added to a
  /// run and again wherever baton needs the declarations before a run (`baton check`, `--weights`): it declares
  /// and does nothing else. The model is not built yet; what depends on it is declared as a family of names.
  virtual void declare(Declarations& run) const;
};

/// The handlers a plugin registers in Plugin::subscribe. Each names its event by string: the engine resolves the
/// name against its own event list when the plugin is added (an unknown name is an error naming plugin and event),
/// so what a built plugin subscribed to never depends on the numbering of a later baton's events.
class BATON_API Subscriptions {
 public:
  using Handler = std::function<void(State& state, Logger& logger)>;
  /// Whether a handler runs on this occurrence of its event (Composer's Algorithm::match).
  using Match = std::function<bool(const State& state)>;
  struct Entry {
    std::string event;  // its name, e.g. "batch_end"
    Match match;        // empty: the handler always runs
    Handler handler;
  };

  Subscriptions();
  ~Subscriptions();

  /// Calls `handler` on the event of this name.
  void add(std::string_view event, Handler handler);
  /// Calls `handler` on the event of this name when `match` says so then; a traced run shows only the calls made.
  void add_matched(std::string_view event, Match match, Handler handler);

  /// The same with an Event of this SDK: the name is taken from the list the plugin is compiled against.
  void on(Event event, Handler handler) { add(event_name(event), std::move(handler)); }
  /// One line per event: `events.on(Event::fit_start, this, &MyPlugin::fit_start)`, the method taking
  /// (State&, Logger&).
  template <class T>
  void on(Event event, T* self, void (T::*method)(State&, Logger&)) {
    on(event, [self, method](State& state, Logger& logger) { (self->*method)(state, logger); });
  }
  void on_match(Event event, Match match, Handler handler) {
    add_matched(event_name(event), std::move(match), std::move(handler));
  }

  /// Every registration, in order.
  const std::vector<Entry>& entries() const;

 private:
  std::vector<Entry> entries_;
};

namespace detail {
struct CallbackOverrides;
}  // namespace detail

class BATON_API Algorithm : public Plugin {
 public:
  ~Algorithm() override;
  /// Composer's pair, for an algorithm that does not override subscribe: match says whether apply runs on this
  /// occurrence of the event. One that registers its own handlers in subscribe leaves both alone.
  virtual bool match(Event event, const State& state);
  virtual void apply(Event event, State& state, Logger& logger);
  /// Subscribes match/apply to every event of this SDK's list; `event` is always a value of that list. An
  /// algorithm that acts on a few events overrides this with one `events.on(...)` line per event.
  inline void subscribe(Subscriptions& events) override;

 protected:
  /// For an algorithm that acts on a few events: `void subscribe(Subscriptions& e) override { subscribe_to(e,
  /// {Event::after_dataloader}); }`, and match() is asked about those only.
  inline void subscribe_to(Subscriptions& events, std::initializer_list<Event> only);
};

class BATON_API Callback : public Plugin {
 public:
  ~Callback() override;
#define BATON_EVENT(name) virtual void name(State& state, Logger& logger);
#include "baton/events.def"
#undef BATON_EVENT
  /// Subscribes the methods the concrete class overrides, or all of them when that class is not known (a Callback
  /// added to Trainer::add_plugin through a base-class pointer).
  inline void subscribe(Subscriptions& events) override;
  /// Calls the method named after event (for tests: a run calls only what subscribe registered).
  inline void run_event(Event event, State& state, Logger& logger);

 private:
  friend struct detail::CallbackOverrides;
  /// The events the concrete class overrides, bit i for the Event of value i in this header's list; all bits
  /// until BATON_PLUGIN's factory or Trainer::add_plugin, which know the class, record it. Only code compiled with
  /// this header reads it (subscribe is inline), so a later SDK may store it otherwise.
  std::uint64_t overridden_ = ~std::uint64_t{0};
};
static_assert(kEventCount <= 64, "Callback::overridden_ holds one bit per event");

namespace detail {

// The handlers Algorithm and Callback register: one function-object type each (not a lambda per event), so a
// plugin instantiates std::function for two or three types, not forty.
struct AlgorithmMatch {
  Algorithm* algorithm;
  Event event;
  bool operator()(const State& state) const { return algorithm->match(event, state); }
};
struct AlgorithmApply {
  Algorithm* algorithm;
  Event event;
  void operator()(State& state, Logger& logger) const { algorithm->apply(event, state, logger); }
};
struct CallbackMethod {
  Callback* callback;
  void (Callback::*method)(State&, Logger&);
  void operator()(State& state, Logger& logger) const { (callback->*method)(state, logger); }
};

// overrides_<event><T>: whether T overrides that method. decltype(&T::name) is Callback's own method unless T, or a
// class between them, declares one. A declaration that makes &T::name unusable here (private, overloaded) counts
// as an override: a needless subscription only costs a call, a missing one loses events.
#define BATON_EVENT(name)                                                                           \
  template <class T, class = void>                                                                  \
  struct overrides_##name : std::true_type {};                                                      \
  template <class T>                                                                                \
  struct overrides_##name<                                                                          \
      T, std::enable_if_t<std::is_same_v<decltype(&T::name), void (Callback::*)(State&, Logger&)>>> \
      : std::false_type {};
#include "baton/events.def"
#undef BATON_EVENT

struct CallbackOverrides {
  template <class T>
  static constexpr std::uint64_t of() {
    std::uint64_t mask = 0;
#define BATON_EVENT(name) \
  if (overrides_##name<T>::value) mask |= std::uint64_t{1} << static_cast<unsigned>(Event::name);
#include "baton/events.def"
#undef BATON_EVENT
    return mask;
  }
  /// Records which events T overrides, when `callback` is exactly a T (a class derived from T may override more).
  template <class T>
  static void record(T& callback) {
    if (typeid(callback) == typeid(T)) static_cast<Callback&>(callback).overridden_ = of<T>();
  }
};

}  // namespace detail

inline void Algorithm::subscribe(Subscriptions& events) {
  // By index rather than through kAllEvents: code compiled into a plugin reads no inline variable (baton/event.h).
  for (std::size_t i = 0; i < kEventCount; ++i) {
    const auto event = static_cast<Event>(i);
    events.on_match(event, detail::AlgorithmMatch{this, event}, detail::AlgorithmApply{this, event});
  }
}

inline void Algorithm::subscribe_to(Subscriptions& events, std::initializer_list<Event> only) {
  for (Event event : only)
    events.on_match(event, detail::AlgorithmMatch{this, event}, detail::AlgorithmApply{this, event});
}

inline void Callback::subscribe(Subscriptions& events) {
#define BATON_EVENT(name)                                      \
  if ((overridden_ >> static_cast<unsigned>(Event::name)) & 1u) \
    events.on(Event::name, detail::CallbackMethod{this, &Callback::name});
#include "baton/events.def"
#undef BATON_EVENT
}

/// Runs what `plugin` subscribed to `event` as the engine runs it (each of its handlers for that event, in the
/// order registered, a matched one when its match says so): for tests that drive a plugin without a trainer.
inline void run_subscribed(Plugin& plugin, Event event, State& state, Logger& logger) {
  Subscriptions events;
  plugin.subscribe(events);
  const std::string_view name = event_name(event);
  for (const auto& entry : events.entries())
    if (entry.event == name && (!entry.match || entry.match(state))) entry.handler(state, logger);
}

inline void Callback::run_event(Event event, State& state, Logger& logger) {
  switch (event) {
#define BATON_EVENT(name) \
  case Event::name:       \
    name(state, logger);  \
    return;
#include "baton/events.def"
#undef BATON_EVENT
  }
}

}  // namespace baton

/// Bump on any change that breaks binary compatibility of this SDK: the layout of baton_plugin_info (other than
/// appending a field), of State other than appending a member (its layout rule in baton/state.h), of Batch,
/// Progress, Timestamp; the virtual functions of Plugin/Logger/CheckpointInProgress; the signatures of exported SDK
/// functions. Adding an event is not such a change (plugins subscribe by name), nor is a new method of RunFacts or
/// Declarations, nor are the virtuals of Callback and Algorithm, which only the plugin's own code calls.
/// docs/plugins.md lists them. 5: declarations (Plugin::declare) and the run's facts (State::facts) left State.
#define BATON_PLUGIN_ABI_VERSION 5u

extern "C" {
/// Read by the loader before any C++ type of the plugin is touched. struct_size and abi_version stay first in every
/// ABI, so a plugin built against any SDK is told which one it needs.
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
  void (*register_components)(baton::Components& components);  // null: registers nothing
  // A field appended here later is read by the loader only when struct_size covers it.
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
  T* plugin = nullptr;
  if constexpr (std::is_constructible_v<T, const PluginConfig&>)
    plugin = new T(config);
  else
    plugin = new T();
  // Here the class is known, so a callback subscribes only to the events it overrides.
  if constexpr (std::is_base_of_v<Callback, T>) CallbackOverrides::record(*plugin);
  return plugin;
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
