#include "checkpoint_command.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <CLI/CLI.hpp>

#include "baton/text.h"
#include "baton/time.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/row_shards.h"
#include "sharding/layout.h"
#include "sharding/sharded_state.h"

namespace baton::cli {
namespace {

std::int64_t scalar_int(const StateDict* section, const std::string& key, std::int64_t otherwise) {
  return section && section->has(key) ? section->get_int(key) : otherwise;
}

std::int64_t bytes_of(const RowShardReader::Info& info, std::int64_t rows) {
  std::int64_t n = rows * static_cast<std::int64_t>(c10::elementSize(info.dtype));
  for (std::size_t d = 1; d < info.shape.size(); ++d) n *= info.shape[d];
  return n;
}

// What rank `rank` of `world` would read of the shard folders, and take from them, in a sharded resume: its rows of
// every model tensor and of every per-element optimizer tensor, the counts of the parameters it holds rows of, and
// every file's header (each rank opens every file). The same arithmetic as the resume's, from the headers alone.
struct Plan {
  std::uint64_t read = 0;
  std::uint64_t taken = 0;
};

Plan plan_for(const RowShardReader& model, const RowShardReader* optimizer, std::uint64_t headers,
              const sharding::Layout& layout, int rank) {
  Plan plan;
  plan.read = headers;
  for (std::size_t i = 0; i < layout.slots().size(); ++i) {
    const sharding::Slot& slot = layout.slots()[i];
    const sharding::RowRange rows = layout.rows_of(i, rank);
    if (rows.count() == 0) continue;
    const auto& info = model.tensors().at(slot.name);
    plan.read += model.bytes_for_rows(slot.name, rows.begin, rows.count());
    plan.taken += static_cast<std::uint64_t>(bytes_of(info, rows.count()));
    if (!optimizer) continue;
    for (const auto& [key, state] : optimizer->tensors()) {
      if (key.rfind(slot.name + "/", 0) != 0 || key.find('/', slot.name.size() + 1) != std::string::npos) continue;
      const bool per_element = state.dtype == info.dtype && state.shape == info.shape;
      const std::int64_t begin = per_element ? rows.begin : 0;
      const std::int64_t count = per_element ? rows.count() : (state.shape.empty() ? 1 : state.shape[0]);
      plan.read += optimizer->bytes_for_rows(key, begin, count);
      plan.taken += static_cast<std::uint64_t>(bytes_of(state, count));
    }
  }
  return plan;
}

// A plugin's row tensors: each rank reads its rows of each in a sharded run's layout at world size `world`, as
// the resume reads them ahead of the plugin.
void plan_rows(const RowShardReader& reader, int rank, int world, Plan& plan) {
  std::vector<sharding::TensorSpec> specs;
  for (const auto& [name, info] : reader.tensors()) specs.push_back({name, info.shape, info.dtype});
  const sharding::Layout layout(specs, rank, world);
  for (const sharding::Slot& slot : layout.slots()) {
    if (slot.held.count() == 0) continue;
    plan.read += reader.bytes_for_rows(slot.name, slot.held.begin, slot.held.count());
    plan.taken += static_cast<std::uint64_t>(bytes_of(reader.tensors().at(slot.name), slot.held.count()));
  }
}

}  // namespace

CLI::App* add_checkpoint_subcommand(CLI::App& app, CheckpointArgs& args) {
  auto* checkpoint = app.add_subcommand("checkpoint", "inspect a checkpoint: checkpoint info FOLDER");
  checkpoint->require_subcommand(1);
  auto* info = checkpoint->add_subcommand(
      "info", "what a checkpoint holds, per rank, and what a resume at other world sizes would read");
  info->add_option("folder", args.folder, "a checkpoint folder (runs/x/checkpoints/ep3)")->required();
  info->add_option("--world", args.worlds, "world sizes to plan a resume at (default: 1, the writer's, twice it)")
      ->check(CLI::PositiveNumber);
  info->add_flag("--verify", args.verify, "also check every file's size and crc32 (reads the whole checkpoint)");
  return checkpoint;
}

int run_checkpoint(const CheckpointArgs& args) {
  const std::string& folder = args.folder;
  if (args.verify) verify_checkpoint(folder);
  // The state file and meta.json are read; every other file is checked for its size.
  const CheckpointData data = load_checkpoint(folder, [](const std::string&) { return false; });
  const StateDict* trainer = data.section("trainer");
  const std::int64_t world = scalar_int(trainer, "world_size", 1), batch = scalar_int(trainer, "batch_size", 0);
  const std::string sharding = trainer && trainer->has("sharding") ? trainer->get_string("sharding") : "none";
  std::printf("checkpoint %s: %s\n", folder.c_str(), format_timestamp(data.timestamp).c_str());
  std::printf("written by %lld rank(s), sharding %s, batch size %lld per rank (global %lld)\n",
              static_cast<long long>(world), sharding.c_str(), static_cast<long long>(batch),
              static_cast<long long>(batch * world));
  std::map<std::string, std::pair<int, std::uint64_t>> folders;  // shard folder: files, bytes
  std::uint64_t total = 0;
  for (const SharedFile& file : data.listed) {
    total += file.bytes;
    const std::size_t slash = file.name.find('/');
    if (slash == std::string::npos) {
      std::printf("  %-40s %s\n", file.name.c_str(), format_bytes(static_cast<std::int64_t>(file.bytes)).c_str());
      continue;
    }
    auto& entry = folders[file.name.substr(0, slash + 1)];
    ++entry.first;
    entry.second += file.bytes;
  }
  for (const auto& [name, entry] : folders)
    std::printf("  %-40s %s in %d file(s), one per rank (%s each on average)\n", name.c_str(),
                format_bytes(static_cast<std::int64_t>(entry.second)).c_str(), entry.first,
                format_bytes(static_cast<std::int64_t>(entry.second / static_cast<std::uint64_t>(entry.first))).c_str());
  std::printf("  %-40s %s\n", "all files", format_bytes(static_cast<std::int64_t>(total)).c_str());

  // Every folder of row shard files: model/ and optimizer/ of a sharded run, a plugin's row tensors (a sharded EMA's).
  const std::string what = "checkpoint " + folder;
  std::unique_ptr<RowShardReader> model, optimizer;
  std::vector<std::unique_ptr<RowShardReader>> plugins;
  for (const auto& [name, entry] : folders) {
    const std::string kind = name.substr(0, name.size() - 1);
    auto reader = std::make_unique<RowShardReader>(folder_sources(data, folder, kind), what);
    if (kind == "model") model = std::move(reader);
    else if (kind == "optimizer") optimizer = std::move(reader);
    else plugins.push_back(std::move(reader));
  }
  if (!model && plugins.empty()) {
    std::printf("no shard folders: a resume at any world size reads state.safetensors whole on every rank\n");
    return 0;
  }
  std::uint64_t headers = (model ? model->bytes_read() : 0) + (optimizer ? optimizer->bytes_read() : 0);
  for (const auto& reader : plugins) headers += reader->bytes_read();
  std::vector<sharding::TensorSpec> specs;
  if (model)
    for (const auto& [name, info] : model->tensors()) specs.push_back({name, info.shape, info.dtype});

  std::vector<int> worlds = args.worlds;
  if (worlds.empty()) worlds = {1, static_cast<int>(world), static_cast<int>(2 * world)};
  std::sort(worlds.begin(), worlds.end());
  worlds.erase(std::unique(worlds.begin(), worlds.end()), worlds.end());
  for (int w : worlds) {
    const sharding::Layout layout(specs, 0, w);
    std::vector<std::uint64_t> read, taken;
    for (int r = 0; r < w; ++r) {
      Plan plan = model ? plan_for(*model, optimizer.get(), headers, layout, r) : Plan{headers, 0};
      for (const auto& reader : plugins) plan_rows(*reader, r, w, plan);
      read.push_back(plan.read);
      taken.push_back(plan.taken);
    }
    const std::string line = read_report(read, taken);
    std::printf("a sharded resume at %d rank(s): %s\n", w, line.c_str());
  }
  return 0;
}

}  // namespace baton::cli
