#include "baton_test.h"

#include <string>
#include <vector>

#include "loader/loader_test_support.h"

using namespace baton::loader_test;

// Finding plugins: discovery, the search path, and the file and folder permissions that a loadable plugin needs.
TEST_SUITE("loader") {
  TEST_CASE("discover lists the fixtures with their info, sorted, and reports the broken ones") {
    ScopedEnv no_env("BATON_PLUGIN_PATH", std::nullopt);
    std::vector<std::string> errors;
    const auto infos = PluginLoader(LoaderOptions{{kFixtures.string()}, false}).discover(&errors);
    CHECK(std::is_sorted(infos.begin(), infos.end(),
                         [](const PluginInfo& a, const PluginInfo& b) { return a.name < b.name; }));

    const PluginInfo* good = find_info(infos, "fixture_good");
    REQUIRE(good != nullptr);
    CHECK(good->path == fixture("fixture_good"));
    CHECK(good->version == "1.2.3");
    CHECK(good->abi_version == BATON_PLUGIN_ABI_VERSION);
    CHECK(good->kind == "algorithm");
    const PluginInfo* callback = find_info(infos, "fixture_callback");
    REQUIRE(callback != nullptr);
    CHECK(callback->version == "0.4.0");
    CHECK(callback->kind == "callback");
    const PluginInfo* library = find_info(infos, "fixture_components");
    REQUIRE(library != nullptr);
    CHECK(library->kind == "components");
    // Inspection creates nothing, so a plugin whose factory throws is still listed.
    CHECK(find_info(infos, "fixture_throws") != nullptr);
    CHECK(find_info(infos, "fixture_event_throws") != nullptr);
    CHECK(find_info(infos, "fixture_wrong_abi") == nullptr);

    CHECK(any_contains(errors, fixture("not_a_library"), "cannot load"));
    CHECK(any_contains(errors, fixture("fixture_no_entry"), "exports no baton_plugin_entry"));
    CHECK(any_contains(errors, fixture("fixture_wrong_abi"), "plugin ABI version mismatch"));
    CHECK(any_contains(errors, fixture("fixture_wrong_torch"), "built against LibTorch 0.1.0"));
    CHECK(any_contains(errors, fixture("fixture_wrong_cxxabi"), "C++ ABI mismatch"));
  }

  TEST_CASE("discover keeps the first of two plugins with the same name and reports the other") {
    ScopedEnv no_env("BATON_PLUGIN_PATH", std::nullopt);
    const fs::path copy = copy_fixture("fixture_good", "loader_duplicate");
    std::vector<std::string> errors;
    const auto infos =
        PluginLoader(LoaderOptions{{kFixtures.string(), copy.parent_path().string()}, false}).discover(&errors);
    CHECK(std::count_if(infos.begin(), infos.end(), [](const PluginInfo& i) { return i.name == "fixture_good"; }) == 1);
    REQUIRE(find_info(infos, "fixture_good") != nullptr);
    CHECK(find_info(infos, "fixture_good")->path == fixture("fixture_good"));
    CHECK(any_contains(errors, copy.string() + ": duplicate plugin 'fixture_good'", fixture("fixture_good")));
  }

  TEST_CASE("resolve finds <name>.so through LoaderOptions::search_paths in order") {
    ScopedEnv no_env("BATON_PLUGIN_PATH", std::nullopt);
    const fs::path copy = copy_fixture("fixture_good", "loader_resolve");
    const std::string missing = (kFixtures / "no_such_folder").string();
    PluginLoader loader(LoaderOptions{{missing, copy.parent_path().string(), kFixtures.string()}, false});
    CHECK(loader.resolve("fixture_good") == copy.string());  // the earlier folder wins
    CHECK(loader.resolve("fixture_callback") == fixture("fixture_callback"));

    const std::string message = plugin_error([&] { loader.resolve("no_such_plugin"); });
    CHECK(contains(message, "plugin 'no_such_plugin' not found: no no_such_plugin.so in the plugin search path"));
    CHECK(contains(message, "\n  " + missing));
    CHECK(contains(message, "\n  " + copy.parent_path().string()));
    CHECK(contains(message, "\n  " + kFixtures.string()));
    // A misspelt name gets the nearest names there and the command that lists them (issue 24 §11).
    const std::string typo = plugin_error([&] { loader.resolve("fixture_goood"); });
    CHECK(contains(typo, "plugin 'fixture_goood' not found (did you mean 'fixture_good'?): no fixture_goood.so in "
                         "the plugin search path ('baton plugins' lists the plugins there); searched:"));
  }

  TEST_CASE("resolve finds plugins through BATON_PLUGIN_PATH, before the configured folders") {
    const fs::path copy = copy_fixture("fixture_good", "loader_env");
    ScopedEnv env("BATON_PLUGIN_PATH", "/no/such/dir::" + kFixtures.string() + ":");
    PluginLoader loader(LoaderOptions{{copy.parent_path().string()}, false});
    CHECK(loader.resolve("fixture_good") == fixture("fixture_good"));

    const auto paths = loader.search_paths();
    REQUIRE(paths.size() >= 3);
    // Empty entries ("::", trailing ':') add nothing; order: [built-in], environment, options.
    const std::vector<std::string> tail(paths.end() - 3, paths.end());
    CHECK(tail == std::vector<std::string>{"/no/such/dir", kFixtures.string(), copy.parent_path().string()});
  }

  TEST_CASE("search_paths starts with the built-in folder beside the executable, when it exists, and has no repeats") {
    ScopedEnv no_env("BATON_PLUGIN_PATH", std::nullopt);
    const fs::path builtin = fs::path(BATON_BINARY_DIR) / "lib" / "baton" / "plugins";
    const auto paths = PluginLoader(LoaderOptions{{"/a", "/b", "/a/"}, false}).search_paths();
    std::vector<std::string> expected;
    if (fs::is_directory(builtin)) expected.push_back(fs::canonical(builtin).string());
    expected.insert(expected.end(), {"/a", "/b"});
    CHECK(paths == expected);
  }

  TEST_CASE("executable_dir is the folder of the test binary") {
    CHECK(fs::equivalent(baton::executable_dir(), fs::path(BATON_BINARY_DIR) / "bin"));
  }

  TEST_CASE("a plugin file writable by group or others is refused unless allowed") {
    const fs::path file = copy_fixture("fixture_good", "loader_insecure_file");
    fs::permissions(file, fs::perms(0666));
    const std::string message = inspect_error(file.string());
    CHECK(contains(message, "refusing to load " + file.string()));
    CHECK(contains(message, "file " + file.string() + " is writable by others (mode 0666)"));
    CHECK(contains(message, "[plugin_search] allow_insecure = true"));
    CHECK(contains(message, "--allow-insecure-plugins"));

    LoadedPlugin loaded = PluginLoader(LoaderOptions{{}, true}).load(file.string(), PluginConfig());
    CHECK(loaded.info.name == "fixture_good");
  }

  TEST_CASE("group write is accepted for our own group only") {
    const fs::path file = copy_fixture("fixture_good", "loader_group_write");
    fs::permissions(file, fs::perms(0664));
    REQUIRE(::chown(file.c_str(), static_cast<uid_t>(-1), getegid()) == 0);
    CHECK(PluginLoader().inspect(file.string()).name == "fixture_good");  // user-private group, umask 002
    if (geteuid() != 0) {
      MESSAGE("not root: cannot give the file another group; foreign-group case skipped");
      return;
    }
    REQUIRE(::chown(file.c_str(), static_cast<uid_t>(-1), getegid() + 4242) == 0);
    CHECK(contains(inspect_error(file.string()), "is writable by another group (mode 0664)"));
  }

  TEST_CASE("a plugin in a folder writable by others is refused unless allowed") {
    const fs::path file = copy_fixture("fixture_good", "loader_insecure_folder");
    const fs::path dir = file.parent_path();
    fs::permissions(dir, fs::perms(0777));
    const std::string message = inspect_error(file.string());
    CHECK(contains(message, "folder " + dir.string() + " is writable by others (mode 0777)"));
    CHECK(contains(message, "--allow-insecure-plugins"));
    CHECK(PluginLoader(LoaderOptions{{}, true}).inspect(file.string()).name == "fixture_good");
    fs::permissions(dir, fs::perms(0755));
    CHECK(PluginLoader().inspect(file.string()).name == "fixture_good");
  }

  TEST_CASE("a symlink to a plugin in a folder writable by others is refused naming the link and its target") {
    const fs::path file = copy_fixture("fixture_good", "loader_insecure_link_target");
    fs::permissions(file.parent_path(), fs::perms(0777));
    const fs::path link = baton::test::scratch_dir("loader_insecure_link") / "plugin.so";
    fs::create_symlink(file, link);
    CHECK(contains(inspect_error(link.string()), "refusing to load " + link.string() + " (a link to " +
                                                     file.string() + "): its folder " + file.parent_path().string() +
                                                     " is writable by others (mode 0777)"));
    fs::permissions(file.parent_path(), fs::perms(0755));
  }

  TEST_CASE("a plugin file owned by another user is refused unless allowed") {
    const fs::path file = copy_fixture("fixture_good", "loader_foreign_owner");
    const uid_t stranger = 54321;
    const uid_t me = ::geteuid();
    // Only root (or a user with CAP_CHOWN) can give a file away; elsewhere this case cannot be set up.
    if (::chown(file.c_str(), stranger, static_cast<gid_t>(-1)) != 0) {
      MESSAGE("skipped: cannot chown as uid " << me);
      return;
    }
    const std::string message = inspect_error(file.string());
    CHECK(contains(message, "file " + file.string() + " is owned by"));
    CHECK(contains(message, "uid 54321"));
    CHECK(contains(message, "neither you nor root"));
    CHECK(PluginLoader(LoaderOptions{{}, true}).inspect(file.string()).name == "fixture_good");
  }
}
