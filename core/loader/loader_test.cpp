#include "baton_test.h"

#include <string>
#include <vector>

#include <torch/version.h>

#include "baton/components.h"
#include "engine/engine.h"
#include "loader/loader_test_support.h"

using namespace baton::loader_test;


TEST_SUITE("loader") {
  TEST_CASE("a missing file is reported as not found, naming the path") {
    const std::string path = (kFixtures / "no_such_plugin.so").string();
    CHECK(inspect_error(path) == "plugin file not found: " + path);
    CHECK(load_error(path) == "plugin file not found: " + path);
  }

  TEST_CASE("a file that is not a shared library is refused as one, whatever its size") {
    const std::string path = fixture("not_a_library");
    CHECK(inspect_error(path) == "cannot load " + path + ": " + path + ": invalid ELF header (not a shared library)");
    // Under 64 bytes the dynamic loader itself would say "file too short".
    const fs::path dir = baton::test::scratch_dir("loader_short_file");
    for (const std::string text : {"", "hi\n", "\x7f" "EL"}) {
      const fs::path file = dir / "short.so";
      baton::test::write_bytes(file, text);
      fs::permissions(file, fs::perms(0644));
      CHECK(inspect_error(file.string()) ==
            "cannot load " + file.string() + ": " + file.string() + ": invalid ELF header (not a shared library)");
    }
  }

  TEST_CASE("a folder given as a plugin file is refused") {
    const std::string path = kFixtures.string();
    CHECK(inspect_error(path) == "cannot load " + path + ": not a regular file");
  }

  TEST_CASE("a shared library without the entry point is not a baton plugin") {
    const std::string path = fixture("fixture_no_entry");
    CHECK(inspect_error(path) == path + " is not a baton plugin: it exports no baton_plugin_entry");
  }

  TEST_CASE("an info struct smaller than this SDK's is refused") {
    const std::string path = fixture("fixture_small_struct");
    const std::string message = inspect_error(path);
    CHECK(contains(message, path + ": plugin info struct too small"));
    // ABI 4's struct: 2 x uint32 + 4 pointers + 2 ints + 2 function pointers = 8 + 32 + 8 + 16 on LP64; the fixture
    // stops before the function pointers.
    CHECK(contains(message, "(48 bytes, expected at least 64)"));
  }

  TEST_CASE("a plugin built for another SDK ABI version is refused with both numbers") {
    const std::string path = fixture("fixture_wrong_abi");
    const std::string got = std::to_string(BATON_PLUGIN_ABI_VERSION + 1);
    const std::string supported = std::to_string(BATON_PLUGIN_ABI_VERSION);
    CHECK(contains(inspect_error(path), path + ": plugin ABI version mismatch: got " + got + ", supported " + supported));
  }

  TEST_CASE("a plugin built against another LibTorch major.minor is refused with both versions") {
    const std::string path = fixture("fixture_wrong_torch");
    CHECK(contains(inspect_error(path),
                   path + ": built against LibTorch 0.1.0, this baton uses " + std::string(TORCH_VERSION)));
  }

  TEST_CASE("a plugin built with the other _GLIBCXX_USE_CXX11_ABI is refused") {
    const std::string path = fixture("fixture_wrong_cxxabi");
    const int ours = BATON_CXX11_ABI_VALUE;
    const std::string message = inspect_error(path);
    CHECK(contains(message, path + ": C++ ABI mismatch: built with _GLIBCXX_USE_CXX11_ABI=" +
                                std::to_string(1 - ours) + ", this baton uses _GLIBCXX_USE_CXX11_ABI=" +
                                std::to_string(ours)));
  }

  TEST_CASE("an unknown plugin kind is refused") {
    const std::string path = fixture("fixture_bad_kind");
    CHECK(contains(inspect_error(path), path + ": invalid plugin kind 7"));
  }

  TEST_CASE("a null create function is refused at inspection") {
    const std::string path = fixture("fixture_null_create");
    CHECK(inspect_error(path) == path + ": plugin 'fixture_null_create' has no create function (null)");
  }

  TEST_CASE("a create function returning null is refused at load") {
    const std::string path = fixture("fixture_null_object");
    CHECK(PluginLoader().inspect(path).name == "fixture_null_object");  // the info itself is fine
    CHECK(load_error(path) == "plugin 'fixture_null_object' (" + path + "): create() returned no object (null)");
  }

  TEST_CASE("an object that is not of its declared kind is refused") {
    const std::string path = fixture("fixture_kind_mismatch");
    CHECK(load_error(path) == "plugin 'fixture_kind_mismatch' (" + path +
                                  ") declares itself a callback but is not a baton::Callback");
  }

  TEST_CASE("a factory that throws becomes a PluginError naming the plugin and file") {
    const std::string path = fixture("fixture_throws");
    CHECK(load_error(path) == "plugin 'fixture_throws' (" + path + ") failed to start: boom");
  }

  TEST_CASE("a ConfigError from the factory passes through unchanged") {
    const std::string path = fixture("fixture_good");
    PluginLoader loader;
    // Wrong type: thrown by PluginConfig::get inside the plugin's constructor.
    CHECK_THROWS_AS(loader.load(path, PluginConfig::from_toml("threshold = \"three\"", "fixture_good", "run.toml")),
                    ConfigError);
    // Out of range: thrown by the plugin itself through PluginConfig::fail.
    try {
      loader.load(path, PluginConfig::from_toml("threshold = 0", "fixture_good", "run.toml"));
      FAIL("threshold = 0 was accepted");
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      CHECK(contains(what, "run.toml"));
      CHECK(contains(what, "threshold"));
      CHECK(contains(what, "must be >= 1, got 0"));
    }
  }

  TEST_CASE("fixture_good loads, reads its config and runs") {
    const std::string path = fixture("fixture_good");
    LoadedPlugin loaded = PluginLoader().load(path, PluginConfig::from_toml("threshold = 3", "fixture_good"));
    CHECK(loaded.info.path == path);
    CHECK(loaded.info.name == "fixture_good");
    CHECK(loaded.info.version == "1.2.3");
    CHECK(loaded.info.description == "test algorithm that counts batch_end calls");
    CHECK(loaded.info.kind == "algorithm");
    CHECK(loaded.info.abi_version == BATON_PLUGIN_ABI_VERSION);
    CHECK(loaded.info.torch_version == TORCH_VERSION);
    CHECK(loaded.info.cxx11_abi == BATON_CXX11_ABI_VALUE);
    CHECK(loaded.id == "fixture_good");
    REQUIRE(loaded.algorithm != nullptr);
    CHECK(loaded.callback == nullptr);
    CHECK(static_cast<baton::Plugin*>(loaded.algorithm) == loaded.plugin.get());

    baton::State state;
    RecordingLogger logger;
    CHECK(loaded.algorithm->match(baton::Event::batch_end, state));
    CHECK_FALSE(loaded.algorithm->match(baton::Event::batch_start, state));
    // threshold = 3: the stop request comes with the third call, not before.
    loaded.algorithm->apply(baton::Event::batch_end, state, logger);
    loaded.algorithm->apply(baton::Event::batch_end, state, logger);
    CHECK_FALSE(state.stop_requested());
    loaded.algorithm->apply(baton::Event::batch_end, state, logger);
    CHECK(state.stop_requested());
    CHECK(state.stop_reason() == "fixture_good: threshold 3 reached");
    REQUIRE(logger.metrics.size() == 3);
    CHECK(logger.metrics[0] == std::make_pair(std::string("fixture_good/calls"), 1.0));
    CHECK(logger.metrics[2] == std::make_pair(std::string("fixture_good/calls"), 3.0));
  }

  TEST_CASE("an ABI-3 plugin is refused with a request to rebuild it against this SDK") {
    // ABI 3's Callback vtable followed events.def, and the engine called it by number; ABI 4 plugins subscribe by
    // name. An ABI-3 plugin cannot be called safely, so it is refused before anything of it runs.
    const std::string path = fixture("fixture_abi3");
    const std::string expected = path + ": plugin ABI version mismatch: got 3, supported " +
                                 std::to_string(BATON_PLUGIN_ABI_VERSION) +
                                 " (rebuild the plugin against this baton's SDK)";
    CHECK(BATON_PLUGIN_ABI_VERSION == 5u);
    CHECK(inspect_error(path) == expected);
    CHECK(load_error(path) == expected);
  }

  TEST_CASE("an ABI-4 plugin is refused with a request to rebuild it against this SDK") {
    // ABI 4's State held the run's facts and the plugins' declarations as members, at offsets ABI 5 no longer has:
    // an ABI-4 plugin would read the wrong members, so it is refused before anything of it runs.
    const std::string path = fixture("fixture_abi4");
    const std::string expected = path + ": plugin ABI version mismatch: got 4, supported 5" +
                                 " (rebuild the plugin against this baton's SDK)";
    CHECK(inspect_error(path) == expected);
    CHECK(load_error(path) == expected);
  }

  TEST_CASE("a components library registers its components once, stamped with its file and version") {
    const std::string path = fixture("fixture_components");
    CHECK(baton::components().models.find("fixture_linear") == nullptr);
    LoadedPlugin loaded = PluginLoader().load(path, PluginConfig::from_toml("", "fixture_components"));
    CHECK(loaded.info.kind == "components");
    CHECK(loaded.plugin == nullptr);
    CHECK(loaded.algorithm == nullptr);
    CHECK(loaded.callback == nullptr);
    const auto* model = baton::components().models.find("fixture_linear");
    REQUIRE(model != nullptr);
    CHECK(model->origin.library == path);
    CHECK(model->origin.version == "1.2.3");
    CHECK(model->description == "a linear map of the flattened input");
    REQUIRE(baton::components().datasets.find("fixture_points") != nullptr);
    // The factory is the library's code and works through the registry.
    baton::DataSpec spec;
    spec.input_shape = {2};
    spec.num_classes = 2;
    auto module = model->factory(PluginConfig(), spec);
    CHECK(module.ptr()->parameters().size() == 2);
    // Loading it again (a second run in the same process) registers nothing twice.
    CHECK_NOTHROW(PluginLoader().load(path, PluginConfig()));
    CHECK_NOTHROW(PluginLoader().register_components(path));
    // It reads no keys, so any key in its table is unknown.
    const PluginConfig with_key = PluginConfig::from_toml("depth = 3", "fixture_components", "run.toml");
    try {
      PluginLoader().load(path, with_key);
      FAIL("no error for a key of a components library");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) ==
            "run.toml:1:1: plugins.fixture_components.depth: unknown key 'depth' for plugin 'fixture_components'");
    }
  }

  TEST_CASE("fixture_good keeps its count in state_dict and restores it") {
    PluginLoader loader;
    const std::string path = fixture("fixture_good");
    LoadedPlugin first = loader.load(path, PluginConfig::from_toml("threshold = 5", "fixture_good"));
    baton::State state;
    RecordingLogger logger;
    first.algorithm->apply(baton::Event::batch_end, state, logger);
    first.algorithm->apply(baton::Event::batch_end, state, logger);
    baton::StateDict saved;
    first.plugin->state_dict(saved);
    CHECK(saved.get_int("calls") == 2);
    CHECK(saved.get_int("threshold") == 5);

    LoadedPlugin second = loader.load(path, PluginConfig::from_toml("threshold = 5", "fixture_good"));
    second.plugin->load_state_dict(saved);
    second.algorithm->apply(baton::Event::batch_end, state, logger);
    REQUIRE(logger.metrics.size() == 3);
    CHECK(logger.metrics[2].second == 3.0);  // continues from 2
  }

  TEST_CASE("an unknown plugin key is rejected, naming the key") {
    try {
      PluginLoader().load(fixture("fixture_good"), PluginConfig::from_toml("threshhold = 3", "fixture_good", "run.toml"));
      FAIL("the misspelt key was accepted");
    } catch (const ConfigError& e) {
      CHECK(contains(e.what(), "threshhold"));
      CHECK(contains(e.what(), "run.toml"));
    }
  }

  TEST_CASE("an exception thrown inside a loaded plugin on an event names the plugin and the event") {
    // The whole-program case (baton train with this fixture) is in tests/cli_test.cpp; this one checks the
    // conversion itself, with the exception object created by code in the plugin's library.
    LoadedPlugin loaded = PluginLoader().load(fixture("fixture_event_throws"), PluginConfig());
    baton::State state;
    RecordingLogger logger;
    baton::Engine engine(state, logger);
    engine.add(baton::EngineEntry{loaded.id, loaded.algorithm, loaded.callback});
    engine.fire(baton::Event::batch_start);  // it throws on batch_end only
    CHECK(plugin_error([&] { engine.fire(baton::Event::batch_end); }) ==
          "plugin 'fixture_event_throws' failed on event batch_end: fixture_event_throws: failure on batch_end");
    CHECK(engine.close().empty());
  }

  TEST_CASE("a plugin given by path is named after its info in config errors") {
    // The config knows a plugin loaded by `path` only by that path; errors name the plugin instead.
    const std::string path = fixture("fixture_good");
    try {
      PluginLoader().load(path, PluginConfig::from_toml("threshold = 2\nthreshhold = 3", path, "run.toml"));
      FAIL("the misspelt key was accepted");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()) ==
            "run.toml:2:1: plugins.fixture_good.threshhold: unknown key 'threshhold' for plugin 'fixture_good'; it reads "
            "threshold");
    }
  }

  TEST_CASE("fixture_callback loads as a callback and receives events") {
    LoadedPlugin loaded = PluginLoader().load(fixture("fixture_callback"), PluginConfig());
    CHECK(loaded.info.kind == "callback");
    CHECK(loaded.algorithm == nullptr);
    REQUIRE(loaded.callback != nullptr);
    baton::State state;
    RecordingLogger logger;
    loaded.callback->run_event(baton::Event::batch_end, state, logger);
    loaded.callback->run_event(baton::Event::batch_end, state, logger);
    loaded.callback->run_event(baton::Event::epoch_end, state, logger);  // not overridden: the empty default
    REQUIRE(logger.metrics.size() == 2);
    CHECK(logger.metrics[1] == std::make_pair(std::string("fixture_callback/batch_end"), 2.0));
    loaded.callback->run_event(baton::Event::fit_end, state, logger);
    CHECK(logger.lines == std::vector<std::string>{"fixture_callback: fit_end"});
  }

  TEST_CASE("a loaded callback is called on the events its class overrides, and on no other") {
    // BATON_PLUGIN's factory knows the class, so the callback subscribes to its five methods only.
    LoadedPlugin loaded = PluginLoader().load(fixture("fixture_callback"), PluginConfig());
    baton::State state;
    RecordingLogger logger;
    baton::Engine engine(state, logger);
    std::vector<std::string> trace;
    engine.set_trace([&](const std::string& line) { trace.push_back(line); });
    engine.add(baton::EngineEntry{loaded.id, loaded.algorithm, loaded.callback});
    for (baton::Event e : baton::kAllEvents) engine.fire(e);
    CHECK(trace == std::vector<std::string>{"fixture_callback/batch_end", "fixture_callback/fit_end",
                                            "fixture_callback/eval_start", "fixture_callback/eval_batch_end",
                                            "fixture_callback/eval_end"});
    CHECK(logger.lines == std::vector<std::string>{"fixture_callback: fit_end"});
    CHECK(engine.close().empty());
  }

  TEST_CASE("the library stays loaded while an object from it lives, and is unloaded after") {
    // A private copy, so no other test's handle keeps this file mapped.
    const std::string path = copy_fixture("fixture_good", "loader_lifetime").string();
    CHECK_FALSE(library_is_loaded(path));
    std::shared_ptr<baton::Plugin> kept;
    baton::Algorithm* algorithm = nullptr;
    {
      auto loader = std::make_unique<PluginLoader>();
      LoadedPlugin loaded = loader->load(path, PluginConfig::from_toml("threshold = 1", "fixture_good"));
      kept = loaded.plugin;
      algorithm = loaded.algorithm;
      loader.reset();
    }  // the loader and the LoadedPlugin are gone
    CHECK(library_is_loaded(path));
    baton::State state;
    RecordingLogger logger;
    algorithm->apply(baton::Event::batch_end, state, logger);  // code in the library still runs
    CHECK(state.stop_requested());
    REQUIRE(logger.metrics.size() == 1);
    CHECK(logger.metrics[0].second == 1.0);
    kept.reset();
    CHECK_FALSE(library_is_loaded(path));
  }
}
