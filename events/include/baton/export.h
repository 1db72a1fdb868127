#pragma once
// Symbol visibility. Everything in libbaton is hidden unless marked BATON_API, so the library's ABI is exactly
// what its public headers declare. Plugins are built with hidden visibility too; the classes they derive from
// (Plugin, Algorithm, Callback) are BATON_API so their typeinfo and vtables resolve to one copy in libbaton.
#if defined(_WIN32)
#define BATON_API __declspec(dllexport)
#define BATON_PLUGIN_EXPORT __declspec(dllexport)
#else
#define BATON_API __attribute__((visibility("default")))
#define BATON_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif
