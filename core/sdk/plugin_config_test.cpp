// Uses only the public header: this translation unit links against the get<T> instantiations compiled in
// plugin_config.cpp, as a plugin does.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "baton/plugin_config.h"

using baton::ConfigError;
using baton::PluginConfig;
using baton::Time;
using baton::TimeUnit;

namespace {

const char* kText = R"(threshold = 3
ratio = 0.25
whole = 2
name = "warm"
enabled = true
start = "100ba"
tags = ["a", "b"]
weights = [1, 0.5]
sizes = [4, 8]
big = 5000000000
schedule = { begin = "1ep", end = "0.5dur" }
)";

PluginConfig sample() { return PluginConfig::from_toml(kText, "warmup", "w.toml"); }

// what() of the ConfigError that f throws; the test fails when none is thrown.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("no ConfigError");
  return "";
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("PluginConfig reads every supported type") {
    const PluginConfig c = sample();
    CHECK(c.plugin_name() == "warmup");
    CHECK(c.get<int>("threshold") == 3);
    CHECK(c.get<std::int64_t>("big") == 5000000000LL);
    CHECK(c.get<double>("ratio") == 0.25);
    CHECK(c.get<double>("whole") == 2.0);  // an integer where a float is expected
    CHECK(c.get<std::string>("name") == "warm");
    CHECK(c.get<bool>("enabled"));
    CHECK(c.get<Time>("start") == Time(100, TimeUnit::batch));
    CHECK(c.get<std::vector<std::string>>("tags") == std::vector<std::string>{"a", "b"});
    CHECK(c.get<std::vector<double>>("weights") == std::vector<double>{1.0, 0.5});
    CHECK(c.get<std::vector<std::int64_t>>("sizes") == std::vector<std::int64_t>{4, 8});
    const PluginConfig schedule = c.get<PluginConfig>("schedule");
    CHECK(schedule.plugin_name() == "warmup");
    CHECK(schedule.get<Time>("begin") == Time(1, TimeUnit::epoch));
    CHECK(schedule.get<Time>("end").str() == "0.5dur");
    CHECK(c.get_or<int>("missing", 7) == 7);
    CHECK(c.get_or<int>("threshold", 7) == 3);
  }

  TEST_CASE("wrong types and missing keys name the plugin, the key and the line") {
    const PluginConfig c = sample();
    CHECK(error_of([&] { c.get<int>("name"); }) ==
          "w.toml:4:8: plugins.warmup.name: expected an integer, got string \"warm\"");
    CHECK(error_of([&] { c.get<std::int64_t>("ratio"); }) ==
          "w.toml:2:9: plugins.warmup.ratio: expected an integer, got float 0.25");
    CHECK(error_of([&] { c.get<bool>("threshold"); }) ==
          "w.toml:1:13: plugins.warmup.threshold: expected a boolean, got integer 3");
    CHECK(error_of([&] { c.get<std::string>("enabled"); }) ==
          "w.toml:5:11: plugins.warmup.enabled: expected a string, got boolean true");
    CHECK(error_of([&] { c.get<double>("name"); }) ==
          "w.toml:4:8: plugins.warmup.name: expected a number, got string \"warm\"");
    CHECK(error_of([&] { c.get<Time>("threshold"); }) ==
          "w.toml:1:13: plugins.warmup.threshold: expected a time string such as \"2ep\", got integer 3");
    CHECK(error_of([&] { c.get<PluginConfig>("tags"); }) ==
          "w.toml:7:8: plugins.warmup.tags: expected a table, got array [\"a\", \"b\"]");
    CHECK(error_of([&] { c.get<std::vector<std::string>>("name"); }) ==
          "w.toml:4:8: plugins.warmup.name: expected an array of strings, got string \"warm\"");
    CHECK(error_of([&] { c.get<std::vector<std::string>>("weights"); }) ==
          "w.toml:8:12: plugins.warmup.weights[0]: expected a string, got integer 1");
    CHECK(error_of([&] { c.get<std::vector<std::int64_t>>("weights"); }) ==
          "w.toml:8:15: plugins.warmup.weights[1]: expected an integer, got float 0.5");
    CHECK(error_of([&] { c.get<std::vector<double>>("tags"); }) ==
          "w.toml:7:9: plugins.warmup.tags[0]: expected a number, got string \"a\"");
    // The table's location stands in for a key that is not there.
    CHECK(error_of([&] { c.get<int>("missing"); }) ==
          "w.toml:1:1: plugins.warmup.missing: expected an integer, got nothing (the key is missing)");
  }

  TEST_CASE("an int64 that does not fit an int is an error") {
    const PluginConfig c = sample();
    CHECK(error_of([&] { c.get<int>("big"); }) ==
          "w.toml:10:7: plugins.warmup.big: expected an integer in [-2147483648, 2147483647], got integer 5000000000");
    const PluginConfig edge = PluginConfig::from_toml("hi = 2147483647\nlo = -2147483648\nover = 2147483648\n");
    CHECK(edge.get<int>("hi") == 2147483647);
    CHECK(edge.get<int>("lo") == -2147483647 - 1);
    CHECK_THROWS_AS(edge.get<int>("over"), ConfigError);
  }

  TEST_CASE("a bad time string quotes it at the key's line") {
    const PluginConfig c = PluginConfig::from_toml("\nevery = \"3epochs\"\n", "p", "p.toml");
    const std::string message = error_of([&] { c.get<Time>("every"); });
    CHECK(message.rfind("p.toml:2:9: plugins.p.every: invalid time \"3epochs\"", 0) == 0);
    CHECK(message.find("ep, ba, sp, tok, iter") != std::string::npos);
  }

  TEST_CASE("nested tables report dotted paths") {
    const PluginConfig c = sample();
    const PluginConfig schedule = c.get<PluginConfig>("schedule");
    CHECK(error_of([&] { schedule.get<int>("begin"); }) ==
          "w.toml:11:22: plugins.warmup.schedule.begin: expected an integer, got string \"1ep\"");
    CHECK(error_of([&] { schedule.get<int>("step"); }) ==
          "w.toml:11:12: plugins.warmup.schedule.step: expected an integer, got nothing (the key is missing)");
    CHECK(schedule.where("end").line == 11);
    CHECK(schedule.where("end").column == 35);
  }

  TEST_CASE("keys come in file order") {
    const PluginConfig c = PluginConfig::from_toml("zeta = 1\nalpha = 2\nmid = 3\n");
    CHECK(c.keys() == std::vector<std::string>{"zeta", "alpha", "mid"});
    CHECK(PluginConfig().keys().empty());
  }

  TEST_CASE("unread keys are tracked through has, get and nested views") {
    const PluginConfig c = PluginConfig::from_toml(
        "alpha = 1\nbeta = 2\ngamma = 3\nsched = { start = 1, stop = 2 }\nother = { x = 1 }\n", "p", "p.toml");
    CHECK(c.unread_keys() == std::vector<std::string>{"alpha", "beta", "gamma", "sched", "other"});
    CHECK(c.get<int>("alpha") == 1);
    CHECK(c.has("beta"));
    CHECK_FALSE(c.has("absent"));
    const PluginConfig sched = c.get<PluginConfig>("sched");
    CHECK(c.unread_keys() == std::vector<std::string>{"gamma", "sched.start", "sched.stop", "other"});
    CHECK(sched.get<int>("start") == 1);
    CHECK(sched.unread_keys() == std::vector<std::string>{"sched.stop"});
    CHECK(c.unread_keys() == std::vector<std::string>{"gamma", "sched.stop", "other"});
    // A copy shares the record: what the plugin read through its copy counts for the loader's check.
    const PluginConfig copy = c;
    copy.get<int>("gamma");
    CHECK(c.unread_keys() == std::vector<std::string>{"sched.stop", "other"});
  }

  TEST_CASE("reject_unread reports the first unread key at its location") {
    const PluginConfig c = PluginConfig::from_toml("alpha = 1\n  tresh = 2\nsched = { stop = 2 }\n", "p", "p.toml");
    c.get<int>("alpha");
    CHECK(error_of([&] { c.reject_unread(); }) == "p.toml:2:3: plugins.p.tresh: unknown key 'tresh' for plugin 'p'; it reads alpha");
    c.has("tresh");
    c.get<PluginConfig>("sched");
    CHECK(error_of([&] { c.reject_unread(); }) ==
          "p.toml:3:11: plugins.p.sched.stop: unknown key 'sched.stop' for plugin 'p'; it reads alpha, sched, tresh");
    c.get<PluginConfig>("sched").get<int>("stop");
    CHECK_NOTHROW(c.reject_unread());
    CHECK_NOTHROW(PluginConfig().reject_unread());
  }

  TEST_CASE("fail and where point at the key, or at the table when it is absent") {
    const PluginConfig c = PluginConfig::from_toml("\n\nrate = -1\n", "sched", "s.toml");
    CHECK(c.where("rate").line == 3);
    CHECK(c.where("rate").column == 8);
    CHECK(c.where("absent").line == 1);
    CHECK(error_of([&] { c.fail("rate", "must be positive"); }) == "s.toml:3:8: plugins.sched.rate: must be positive");
  }

  TEST_CASE("from_toml reports syntax errors with their location") {
    const std::string message = error_of([] { PluginConfig::from_toml("a = 1\nb = \n", "p", "p.toml"); });
    CHECK(message.rfind("p.toml:2:5: ", 0) == 0);
    CHECK(message.find("expected value") != std::string::npos);
  }
  TEST_CASE("get_time restricts a time string to the units a plugin supports") {
    const PluginConfig c = PluginConfig::from_toml("every = \"2sp\"\nwarmup = \"3ep\"\nhalf = \"0.5dur\"\n", "p", "p.toml");
    const std::vector<TimeUnit> batch_or_epoch = {TimeUnit::batch, TimeUnit::epoch};
    CHECK(c.get_time("warmup", batch_or_epoch) == Time(3, TimeUnit::epoch));
    CHECK(error_of([&] { c.get_time("every", batch_or_epoch); }) ==
          "p.toml:1:9: plugins.p.every: expected a time in ba or ep, got string \"2sp\"");
    CHECK(error_of([&] { c.get_time("half", {TimeUnit::batch, TimeUnit::epoch, TimeUnit::sample}); }) ==
          "p.toml:3:8: plugins.p.half: expected a time in ba, ep or sp, got string \"0.5dur\"");
    CHECK(c.get_time("every", {}) == Time(2, TimeUnit::sample));  // no restriction
    CHECK(c.get_time_or("absent", Time(5, TimeUnit::batch), batch_or_epoch) == Time(5, TimeUnit::batch));
    CHECK(c.get_time_or("warmup", Time(5, TimeUnit::batch), batch_or_epoch) == Time(3, TimeUnit::epoch));
    CHECK_THROWS_AS(c.get_time_or("every", Time(5, TimeUnit::batch), batch_or_epoch), ConfigError);
    // A value that is not a time string at all fails as get<Time> does.
    const PluginConfig bad = PluginConfig::from_toml("every = 3\n", "p", "p.toml");
    CHECK(error_of([&] { bad.get_time("every", batch_or_epoch); }) ==
          "p.toml:1:9: plugins.p.every: expected a time string such as \"2ep\", got integer 3");
    CHECK(bad.unread_keys().empty());
  }

  TEST_CASE("get_time refuses a fraction of the run beyond 1dur, for every key (issue 24 §8)") {
    const PluginConfig c = PluginConfig::from_toml("warmup = \"1.5dur\"\nall = \"1dur\"\n", "cosine", "s.toml");
    const std::vector<TimeUnit> units = {TimeUnit::batch, TimeUnit::epoch, TimeUnit::duration};
    CHECK(error_of([&] { c.get_time("warmup", units); }) ==
          "s.toml:1:10: plugins.cosine.warmup: expected a fraction of the run <= 1dur, got string \"1.5dur\"");
    CHECK(c.get_time("all", units) == Time(1.0, TimeUnit::duration));
  }

  TEST_CASE("get_time with TimeZero::rejected refuses a zero time, which an interval cannot be") {
    const PluginConfig c = PluginConfig::from_toml("every = \"0ba\"\nwarmup = \"0ep\"\nstep = \"2ba\"\n", "p", "p.toml");
    const std::vector<TimeUnit> batch_or_epoch = {TimeUnit::batch, TimeUnit::epoch};
    CHECK(error_of([&] { c.get_time("every", batch_or_epoch, baton::TimeZero::rejected); }) ==
          "p.toml:1:9: plugins.p.every: expected a time > 0, got string \"0ba\"");
    CHECK(error_of([&] { c.get_time_or("warmup", Time(1, TimeUnit::batch), batch_or_epoch,
                                       baton::TimeZero::rejected); }) ==
          "p.toml:2:10: plugins.p.warmup: expected a time > 0, got string \"0ep\"");
    CHECK(c.get_time("every", batch_or_epoch, baton::TimeZero::allowed) == Time(0, TimeUnit::batch));
    CHECK(c.get_time("step", batch_or_epoch, baton::TimeZero::rejected) == Time(2, TimeUnit::batch));
    CHECK(c.get_time_or("absent", Time(5, TimeUnit::batch), batch_or_epoch, baton::TimeZero::rejected) ==
          Time(5, TimeUnit::batch));
    // The unit is checked first, as without the bound.
    const PluginConfig samples = PluginConfig::from_toml("every = \"0sp\"\n", "p", "p.toml");
    CHECK(error_of([&] { samples.get_time("every", batch_or_epoch, baton::TimeZero::rejected); }) ==
          "p.toml:1:9: plugins.p.every: expected a time in ba or ep, got string \"0sp\"");
  }

  TEST_CASE("get_or with a text default reads a string") {
    const PluginConfig c = PluginConfig::from_toml("mode = \"slow\"\ncount = 2\n", "p", "p.toml");
    CHECK(c.get_or("mode", "fast") == "slow");
    CHECK(c.get_or("absent", "fast") == "fast");
    CHECK(error_of([&] { c.get_or("count", "x"); }) == "p.toml:2:9: plugins.p.count: expected a string, got integer 2");
  }

  TEST_CASE("lists: get_or with a list default, and an empty list") {
    const PluginConfig c = PluginConfig::from_toml("sizes = []\n", "p", "p.toml");
    CHECK(c.get<std::vector<std::int64_t>>("sizes").empty());
    CHECK(c.get_or<std::vector<double>>("weights", {0.5, 0.25}) == std::vector<double>{0.5, 0.25});
    CHECK(c.get_or<std::vector<std::string>>("tags", {}).empty());
  }
  TEST_CASE("renamed names another plugin in errors and keeps what was read") {
    const PluginConfig c = PluginConfig::from_toml("a = 1\nevry = 2\nsub = { x = 1, y = 2 }\n", "build/p.so", "r.toml");
    CHECK(c.get<int>("a") == 1);
    const PluginConfig sub = c.get<PluginConfig>("sub");
    CHECK(sub.get<int>("x") == 1);
    const PluginConfig named = c.renamed("grad_clip");
    CHECK(named.plugin_name() == "grad_clip");
    CHECK(c.plugin_name() == "build/p.so");  // the original is unchanged
    CHECK(named.unread_keys() == std::vector<std::string>{"evry", "sub.y"});
    CHECK(error_of([&] { named.reject_unread(); }) ==
          "r.toml:2:1: plugins.grad_clip.evry: unknown key 'evry' for plugin 'grad_clip'; it reads a, sub");
    const PluginConfig named_sub = sub.renamed("grad_clip");
    CHECK(error_of([&] { named_sub.get<std::string>("y"); }) ==
          "r.toml:3:20: plugins.grad_clip.sub.y: expected a string, got integer 2");
  }
}
