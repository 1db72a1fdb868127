#include "baton_test.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/best_checkpoints.h"
#include "error_text.h"

namespace fs = std::filesystem;

using baton::RankedCheckpoint;
using baton::Ranking;
using baton::test::read_bytes;
using baton::test::write_bytes;

namespace {

std::vector<std::string> names(const Ranking& ranking) {
  std::vector<std::string> out;
  for (const auto& entry : ranking.entries()) out.push_back(entry.name);
  return out;
}

RankedCheckpoint ranked(const std::string& name, double value, std::int64_t batch = 0) {
  return RankedCheckpoint{name, "/nowhere/" + name, value, 0, batch};
}

// A committed-looking checkpoint folder: meta.json, a state file and a plugin's file, each with its own content.
fs::path make_checkpoint(const fs::path& dir, const std::string& name) {
  fs::path folder = dir / "checkpoints" / name;
  fs::create_directories(folder);
  write_bytes((folder / "meta.json").string(), "{\"name\": \"" + name + "\"}");
  write_bytes((folder / "state.safetensors").string(), "state of " + name);
  write_bytes((folder / "ema.safetensors").string(), "ema of " + name);
  return folder;
}

std::set<std::string> folders_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory()) out.insert(entry.path().filename().string());
  return out;
}

}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("ranking: the best k by the metric's direction, ties keep the earlier, NaN never enters") {
    Ranking top_two("eval/accuracy", /*maximize=*/true, 2);
    CHECK(top_two.offer(ranked("ba1", 0.50)));
    CHECK(top_two.offer(ranked("ba2", 0.70)));
    CHECK(names(top_two) == std::vector<std::string>{"ba2", "ba1"});
    CHECK(top_two.offer(ranked("ba3", 0.60)));  // pushes ba1 out
    CHECK(names(top_two) == std::vector<std::string>{"ba2", "ba3"});
    CHECK_FALSE(top_two.offer(ranked("ba4", 0.60)));  // equal to the last kept: the earlier stays
    CHECK_FALSE(top_two.offer(ranked("ba5", std::numeric_limits<double>::quiet_NaN())));
    CHECK(names(top_two) == std::vector<std::string>{"ba2", "ba3"});

    Ranking lowest("eval/loss", /*maximize=*/false, 1);
    CHECK(lowest.offer(ranked("ba1", 0.9)));
    CHECK_FALSE(lowest.offer(ranked("ba2", 1.1)));
    CHECK(lowest.offer(ranked("ba3", 0.2)));
    CHECK(names(lowest) == std::vector<std::string>{"ba3"});
    CHECK(lowest.mode() == "min");

    // A checkpoint written again under the same name (a rerun from an earlier point) replaces its entry.
    CHECK(top_two.offer(ranked("ba2", 0.1)));  // enters last (0.1 < 0.6 but a place is free once ba2's old entry goes)
    CHECK(names(top_two) == std::vector<std::string>{"ba3", "ba2"});
  }

  TEST_CASE("ranking: saved and restored under a prefix; another metric or mode is not restored") {
    Ranking ranking("eval/loss", false, 3);
    ranking.offer(ranked("ba4", 0.4, 4));
    ranking.offer(ranked("ba2", 0.3, 2));
    baton::StateDict saved;
    ranking.save(saved, "best/");
    CHECK(Ranking::saved_in(saved, "best/"));
    CHECK_FALSE(Ranking::saved_in(saved, "select/"));

    Ranking restored("eval/loss", false, 3);
    REQUIRE(restored.load(saved, "best/"));
    REQUIRE(restored.entries().size() == 2);
    CHECK(restored.entries()[0].name == "ba2");
    CHECK(restored.entries()[0].value == 0.3);
    CHECK(restored.entries()[0].batch == 2);
    CHECK(restored.entries()[1].path == "/nowhere/ba4");

    Ranking smaller("eval/loss", false, 1);  // a smaller keep applies at once
    REQUIRE(smaller.load(saved, "best/"));
    CHECK(names(smaller) == std::vector<std::string>{"ba2"});

    Ranking other_mode("eval/loss", true, 3);
    CHECK_FALSE(other_mode.load(saved, "best/"));
    CHECK(other_mode.entries().empty());
    Ranking other_metric("eval/accuracy", false, 3);
    CHECK_FALSE(other_metric.load(saved, "best/"));
  }

  TEST_CASE("publish_best: best/ holds exactly the ranked checkpoints, best.json in order, the top one's files") {
    auto dir = baton::test::scratch_dir("best_checkpoints_publish");
    Ranking ranking("eval/accuracy", true, 2);
    for (const auto& [name, value] : std::vector<std::pair<std::string, double>>{{"ba1", 0.5}, {"ba2", 0.8}}) {
      fs::path folder = make_checkpoint(dir, name);
      ranking.offer(RankedCheckpoint{name, folder.string(), value, 0, std::stoll(name.substr(2))});
    }
    const fs::path best = dir / "best";
    fs::create_directories(best);
    write_bytes((best / "notes.txt").string(), "the user's");        // not a checkpoint folder: stays
    fs::create_directories(best / ".tmp-ba9-123");                    // an interrupted copy: goes
    CHECK(baton::publish_best(best.string(), ranking, {"ema.safetensors"}).empty());
    CHECK(folders_in(best) == std::set<std::string>{"ba1", "ba2"});
    CHECK(read_bytes((best / "ba2" / "state.safetensors").string()) == "state of ba2");
    CHECK(read_bytes((best / "ema.safetensors").string()) == "ema of ba2");
    CHECK(fs::exists(best / "notes.txt"));
    std::ifstream in(best / "best.json");
    auto doc = nlohmann::json::parse(in);
    CHECK(doc["metric"] == "eval/accuracy");
    CHECK(doc["mode"] == "max");
    REQUIRE(doc["checkpoints"].size() == 2);
    CHECK(doc["checkpoints"][0]["name"] == "ba2");
    CHECK(doc["checkpoints"][0]["rank"] == 1);
    CHECK(doc["checkpoints"][1]["value"].get<double>() == 0.5);

    // A better one arrives: ba1 leaves best/, the top file follows the new top.
    ranking.offer(RankedCheckpoint{"ba3", make_checkpoint(dir, "ba3").string(), 0.9, 0, 3});
    CHECK(baton::publish_best(best.string(), ranking, {"ema.safetensors"}, "ba3").empty());
    CHECK(folders_in(best) == std::set<std::string>{"ba2", "ba3"});
    CHECK(read_bytes((best / "ema.safetensors").string()) == "ema of ba3");

    // Without top files (no plugin names one), none is written and an old one goes.
    CHECK(baton::publish_best(best.string(), ranking, {}).empty());
    CHECK(fs::exists(best / "ema.safetensors"));  // not named: left as the user's file would be
  }

  TEST_CASE("publish_best: a ranked checkpoint gone from disk and from best/ is left out with a warning") {
    auto dir = baton::test::scratch_dir("best_checkpoints_gone");
    Ranking ranking("eval/loss", false, 2);
    ranking.offer(RankedCheckpoint{"ba1", make_checkpoint(dir, "ba1").string(), 0.3, 0, 1});
    ranking.offer(RankedCheckpoint{"ba2", (dir / "checkpoints" / "ba2").string(), 0.2, 0, 2});  // never written
    const auto warnings = baton::publish_best((dir / "best").string(), ranking, {"ema.safetensors"});
    REQUIRE(warnings.size() == 1);
    CHECK(baton::test::contains(warnings[0], "ba2 (eval/loss 0.2) is gone from"));
    CHECK(folders_in(dir / "best") == std::set<std::string>{"ba1"});
    CHECK(read_bytes((dir / "best" / "ema.safetensors").string()) == "ema of ba1");  // the top one that exists
  }
}
