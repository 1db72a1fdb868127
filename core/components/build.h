#pragma once
// Building a run-config section's component through its registry, the one way every kind is built (cli/assembly.cpp, and
// the tests of each kind's keys).
#include <exception>
#include <string>

#include "baton/components.h"
#include "config/config.h"  // ComponentSection

namespace baton {

/// The component `section` names, from `registry`: an unknown name is a ConfigError at "<key>.name" listing the
/// registered ones; the factory reads its keys through the section's view, and a key it leaves unread is an
/// error "unknown key 'x' for <kind> '<name>'". A factory's failure (possibly a plugin library's code) becomes an
/// Error naming the component and where it came from, as any call into a plugin is guarded; its ConfigErrors
/// pass as they are.
template <class Factory, class... Args>
auto build_component(const Registry<Factory>& registry, const ComponentSection& section, const std::string& key,
                     const Args&... args) {
  const auto* entry = registry.find(section.name);
  if (entry == nullptr)
    throw ConfigError(section.config.where("name"), key + ".name", registry.unknown(section.name));
  const PluginConfig view = section.config.owned_by(registry.kind() + " '" + section.name + "'");
  const std::string what = registry.kind() + " '" + section.name + "' (" + entry->origin.library + ")";
  try {
    auto product = entry->factory(view, args...);
    view.reject_unread();
    return product;
  } catch (const ConfigError& e) {
    throw ConfigError(e);  // a copy made here: the caught object's type may live in a plugin library
  } catch (const std::exception& e) {
    throw Error(what + " failed: " + e.what());
  } catch (...) {
    throw Error(what + " failed: it threw something that is not a std::exception");
  }
}

}  // namespace baton
