#pragma once
// The engine dispatches an event to the handlers the run's plugins subscribed (Plugin::subscribe, called once when
// a plugin is added; event names resolved against this build's list), in Composer's order:
//   init:          callbacks first, then algorithms (so loggers/callbacks see algorithms' setup);
//   other events:  algorithms in configured order, reversed on after_* events, then callbacks in configured order;
//                  a matched handler (an algorithm's) runs only when its match is true.
// A plugin's handlers for one event run in the order it registered them. Each call that runs is traced as
// "<plugin id>/<event>". A plugin's exception becomes a PluginError naming the plugin and the event. After
// close(), firing an event throws.
#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "baton/plugin.h"
#include "sdk/exception_text.h"

namespace baton {

/// Runs one call into a plugin's code and turns whatever it throws into a baton error, so that nothing a plugin
/// throws (an int, a type of its own) can escape as a foreign exception and end the process, and the error names
/// the plugin and the call: PluginError("<context()>: <what>"). A ConfigError passes through, copied here (its
/// type may live in the plugin's library); it already names file, line and key. `context` is called only on
/// failure, so the hot event path builds no strings.
template <class Call, class Context>
decltype(auto) call_plugin(Call&& call, Context&& context) {
  try {
    return call();
  } catch (const ConfigError& e) {
    throw ConfigError(e);
  } catch (const std::exception& e) {
    throw PluginError(context() + ": " + detail::exception_text(e));  // a LibTorch error without its backtrace
  } catch (...) {
    throw PluginError(context() + ": it threw something that is not a std::exception");
  }
}

/// Adds what `plugin` declares (Plugin::declare) to `into`, guarded as every call into a plugin is: a failure is a
/// PluginError naming the plugin.
void collect_declarations(const Plugin& plugin, const std::string& id, Declarations& into);

struct EngineEntry {
  std::string id;
  Algorithm* algorithm = nullptr;
  Callback* callback = nullptr;
  /// The trainer's own reporting run as a callback (its progress and train/loss): not a plugin, so its calls are
  /// neither traced nor guarded, and its errors reach the user as they are (a metrics file that cannot be written).
  bool internal = false;
  /// Declarations::capturable: its handlers of the step's events may be recorded into a CUDA graph.
  bool capturable = false;
};

/// Which handlers an event reaches (trainer.cuda_graphs splits batch_end: the capturable plugins' handlers are
/// recorded with the step, the others run after it).
enum class EngineSide { all, capturable, uncapturable };

class Engine {
 public:
  Engine(State& state, Logger& logger);

  /// Subscribes the plugin (it must be exactly one of an algorithm or a callback). Throws PluginError when its
  /// subscribe throws or names an event this build does not have.
  void add(EngineEntry entry);
  const std::vector<EngineEntry>& entries() const { return entries_; }

  /// Fires one event to the handlers subscribed to it (those of one side only, when `side` says so).
  void fire(Event event, EngineSide side = EngineSide::all);

  /// Marks the entry with this id capturable (after it declared so).
  void set_capturable(const std::string& id);
  /// "<plugin id>/<event>" for each handler of a plugin that is not capturable subscribed to one of `events` (the
  /// trainer's own internal entries are not plugins and are left out).
  std::vector<std::string> uncapturable_handlers(const std::vector<Event>& events) const;

  /// Calls close() on every plugin once (errors are collected, not thrown, so every plugin gets closed) and
  /// returns the error messages; then drops the handlers, which are the plugins' code. Later fire() calls throw.
  std::vector<std::string> close();
  bool closed() const { return closed_; }

  /// When set, every plugin call that runs is also passed here as "<plugin id>/<event>".
  void set_trace(std::function<void(const std::string&)> sink) { trace_ = std::move(sink); }

 private:
  // One handler, resolved to this build's event, with the entry it belongs to.
  struct Subscription {
    std::size_t entry;
    Event event;
    Subscriptions::Match match;
    Subscriptions::Handler handler;
  };
  void order_dispatch();

  State& state_;
  Logger& logger_;
  std::vector<EngineEntry> entries_;
  std::vector<Subscription> subscriptions_;
  // Per event (by this build's number), the indices into subscriptions_ in the order they run.
  std::vector<std::vector<std::size_t>> dispatch_;
  std::function<void(const std::string&)> trace_;
  bool closed_ = false;
};

}  // namespace baton
