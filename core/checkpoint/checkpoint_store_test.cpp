#include "baton_test.h"
#include "error_text.h"

#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/durable_file.h"
#include "baton/safetensors.h"

namespace fs = std::filesystem;

using baton::test::read_bytes;
using baton::test::write_bytes;

namespace {

std::uint32_t zlib_crc(const std::string& bytes) {
  return static_cast<std::uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

void flip_byte(const fs::path& path, std::size_t offset) {
  std::string bytes = read_bytes(path);
  REQUIRE(offset < bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x5a);
  write_bytes(path, bytes);
}

void flip_last_byte(const fs::path& path) { flip_byte(path, fs::file_size(path) - 1); }

std::vector<std::string> folder_names(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return {names.begin(), names.end()};
}

std::vector<std::string> listed_names(const baton::CheckpointStore& store) {
  std::vector<std::string> names;
  for (const auto& info : store.list()) names.push_back(info.name);
  return names;
}

baton::CheckpointData simple_data(std::int64_t batch, float value) {
  baton::CheckpointData data;
  data.timestamp.batch = batch;
  baton::StateDict model;
  model.set_tensor("w", at::full({3}, value));
  data.sections.emplace_back("model", model);
  return data;
}

std::string checkpoint_error_of(const std::string& path) {
  try {
    baton::verify_checkpoint(path);
  } catch (const baton::CheckpointError& e) {
    return e.what();
  }
  return "<no CheckpointError>";
}

using baton::test::contains;

}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("checkpoint store: save and load round trip sections, scalars and extra files") {
    auto dir = baton::test::scratch_dir("ckpt_roundtrip") / "checkpoints";  // created by the first save
    baton::CheckpointStore store(dir.string(), 0);
    baton::CheckpointData data;
    data.timestamp = {2, 1200, 38400, 0, 2, 0, 0};
    data.config_text = "[train]\nmax_duration = \"2ep\"\n";
    baton::StateDict model;
    model.set_tensor("fc.weight", at::arange(6, at::kFloat).reshape({2, 3}));
    model.set_tensor("fc.bias", at::zeros({2}, at::kDouble));
    baton::StateDict trainer;
    trainer.set_int("seed", 17);
    trainer.set_double("loss", 0.1);
    trainer.set_string("note", "hi");
    trainer.set_bool("done", false);
    baton::StateDict plugin;
    plugin.set_tensor("shadow/fc.weight", at::full({2, 3}, 0.5));
    plugin.set_int("updates", 3);
    baton::StateDict ema;
    ema.set_tensor("fc.weight", at::full({2, 3}, -1.0));
    ema.set_double("decay", 0.999);
    ema.set_string("mode", "fast");
    data.sections = {{"model", model}, {"trainer", trainer}, {"plugin/ema", plugin}};
    data.files = {{"ema.safetensors", ema}};

    const std::string path = store.save("ba1200", data);
    CHECK(path == (dir / "ba1200").string());
    CHECK(folder_names(dir) == std::vector<std::string>{"ba1200"});
    CHECK(folder_names(path) == std::vector<std::string>{"ema.safetensors", "meta.json", "state.safetensors"});

    // meta.json, read independently.
    auto meta = nlohmann::json::parse(read_bytes(fs::path(path) / "meta.json"));
    CHECK(meta["format"] == "baton-checkpoint");
    CHECK(meta["version"] == 1);
    CHECK(meta["name"] == "ba1200");
    CHECK(meta["timestamp"]["batch"] == 1200);
    CHECK(meta["timestamp"]["sample"] == 38400);
    CHECK(meta["timestamp"]["iteration"] == 2);
    CHECK(meta["config"] == data.config_text);
    REQUIRE(meta["sections"].size() == 3);
    CHECK(meta["sections"][1]["name"] == "trainer");
    CHECK(meta["sections"][1]["scalars"]["seed"] == 17);
    CHECK(meta["sections"][2]["tensors"] == nlohmann::json::array({"shadow/fc.weight"}));
    for (const char* file : {"state.safetensors", "ema.safetensors"}) {
      CAPTURE(file);
      const std::string bytes = read_bytes(fs::path(path) / file);
      CHECK(meta["files"][file]["bytes"] == bytes.size());
      CHECK(meta["files"][file]["crc32"] == zlib_crc(bytes));
    }
    // state.safetensors names tensors "<section>/<key>".
    auto state = baton::read_safetensors((fs::path(path) / "state.safetensors").string());
    std::vector<std::string> names;
    for (const auto& [name, tensor] : state.tensors) names.push_back(name);
    CHECK(names == std::vector<std::string>{"model/fc.weight", "model/fc.bias", "plugin/ema/shadow/fc.weight"});

    auto info = baton::read_checkpoint_info(path);
    CHECK(info.name == "ba1200");
    CHECK(info.timestamp.epoch == 2);

    auto back = baton::load_checkpoint(path);
    CHECK(back.timestamp.batch == 1200);
    CHECK(back.timestamp.epoch == 2);
    CHECK(back.config_text == data.config_text);
    REQUIRE(back.sections.size() == 3);
    CHECK(back.sections[2].first == "plugin/ema");
    const baton::StateDict* m = back.section("model");
    REQUIRE(m != nullptr);
    CHECK(m->tensor_keys() == std::vector<std::string>{"fc.weight", "fc.bias"});
    CHECK(at::equal(m->tensor("fc.weight"), model.tensor("fc.weight")));
    CHECK((m->tensor("fc.bias").scalar_type() == at::kDouble));
    const baton::StateDict* t = back.section("trainer");
    REQUIRE(t != nullptr);
    CHECK(t->keys() == std::vector<std::string>{"seed", "loss", "note", "done"});
    CHECK(t->get_int("seed") == 17);
    CHECK(t->get_double("loss") == 0.1);
    CHECK(t->get_string("note") == "hi");
    CHECK_FALSE(t->get_bool("done"));
    CHECK(back.section("plugin/ema")->get_int("updates") == 3);
    CHECK(at::equal(back.section("plugin/ema")->tensor("shadow/fc.weight"), at::full({2, 3}, 0.5)));
    CHECK(back.section("missing") == nullptr);
    REQUIRE(back.files.size() == 1);
    CHECK(back.files[0].first == "ema.safetensors");
    CHECK(back.files[0].second.get_double("decay") == 0.999);
    CHECK(back.files[0].second.get_string("mode") == "fast");
    CHECK(at::equal(back.files[0].second.tensor("fc.weight"), at::full({2, 3}, -1.0)));
  }

  TEST_CASE("checkpoint store: saving an existing name replaces it only with a complete checkpoint") {
    auto dir = baton::test::scratch_dir("ckpt_replace");
    baton::CheckpointStore store(dir.string(), 0);
    store.save("ep1", simple_data(10, 1.0f));
    store.save("ep1", simple_data(10, 2.0f));
    CHECK(folder_names(dir) == std::vector<std::string>{"ep1"});
    CHECK(at::equal(baton::load_checkpoint((dir / "ep1").string()).section("model")->tensor("w"), at::full({3}, 2.0f)));

    // A failing save (an unsupported dtype in an extra file, found after state.safetensors is written) keeps the
    // old checkpoint and leaves no temporary folder behind.
    auto bad = simple_data(10, 3.0f);
    baton::StateDict extra;
    extra.set_tensor("z", at::zeros({1}, at::kComplexFloat));
    bad.files.emplace_back("extra.safetensors", extra);
    CHECK_THROWS_WITH_AS(store.save("ep1", bad), doctest::Contains("unsupported dtype"), baton::Error);
    CHECK(folder_names(dir) == std::vector<std::string>{"ep1"});
    CHECK(at::equal(baton::load_checkpoint((dir / "ep1").string()).section("model")->tensor("w"), at::full({3}, 2.0f)));
  }

  TEST_CASE("checkpoint store: bad names are refused") {
    auto dir = baton::test::scratch_dir("ckpt_names");
    baton::CheckpointStore store(dir.string(), 0);
    CHECK_THROWS_WITH_AS(store.save("../escape", simple_data(1, 0)), doctest::Contains("invalid checkpoint name"),
                         baton::Error);
    CHECK_THROWS_AS(store.save(".hidden", simple_data(1, 0)), baton::Error);
    auto data = simple_data(1, 0);
    data.files.emplace_back("state.safetensors", baton::StateDict());
    CHECK_THROWS_WITH_AS(store.save("ok", data), doctest::Contains("invalid extra file name 'state.safetensors'"),
                         baton::Error);
    auto twice = simple_data(1, 0);
    twice.sections.emplace_back("model", baton::StateDict());
    CHECK_THROWS_WITH_AS(store.save("ok", twice), doctest::Contains("section 'model' appears twice"), baton::Error);
    CHECK_THROWS_AS(baton::CheckpointStore(dir.string(), -1), baton::Error);
    CHECK(folder_names(dir).empty());
  }

  TEST_CASE("checkpoint store: corruption is reported naming the checkpoint and the file") {
    auto dir = baton::test::scratch_dir("ckpt_corrupt");
    baton::CheckpointStore store(dir.string(), 0);
    auto data = simple_data(5, 1.5f);
    baton::StateDict ema;
    ema.set_tensor("w", at::zeros({4}));
    data.files.emplace_back("ema.safetensors", ema);
    const std::string path = store.save("ba5", data);
    CHECK_NOTHROW(baton::verify_checkpoint(path));
    const fs::path state = fs::path(path) / "state.safetensors";
    const std::string good_state = read_bytes(state);

    flip_byte(state, good_state.size() - 2);
    CHECK(checkpoint_error_of(path) == "checkpoint " + path + ": state.safetensors: crc32 mismatch (file corrupted)");
    CHECK_THROWS_WITH_AS(baton::load_checkpoint(path), doctest::Contains("crc32 mismatch"), baton::CheckpointError);

    write_bytes(state, good_state.substr(0, good_state.size() - 4));
    CHECK(checkpoint_error_of(path) == "checkpoint " + path + ": state.safetensors: size is " +
                                           std::to_string(good_state.size() - 4) + " bytes, meta.json says " +
                                           std::to_string(good_state.size()) + " (file truncated or overwritten)");
    write_bytes(state, good_state);
    CHECK_NOTHROW(baton::verify_checkpoint(path));

    flip_byte(fs::path(path) / "ema.safetensors", 20);
    CHECK(checkpoint_error_of(path) == "checkpoint " + path + ": ema.safetensors: crc32 mismatch (file corrupted)");
    fs::remove(fs::path(path) / "ema.safetensors");
    CHECK(contains(checkpoint_error_of(path), "checkpoint " + path + ": ema.safetensors: missing"));
  }

  TEST_CASE("checkpoint store: a damaged safetensors header with a matching digest is still caught") {
    auto dir = baton::test::scratch_dir("ckpt_header");
    baton::CheckpointStore store(dir.string(), 0);
    const std::string path = store.save("ba1", simple_data(1, 1.0f));
    const fs::path state = fs::path(path) / "state.safetensors";
    const std::string bad = read_bytes(state) + "12345678";
    write_bytes(state, bad);
    auto meta = nlohmann::json::parse(read_bytes(fs::path(path) / "meta.json"));
    meta["files"]["state.safetensors"] = {{"bytes", bad.size()}, {"crc32", zlib_crc(bad)}};
    write_bytes(fs::path(path) / "meta.json", meta.dump());
    CHECK(checkpoint_error_of(path) == "checkpoint " + path +
                                           ": state.safetensors: 8 trailing bytes after the last tensor (data is 12 "
                                           "bytes, file holds 20)");
  }

  TEST_CASE("checkpoint store: meta.json problems") {
    auto dir = baton::test::scratch_dir("ckpt_meta");
    baton::CheckpointStore store(dir.string(), 0);
    const std::string path = store.save("ep1", simple_data(1, 1.0f));
    const fs::path meta_path = fs::path(path) / "meta.json";
    const std::string good_meta = read_bytes(meta_path);

    auto meta = nlohmann::json::parse(good_meta);
    meta["version"] = 3;
    write_bytes(meta_path, meta.dump());
    CHECK(checkpoint_error_of(path) == "checkpoint " + path + ": meta.json: unsupported version: got 3, supported 1 to 2");
    meta["version"] = 0;
    write_bytes(meta_path, meta.dump());
    CHECK(checkpoint_error_of(path) == "checkpoint " + path + ": meta.json: unsupported version: got 0, supported 1 to 2");
    meta["version"] = 1;
    meta["format"] = "other";
    write_bytes(meta_path, meta.dump());
    CHECK(checkpoint_error_of(path) ==
          "checkpoint " + path + ": meta.json: unsupported format: got \"other\", supported \"baton-checkpoint\"");

    write_bytes(meta_path, good_meta.substr(0, good_meta.size() / 2));
    CHECK(contains(checkpoint_error_of(path), "checkpoint " + path + ": meta.json does not parse: "));
    CHECK(contains(checkpoint_error_of(path), "parse error"));

    auto no_files = nlohmann::json::parse(good_meta);
    no_files.erase("files");
    write_bytes(meta_path, no_files.dump());
    CHECK(contains(checkpoint_error_of(path), "meta.json is malformed"));
    CHECK(contains(checkpoint_error_of(path), "files"));

    fs::remove(meta_path);
    CHECK(checkpoint_error_of(path) == "checkpoint " + path + ": meta.json is missing (the checkpoint is incomplete)");
    CHECK_THROWS_WITH_AS(baton::read_checkpoint_info(path), doctest::Contains("meta.json is missing"),
                         baton::CheckpointError);
    CHECK(store.list().empty());  // not committed, so not listed
    CHECK(contains(checkpoint_error_of((dir / "nope").string()), "no such checkpoint folder"));
  }

  TEST_CASE("checkpoint store: list sorts by batch, then name; keep_last 0 keeps everything") {
    auto dir = baton::test::scratch_dir("ckpt_list");
    baton::CheckpointStore store(dir.string(), 0);
    CHECK(store.list().empty());
    store.save("c", simple_data(30, 0));
    store.save("b", simple_data(10, 0));
    store.save("a", simple_data(20, 0));
    store.save("z", simple_data(10, 0));
    CHECK(listed_names(store) == std::vector<std::string>{"b", "z", "a", "c"});
    CHECK(store.list().front().path == (dir / "b").string());
    fs::create_directory(dir / "not-a-checkpoint");  // no meta.json: ignored
    CHECK(listed_names(store).size() == 4);
    CHECK(baton::CheckpointStore((dir / "missing").string(), 0).list().empty());
  }

  TEST_CASE("checkpoint store: keep_last prunes the oldest only after the new checkpoint is complete") {
    auto dir = baton::test::scratch_dir("ckpt_prune");
    baton::CheckpointStore store(dir.string(), 2);
    store.save("ba10", simple_data(10, 1));
    store.save("ba20", simple_data(20, 2));
    CHECK(listed_names(store) == std::vector<std::string>{"ba10", "ba20"});
    store.save("ba30", simple_data(30, 3));
    CHECK(listed_names(store) == std::vector<std::string>{"ba20", "ba30"});
    CHECK(folder_names(dir) == std::vector<std::string>{"ba20", "ba30"});

    // A save that fails part-way prunes nothing.
    auto bad = simple_data(40, 4);
    baton::StateDict extra;
    extra.set_tensor("z", at::zeros({1}, at::kComplexDouble));
    bad.files.emplace_back("x.safetensors", extra);
    CHECK_THROWS_AS(store.save("ba40", bad), baton::Error);
    CHECK(folder_names(dir) == std::vector<std::string>{"ba20", "ba30"});

    // The checkpoint just saved survives pruning even when its timestamp is the oldest.
    store.save("ba5", simple_data(5, 5));
    CHECK(listed_names(store) == std::vector<std::string>{"ba5", "ba30"});
  }

  TEST_CASE("checkpoint store: a crash mid-save leaves the previous checkpoint newest and is cleaned up") {
    auto dir = baton::test::scratch_dir("ckpt_crash");
    {
      baton::CheckpointStore store(dir.string(), 3);
      store.save("ba10", simple_data(10, 1));
      store.save("ba20", simple_data(20, 2));
    }
    // What a save killed before its rename leaves: a temporary folder with partial files, no meta.json.
    const fs::path leftover = dir / ".tmp-ba30-4242";
    fs::create_directory(leftover);
    write_bytes(leftover / "state.safetensors", read_bytes(dir / "ba20" / "state.safetensors").substr(0, 30));
    // And one killed while pruning.
    fs::create_directory(dir / ".del-ba1-4242");

    baton::CheckpointStore store(dir.string(), 3);
    CHECK(folder_names(dir) == std::vector<std::string>{"ba10", "ba20"});
    std::vector<std::string> warnings;
    auto newest = store.newest_valid(warnings);
    REQUIRE(newest.has_value());
    CHECK(newest->name == "ba20");
    CHECK(warnings.empty());
  }

  TEST_CASE("checkpoint store: a crash between the two renames of a replacement is recovered") {
    auto dir = baton::test::scratch_dir("ckpt_parked");
    {
      baton::CheckpointStore store(dir.string(), 0);
      store.save("ep1", simple_data(10, 1));
      store.save("ep2", simple_data(20, 2));
    }
    // ep2 was parked for replacement and the new ep2 never arrived: the old one goes back under its name.
    fs::rename(dir / "ep2", dir / ".old-ep2-777");
    // ep1 was replaced but the parked copy was not yet deleted: the parked copy is dropped.
    fs::create_directory(dir / ".old-ep1-777");
    baton::CheckpointStore store(dir.string(), 0);
    CHECK(folder_names(dir) == std::vector<std::string>{"ep1", "ep2"});
    CHECK(at::equal(baton::load_checkpoint((dir / "ep2").string()).section("model")->tensor("w"), at::full({3}, 2.0f)));
  }

  TEST_CASE("checkpoint store: newest_valid skips corrupt checkpoints with a warning each") {
    auto dir = baton::test::scratch_dir("ckpt_newest");
    baton::CheckpointStore store(dir.string(), 0);
    std::vector<std::string> warnings;
    CHECK_FALSE(store.newest_valid(warnings).has_value());
    store.save("ba10", simple_data(10, 1));
    store.save("ba20", simple_data(20, 2));
    const std::string newest = store.save("ba30", simple_data(30, 3));
    flip_last_byte(fs::path(newest) / "state.safetensors");

    auto found = store.newest_valid(warnings);
    REQUIRE(found.has_value());
    CHECK(found->name == "ba20");
    REQUIRE(warnings.size() == 1);
    CHECK(contains(warnings[0], "checkpoint " + newest + ": state.safetensors: crc32 mismatch (file corrupted)"));

    flip_last_byte(dir / "ba20" / "state.safetensors");
    flip_last_byte(dir / "ba10" / "state.safetensors");
    warnings.clear();
    CHECK_FALSE(store.newest_valid(warnings).has_value());
    CHECK(warnings.size() == 3);
  }
}

TEST_SUITE("checkpoint") {
  TEST_CASE("checkpoint store: every folder list skips is reported, and newest_valid warns for each") {
    auto dir = baton::test::scratch_dir("ckpt_skipped");
    baton::CheckpointStore store(dir.string(), 0);
    store.save("ba10", simple_data(10, 1));
    const std::string garbage = store.save("ba20", simple_data(20, 2));
    const std::string missing = store.save("ba30", simple_data(30, 3));
    write_bytes(fs::path(garbage) / "meta.json", "not json at all");
    fs::remove(fs::path(missing) / "meta.json");
    fs::create_directory(dir / "ba40");  // an empty folder

    std::vector<baton::SkippedCheckpoint> skipped;
    CHECK(listed_names(store) == std::vector<std::string>{"ba10"});
    store.list(&skipped);
    REQUIRE(skipped.size() == 3);
    CHECK(skipped[0].path == garbage);
    CHECK(contains(skipped[0].reason, "checkpoint " + garbage + ": meta.json does not parse"));
    CHECK(skipped[1].path == missing);
    CHECK(skipped[1].reason == "checkpoint " + missing + ": meta.json is missing (the checkpoint is incomplete)");
    CHECK(skipped[2].reason == "checkpoint " + (dir / "ba40").string() + ": the folder is empty (no meta.json)");
    for (const auto& s : skipped) CHECK_FALSE(s.newer_format);

    std::vector<std::string> warnings;
    auto newest = store.newest_valid(warnings);
    REQUIRE(newest.has_value());
    CHECK(newest->name == "ba10");
    REQUIRE(warnings.size() == 3);
    CHECK(warnings[0] == "skipping corrupt checkpoint: " + skipped[0].reason);
    CHECK(warnings[2] == "skipping corrupt checkpoint: " + skipped[2].reason);
  }

  TEST_CASE("checkpoint store: a checkpoint of a newer format stops newest_valid and is never overwritten") {
    auto dir = baton::test::scratch_dir("ckpt_newer");
    baton::CheckpointStore store(dir.string(), 1);
    store.save("ba10", simple_data(10, 1));
    const std::string newer = store.save("ba20", simple_data(20, 2));
    auto meta = nlohmann::json::parse(read_bytes(fs::path(newer) / "meta.json"));
    meta["version"] = 3;
    const std::string newer_meta = meta.dump();
    write_bytes(fs::path(newer) / "meta.json", newer_meta);

    std::vector<baton::SkippedCheckpoint> skipped;
    store.list(&skipped);
    REQUIRE(skipped.size() == 1);
    CHECK(skipped[0].newer_format);
    std::vector<std::string> warnings;
    const std::string refused = "checkpoint " + newer + ": meta.json: unsupported version: got 3, supported 1 to 2: "
                                "it was written by a newer baton";
    CHECK_THROWS_WITH_AS(store.newest_valid(warnings), doctest::Contains(refused.c_str()), baton::CheckpointError);

    // Saving under its name fails naming it; pruning (keep_last = 1) never counts it.
    const std::string kept = "cannot save checkpoint " + newer + ": the folder holds a checkpoint written by a newer "
                             "baton";
    CHECK_THROWS_WITH_AS(store.save("ba20", simple_data(20, 5)), doctest::Contains(kept.c_str()), baton::Error);
    store.save("ba30", simple_data(30, 3));
    CHECK(read_bytes(fs::path(newer) / "meta.json") == newer_meta);
    CHECK(folder_names(dir) == std::vector<std::string>{"ba20", "ba30"});
  }

  TEST_CASE("checkpoint store: a sharded save commits every rank's files; a reader reads only those it selects") {
    auto dir = baton::test::scratch_dir("ckpt_shared");
    baton::CheckpointStore store(dir.string(), 0);
    store.save("ba10", simple_data(10, 1));
    // Two ranks' files, written into the save in progress before rank 0 commits it.
    std::vector<baton::SharedFile> shared;
    for (int rank = 0; rank < 2; ++rank) {
      baton::StateDict rows;
      rows.set_tensor("w", at::full({2}, 10.0f + rank));
      rows.set_int("rows/w", 2 * rank);
      shared.push_back(store.write_shared("ba20", "part-" + std::to_string(rank) + ".safetensors", rows));
    }
    // Not committed yet: ba10 is still the newest, and the files are in a hidden folder.
    CHECK(listed_names(store) == std::vector<std::string>{"ba10"});
    CHECK(fs::exists(dir / ".tmp-ba20-shared" / "part-1.safetensors"));
    store.save("ba20", simple_data(20, 2), shared);
    CHECK(listed_names(store) == std::vector<std::string>{"ba10", "ba20"});
    CHECK(fs::exists(dir / "ba20" / "part-0.safetensors"));

    // meta.json lists both, with the sizes and crc32s their writers computed.
    const std::string meta = read_bytes(dir / "ba20" / "meta.json");
    const auto files = nlohmann::json::parse(meta).at("files");
    for (const auto& file : shared) {
      CHECK(files.at(file.name).at("bytes").get<std::uint64_t>() == fs::file_size(dir / "ba20" / file.name));
      CHECK(files.at(file.name).at("crc32").get<std::uint32_t>() ==
            zlib_crc(read_bytes(dir / "ba20" / file.name)));
    }
    const baton::CheckpointData all = baton::load_checkpoint((dir / "ba20").string());
    REQUIRE(all.files.size() == 2);
    CHECK(all.files[1].second.tensor("w").equal(at::full({2}, 11.0f)));
    CHECK(all.files[1].second.get_int("rows/w") == 2);

    // A reader of part-0 alone: part-1 is not loaded, and its damage is not seen while its size is right...
    const baton::FileFilter part0 = [](const std::string& file) { return file != "part-1.safetensors"; };
    flip_last_byte(dir / "ba20" / "part-1.safetensors");
    const baton::CheckpointData mine = baton::load_checkpoint((dir / "ba20").string(), part0);
    REQUIRE(mine.files.size() == 1);
    CHECK(mine.files[0].first == "part-0.safetensors");
    CHECK(contains(checkpoint_error_of((dir / "ba20").string()), "part-1.safetensors: crc32 mismatch"));
    // ...but a missing or truncated one is.
    const std::string whole = read_bytes(dir / "ba20" / "part-1.safetensors");
    write_bytes(dir / "ba20" / "part-1.safetensors", whole.substr(0, whole.size() - 8));
    CHECK(contains(baton::test::error_text<baton::CheckpointError>(
                       [&] { baton::verify_checkpoint((dir / "ba20").string(), part0); }),
                   "part-1.safetensors: size is"));
    fs::remove(dir / "ba20" / "part-1.safetensors");
    CHECK(contains(baton::test::error_text<baton::CheckpointError>(
                       [&] { baton::verify_checkpoint((dir / "ba20").string(), part0); }),
                   "part-1.safetensors: missing"));
  }

  TEST_CASE("checkpoint store: a sharded save that stops before its commit leaves the previous checkpoint newest") {
    auto dir = baton::test::scratch_dir("ckpt_shared_crash");
    {
      baton::CheckpointStore store(dir.string(), 0);
      store.save("ba10", simple_data(10, 1));
      baton::StateDict rows;
      rows.set_tensor("w", at::full({2}, 3.0f));
      const baton::SharedFile written = store.write_shared("ba20", "part-0.safetensors", rows);
      // A rank's file that never arrived (its rank died): the commit fails naming it, and nothing is committed.
      const std::string error = baton::test::error_text([&] {
        store.save("ba20", simple_data(20, 2), {written, {"part-1.safetensors", 100, 7, {}}});
      });
      CHECK(contains(error, "cannot save checkpoint " + (dir / "ba20").string()));
      CHECK(contains(error, "part-1.safetensors is missing"));
      CHECK(listed_names(store) == std::vector<std::string>{"ba10"});
      // Another rank's files written, rank 0 killed before its commit: the hidden folder is all that is left.
      store.write_shared("ba30", "part-0.safetensors", rows);
    }
    baton::CheckpointStore store(dir.string(), 0);
    CHECK(folder_names(dir) == std::vector<std::string>{"ba10"});
    std::vector<std::string> warnings;
    auto newest = store.newest_valid(warnings);
    REQUIRE(newest.has_value());
    CHECK(newest->name == "ba10");
  }
}
