#pragma once
// A registry of one kind of component (models, datasets, optimizers, ...): factories by name, each with where it
// came from. baton's built-ins register at start-up; a plugin library adds its own when it is loaded (BATON_COMPONENTS
// in baton/components.h), so `[model] name = "my_resnet"` finds a model that baton never heard of. No LibTorch here:
// the factory type carries whatever the kind builds.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/export.h"

namespace baton {

/// Where registrations come from while a library's registration function runs ("built-in" otherwise). The loader
/// sets it; a registry stamps every entry added meanwhile with it.
struct BATON_API ComponentOrigin {
  std::string library = "built-in";  // the library file, or "built-in"
  std::string version;               // the library's version (its plugin info), or baton's
  std::shared_ptr<void> keep_loaded; // holds the library for as long as the registry has its factories

  static const ComponentOrigin& current();
};

/// Makes an origin current for as long as it lives.
class BATON_API ComponentOriginScope {
 public:
  explicit ComponentOriginScope(ComponentOrigin origin);
  ~ComponentOriginScope();
  ComponentOriginScope(const ComponentOriginScope&) = delete;
  ComponentOriginScope& operator=(const ComponentOriginScope&) = delete;

 private:
  ComponentOrigin previous_;
};

template <class Factory>
class Registry {
 public:
  struct Entry {
    std::string name;
    std::string description;
    Factory factory;
    ComponentOrigin origin;
  };

  /// `kind` names the registry in messages: "model", "dataset", ...
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  /// Adds a factory. A name already taken is an error naming both origins, whichever library comes second: two
  /// plugins must not quietly decide which "resnet" a config gets.
  void add(const std::string& name, std::string description, Factory factory) {
    if (name.empty()) throw Error("a " + kind_ + " needs a non-empty name");
    const ComponentOrigin& origin = ComponentOrigin::current();
    if (auto it = entries_.find(name); it != entries_.end())
      throw Error(kind_ + " '" + name + "' from " + origin.library + " is already registered by " +
                  it->second.origin.library);
    entries_.emplace(name, Entry{name, std::move(description), std::move(factory), origin});
  }

  const Entry* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }

  /// The names, sorted, as the message for an unknown name lists them.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }
  std::vector<const Entry*> entries() const {
    std::vector<const Entry*> out;
    for (const auto& [name, entry] : entries_) out.push_back(&entry);
    return out;
  }
  const std::string& kind() const { return kind_; }

  /// "unknown model 'resnet'; registered: convnet, mlp (a plugin library registers more: load it with [[plugins]])"
  std::string unknown(const std::string& name) const {
    std::string list;
    for (const auto& known : names()) list += (list.empty() ? "" : ", ") + known;
    return "unknown " + kind_ + " '" + name + "'; registered: " + (list.empty() ? "(none)" : list) +
           " (a plugin library that registers more is loaded with [[plugins]])";
  }

 private:
  std::string kind_;
  std::map<std::string, Entry> entries_;
};

}  // namespace baton
