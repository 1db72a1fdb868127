// The command line's composition root: components built from a config's sections through the registries.
#include "baton_test.h"

#include <string>

#include "cli/assembly.h"

TEST_SUITE("assembly") {
  TEST_CASE("[[eval]] from a config: a split of [data] or a dataset of its own, [data] metrics by default") {
    const auto config = baton::parse_config(
        "[data]\nname = \"synthetic\"\ntrain_size = 64\neval_size = 32\nbatch_size = 16\n"
        "metrics = [\"accuracy\", { name = \"top_k\", k = 3 }]\n"
        "[[eval]]\nname = \"train\"\nsplit = \"train\"\n"
        "[[eval]]\nname = \"other\"\nmetrics = [\"accuracy\"]\ndata = { name = \"synthetic\", eval_size = 20 }\n"
        "[[eval]]\nname = \"bad\"\ndata = { name = \"synthetic\", eval_size = 20, typo = 1 }\n",
        "cfg.toml");
    baton::RunConfig good = config;
    good.evals.pop_back();
    const auto built = baton::build_components(good);
    REQUIRE(built.eval_sets.size() == 2);
    CHECK(built.eval_sets[0].data->size() == 64);
    REQUIRE(built.eval_sets[0].metrics.size() == 2);  // [data]'s, instances of its own
    CHECK(built.eval_sets[0].metrics[1].name == "top_k");
    CHECK(built.eval_sets[0].metrics[1].metric != built.metrics[1].metric);
    CHECK(built.eval_sets[1].data->size() == 20);
    REQUIRE(built.eval_sets[1].metrics.size() == 1);
    try {
      baton::build_components(config);
      FAIL("no error for a key the set's dataset does not read");
    } catch (const baton::ConfigError& e) {
      CHECK(std::string(e.what()).find("typo") != std::string::npos);
      CHECK(e.where().line == 16);
    }
  }

  TEST_CASE("[optimizer] weight_decay_exclude: a glob no parameter matches is reported at its line") {
    const auto config = baton::parse_config(
        "[data]\nname = \"synthetic\"\ntrain_size = 64\neval_size = 32\nbatch_size = 16\n"
        "[optimizer]\nname = \"adamw\"\nweight_decay_exclude = [\"bias\", \"clasifier.*\"]\n",
        "cfg.toml");
    try {
      baton::build_components(config);
      FAIL("no error for a glob that matches nothing");
    } catch (const baton::ConfigError& e) {
      CHECK(e.key() == "optimizer.weight_decay_exclude");
      CHECK(e.where().line == 8);
      CHECK(std::string(e.what()).find("\"clasifier.*\" is no kind (bias, norm, embedding) and matches no parameter "
                                       "of the model (its parameters: features.0.weight") != std::string::npos);
    }
  }
}
