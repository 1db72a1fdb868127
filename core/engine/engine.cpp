#include "engine/engine.h"

#include <exception>
#include <string>

#include <ATen/record_function.h>

namespace baton {

void collect_declarations(const Plugin& plugin, const std::string& id, Declarations& into) {
  call_plugin([&] { plugin.declare(into); }, [&] { return "plugin '" + id + "' failed to declare"; });
}

Engine::Engine(State& state, Logger& logger) : state_(state), logger_(logger), dispatch_(kEventCount) {}

void Engine::add(EngineEntry entry) {
  if ((entry.algorithm == nullptr) == (entry.callback == nullptr))
    throw PluginError("plugin '" + entry.id + "' must be exactly one of an algorithm or a callback");
  Plugin* plugin = entry.algorithm ? static_cast<Plugin*>(entry.algorithm) : static_cast<Plugin*>(entry.callback);
  Subscriptions subscribed;
  call_plugin([&] { plugin->subscribe(subscribed); },
              [&] { return "plugin '" + entry.id + "' failed to subscribe"; });

  // Resolved here, by name, against this build's list: the plugin's own Event numbers may be another list's.
  const std::size_t index = entries_.size();
  std::vector<Subscription> resolved;
  for (const auto& s : subscribed.entries()) {
    const auto event = parse_event(s.event);
    if (!event)
      throw PluginError("plugin '" + entry.id + "' subscribes to event '" + s.event +
                        "', which this baton does not have (was it built against a newer baton SDK?)");
    if (!s.handler)
      throw PluginError("plugin '" + entry.id + "' subscribes to event " + s.event + " with an empty handler");
    resolved.push_back(Subscription{index, *event, s.match, s.handler});
  }
  entries_.push_back(std::move(entry));
  for (auto& s : resolved) subscriptions_.push_back(std::move(s));
  order_dispatch();
}

void Engine::order_dispatch() {
  for (std::size_t e = 0; e < kEventCount; ++e) {
    const auto event = static_cast<Event>(e);
    auto& order = dispatch_[e];
    order.clear();
    auto append_entry = [&](std::size_t entry) {
      for (std::size_t i = 0; i < subscriptions_.size(); ++i)
        if (subscriptions_[i].entry == entry && subscriptions_[i].event == event) order.push_back(i);
    };
    auto append_algorithms = [&] {
      // Composer's rule: after_* events unwind in reverse so paired before/after work nests properly.
      if (is_after_event(event)) {
        for (std::size_t i = entries_.size(); i-- > 0;)
          if (entries_[i].algorithm) append_entry(i);
      } else {
        for (std::size_t i = 0; i < entries_.size(); ++i)
          if (entries_[i].algorithm) append_entry(i);
      }
    };
    auto append_callbacks = [&] {
      for (std::size_t i = 0; i < entries_.size(); ++i)
        if (entries_[i].callback) append_entry(i);
    };
    // On init callbacks come first, so loggers and callbacks are set up before any algorithm acts.
    if (event == Event::init) {
      append_callbacks();
      append_algorithms();
    } else {
      append_algorithms();
      append_callbacks();
    }
  }
}

void Engine::set_capturable(const std::string& id) {
  for (auto& e : entries_)
    if (e.id == id) e.capturable = true;
}

std::vector<std::string> Engine::uncapturable_handlers(const std::vector<Event>& events) const {
  std::vector<std::string> out;
  for (const Event event : events)
    for (std::size_t i : dispatch_[static_cast<std::size_t>(event)]) {
      const EngineEntry& e = entries_[subscriptions_[i].entry];
      if (!e.internal && !e.capturable) out.push_back(e.id + "/" + std::string(event_name(event)));
    }
  return out;
}

void Engine::fire(Event event, EngineSide side) {
  if (closed_)
    throw Error("event " + std::string(event_name(event)) + " fired after the engine was closed");
  // The event, and each handler within it, as LibTorch's user scopes "event/<name>" and "plugin/<id>/<name>": a
  // profiler (the profiler plugin, LibTorch's own) sees where the events' time goes, beside the operators. The names
  // are built only while one listens.
  RECORD_USER_SCOPE("event/" + std::string(event_name(event)));
  for (std::size_t i : dispatch_[static_cast<std::size_t>(event)]) {
    const Subscription& s = subscriptions_[i];
    if (side != EngineSide::all && entries_[s.entry].capturable != (side == EngineSide::capturable)) continue;
    const std::string& id = entries_[s.entry].id;
    if (s.match && !call_plugin([&] { return s.match(state_); }, [&] {
          return "plugin '" + id + "' failed in match() on event " + std::string(event_name(event));
        }))
      continue;
    RECORD_USER_SCOPE("plugin/" + id + "/" + std::string(event_name(event)));
    if (entries_[s.entry].internal) {
      s.handler(state_, logger_);
      continue;
    }
    if (trace_) trace_(id + "/" + std::string(event_name(event)));
    call_plugin([&] { s.handler(state_, logger_); },
                [&] { return "plugin '" + id + "' failed on event " + std::string(event_name(event)); });
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
  // The handlers are code (and captures) of the plugins' libraries; none runs again, so none is kept past here.
  for (auto& order : dispatch_) order.clear();
  subscriptions_.clear();
  return errors;
}

}  // namespace baton
