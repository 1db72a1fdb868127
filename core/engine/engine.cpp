#include "engine/engine.h"

#include <exception>
#include <string>

namespace baton {

Engine::Engine(State& state, Logger& logger) : state_(state), logger_(logger) {}

void Engine::add(EngineEntry entry) {
  if ((entry.algorithm == nullptr) == (entry.callback == nullptr))
    throw PluginError("plugin '" + entry.id + "' must be exactly one of an algorithm or a callback");
  entries_.push_back(std::move(entry));
}

void Engine::call(const EngineEntry& entry, Event event) {
  if (trace_) trace_(entry.id + "/" + std::string(event_name(event)));
  call_plugin(
      [&] {
        if (entry.algorithm)
          entry.algorithm->apply(event, state_, logger_);
        else
          entry.callback->run_event(event, state_, logger_);
      },
      [&] { return "plugin '" + entry.id + "' failed on event " + std::string(event_name(event)); });
}

void Engine::fire(Event event) {
  if (closed_)
    throw Error("event " + std::string(event_name(event)) + " fired after the engine was closed");

  auto run_algorithms = [&] {
    auto matches = [&](const EngineEntry& e) {
      return call_plugin([&] { return e.algorithm->match(event, state_); },
                         [&] { return "plugin '" + e.id + "' failed in match() on event " + std::string(event_name(event)); });
    };
    // Composer's rule: after_* events unwind in reverse so paired before/after work nests properly.
    if (is_after_event(event)) {
      for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
        if (it->algorithm && matches(*it)) call(*it, event);
    } else {
      for (const auto& e : entries_)
        if (e.algorithm && matches(e)) call(e, event);
    }
  };
  auto run_callbacks = [&] {
    for (const auto& e : entries_)
      if (e.callback) call(e, event);
  };

  // On init callbacks come first, so loggers and callbacks are set up before any algorithm acts.
  if (event == Event::init) {
    run_callbacks();
    run_algorithms();
  } else {
    run_algorithms();
    run_callbacks();
  }
}

std::vector<std::string> Engine::close() {
  std::vector<std::string> errors;
  if (closed_) return errors;
  closed_ = true;
  for (const auto& e : entries_) {
    Plugin* plugin = e.algorithm ? static_cast<Plugin*>(e.algorithm) : static_cast<Plugin*>(e.callback);
    try {
      call_plugin([&] { plugin->close(); }, [&] { return "plugin '" + e.id + "' failed to close"; });
    } catch (const std::exception& ex) {
      errors.push_back(ex.what());
    }
  }
  return errors;
}

}  // namespace baton
