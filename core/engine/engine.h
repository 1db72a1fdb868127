#pragma once
// The engine dispatches an event to the run's plugins, in Composer's order:
//   init:          callbacks first, then algorithms (so loggers/callbacks see algorithms' setup);
//   other events:  algorithms (those whose match() is true) in configured order, reversed on after_* events,
//                  then callbacks in configured order.
// Each call is traced as "<plugin id>/<event>". A plugin's exception becomes a PluginError naming the plugin
// and the event. After close(), firing an event throws.
#include <functional>
#include <string>
#include <vector>

#include "baton/plugin.h"

#include "baton/export.h"

namespace baton {

struct BATON_API EngineEntry {
  std::string id;
  Algorithm* algorithm = nullptr;
  Callback* callback = nullptr;
};

class BATON_API Engine {
 public:
  Engine(State& state, Logger& logger);

  void add(EngineEntry entry);
  const std::vector<EngineEntry>& entries() const { return entries_; }

  /// Fires one event to every plugin.
  void fire(Event event);

  /// Calls close() on every plugin once (errors are collected, not thrown, so every plugin gets closed) and
  /// returns the error messages. Later fire() calls throw.
  std::vector<std::string> close();
  bool closed() const { return closed_; }

  /// When set, every plugin call is also passed here as "<plugin id>/<event>".
  void set_trace(std::function<void(const std::string&)> sink) { trace_ = std::move(sink); }

 private:
  void call(const EngineEntry& entry, Event event);

  State& state_;
  Logger& logger_;
  std::vector<EngineEntry> entries_;
  std::function<void(const std::string&)> trace_;
  bool closed_ = false;
};

}  // namespace baton
