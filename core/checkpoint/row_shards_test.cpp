#include "baton_test.h"
#include "error_text.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/tensor.h>

#include "baton/error.h"
#include "checkpoint/row_shards.h"
#include "checkpoint/safetensors_file.h"

namespace fs = std::filesystem;
using baton::RowBlock;
using baton::RowShardReader;

namespace {

// The 5 x 3 tensor 0..14, row r being {3r, 3r+1, 3r+2}.
at::Tensor grid() { return at::arange(15, at::kFloat).reshape({5, 3}); }

}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("row shard files: PyTorch's offsets in the metadata; any rows read back from the blocks overlapping them") {
    const auto dir = baton::test::scratch_dir("row-shards");
    const at::Tensor w = grid();
    // Two ranks' files: rows 0-2 and 3-4 of w, and a 0-d count in rank 0's.
    baton::write_row_shard_file((dir / "a.safetensors").string(),
                                {{"w", w.narrow(0, 0, 3), 0}, {"step", at::tensor(7, at::kLong).reshape({}), 0}});
    baton::write_row_shard_file((dir / "b.safetensors").string(), {{"w", w.narrow(0, 3, 2), 3}});
    CHECK(baton::row_shard_file_name(0) == "shard-00001-model-00001-of-00001.safetensors");
    const baton::SafetensorsFile b((dir / "b.safetensors").string());
    CHECK(b.metadata().at("DCP_SHARDING_INFO") == R"({"w":{"saved_offsets":[3,0]}})");

    const RowShardReader reader(baton::safetensors_in(dir.string()), "test");
    REQUIRE(reader.tensors().size() == 2);
    CHECK(reader.tensors().at("w").shape == std::vector<std::int64_t>{5, 3});
    CHECK(reader.tensors().at("step").shape.empty());
    const std::uint64_t headers = reader.bytes_read();
    // Rows 2-3 span both files: {6, 7, 8} and {9, 10, 11}. A row is 12 bytes, so a checksummed block is all of a
    // file's rows (341 rows would make 4 KiB): both blocks are read whole, 5 rows.
    at::Tensor rows = at::empty({2, 3}, at::kFloat);
    reader.read_rows("w", 2, rows);
    CHECK(at::equal(rows, at::tensor({6.f, 7.f, 8.f, 9.f, 10.f, 11.f}).reshape({2, 3})));
    CHECK(reader.bytes_read() - headers == 5 * 12);
    CHECK(at::equal(reader.read("w"), w));
    CHECK(reader.read("step").item<std::int64_t>() == 7);

    // Rows beyond the tensor, or of another row shape: refused naming the tensor.
    at::Tensor wide = at::empty({1, 4}, at::kFloat);
    CHECK(baton::test::contains(baton::test::error_text([&] { reader.read_rows("w", 0, wide); }),
                                "test: rows 0 to 1 as Float[1, 4] are not rows of tensor 'w' (Float[5, 3])"));
    // Without rank b's file the tensor looks 3 rows tall, so a reader checks the shape against the model's
    // (sharding::read_model_rows).
    const RowShardReader only_a({{(dir / "a.safetensors").string(), {}, {}, "a"}}, "test");
    CHECK(only_a.tensors().at("w").shape == std::vector<std::int64_t>{3, 3});
  }

  TEST_CASE("row shard files: a block split along another dim (as Python may write) lands in its columns; overlaps "
            "and flipped bytes are refused naming the file") {
    const auto dir = baton::test::scratch_dir("row-shards-columns");
    const at::Tensor w = grid();
    fs::create_directories(dir / "cols");
    // Columns 0-1 and column 2 of rows 1-4, and row 0 whole: written as PyTorch's writer would, by hand here.
    baton::write_safetensors((dir / "cols" / "x.safetensors").string(), {{"w", w.narrow(0, 1, 4).narrow(1, 0, 2)}},
                             {{"DCP_SHARDING_INFO", R"({"w":{"saved_offsets":[1,0]}})"}});
    baton::write_safetensors((dir / "cols" / "y.safetensors").string(), {{"w", w.narrow(0, 1, 4).narrow(1, 2, 1)}},
                             {{"DCP_SHARDING_INFO", R"({"w":{"saved_offsets":[1,2]}})"}});
    baton::write_safetensors((dir / "cols" / "z.safetensors").string(), {{"w", w.narrow(0, 0, 1)}},
                             {{"DCP_SHARDING_INFO", R"({"w":{"saved_offsets":[0,0]}})"}});
    const RowShardReader columns(baton::safetensors_in((dir / "cols").string()), "python");
    CHECK(at::equal(columns.read("w"), w));

    // Two blocks claiming row 2.
    fs::create_directories(dir / "overlap");
    baton::write_row_shard_file((dir / "overlap" / "a.safetensors").string(), {{"w", w.narrow(0, 0, 3), 0}});
    baton::write_row_shard_file((dir / "overlap" / "b.safetensors").string(), {{"w", w.narrow(0, 2, 3), 2}});
    CHECK(baton::test::contains(
        baton::test::error_text([&] { RowShardReader(baton::safetensors_in((dir / "overlap").string()), "t"); }),
        "tensor 'w': the blocks in "));

    // A flipped byte in row 4 (rank b's second row): reading rows 0-2 does not touch it, reading row 4 fails.
    const fs::path b = dir / "overlap" / "b.safetensors";
    baton::write_row_shard_file(b.string(), {{"w", w.narrow(0, 3, 2), 3}});
    {
      std::fstream f(b, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(fs::file_size(b) - 2));
      f.put('\x7f');
    }
    fs::remove(dir / "overlap" / "a.safetensors");
    baton::write_row_shard_file((dir / "overlap" / "a.safetensors").string(), {{"w", w.narrow(0, 0, 3), 0}});
    const RowShardReader damaged(baton::safetensors_in((dir / "overlap").string()), "ckpt");
    at::Tensor first = at::empty({3, 3}, at::kFloat);
    damaged.read_rows("w", 0, first);
    CHECK(at::equal(first, w.narrow(0, 0, 3)));
    const std::string error = baton::test::error_text([&] { damaged.read("w"); });
    CHECK(baton::test::contains(error, "b.safetensors: tensor 'w': rows 3 to 5 do not match their crc32"));
  }
}
