#include "baton_test.h"

#include <map>
#include <string>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include "baton/error.h"
#include "error_text.h"
#include "sharding/layout.h"
#include "tensor_values.h"

using namespace baton;
using baton::sharding::Layout;
using baton::sharding::RowRange;
using baton::sharding::TensorSpec;
using baton::test::error_text;

namespace {

// The issue's shapes: a matrix whose rows do not divide, a vector, a one-row vector (trailing ranks empty) and a
// scalar (one row, held by rank 0).
std::vector<TensorSpec> issue_shapes() {
  return {{"w", {7, 3}, at::kFloat}, {"b", {10}, at::kFloat}, {"one", {1}, at::kFloat}, {"scalar", {}, at::kFloat}};
}

// Tensor t's element i holds 100 * (t + 1) + i: every element of every tensor has its own value (at most 409, exact
// in float), so a value names its tensor and position.
std::vector<at::Tensor> numbered(const std::vector<TensorSpec>& specs) {
  std::vector<at::Tensor> out;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    std::int64_t numel = 1;
    for (auto d : specs[t].shape) numel *= d;
    out.push_back((at::arange(numel, at::kFloat) + 100.0 * static_cast<double>(t + 1))
                      .reshape(specs[t].shape)
                      .to(specs[t].dtype));
  }
  return out;
}

using baton::test::values_of;

struct Expected {
  RowRange rows[4];  // by rank
  std::int64_t rows_per_rank;
  std::int64_t offset;
};

}  // namespace

TEST_SUITE("sharding layout") {
  TEST_CASE("rows and offsets of (7, 3), (10,), (1,), () at 3 and 4 ranks, worked out by hand") {
    // W = 3:
    //   (7, 3): c = ceil(7/3) = 3 rows of 3: ranks hold [0,3) [3,6) [6,7); slot 3*3 = 9 at offset 0
    //   (10,):  c = ceil(10/3) = 4:          ranks hold [0,4) [4,8) [8,10); slot 4 at offset 0 + 9 = 9
    //   (1,):   c = ceil(1/3) = 1:           ranks hold [0,1) [1,1) [1,1);  slot 1 at offset 9 + 4 = 13
    //   ():     one row, c = 1:              the same as (1,);              slot 1 at offset 13 + 1 = 14
    //   S = 9 + 4 + 1 + 1 = 15 on every rank
    // W = 4:
    //   (7, 3): c = ceil(7/4) = 2 rows of 3: [0,2) [2,4) [4,6) [6,7); slot 6 at offset 0
    //   (10,):  c = ceil(10/4) = 3:          [0,3) [3,6) [6,9) [9,10); slot 3 at offset 6
    //   (1,):   c = 1:                       [0,1) [1,1) [1,1) [1,1);  slot 1 at offset 9
    //   ():     c = 1:                       the same;                 slot 1 at offset 10
    //   S = 6 + 3 + 1 + 1 = 11
    const std::map<int, std::vector<Expected>> expected{
        {3,
         {{{{0, 3}, {3, 6}, {6, 7}}, 3, 0},
          {{{0, 4}, {4, 8}, {8, 10}}, 4, 9},
          {{{0, 1}, {1, 1}, {1, 1}}, 1, 13},
          {{{0, 1}, {1, 1}, {1, 1}}, 1, 14}}},
        {4,
         {{{{0, 2}, {2, 4}, {4, 6}, {6, 7}}, 2, 0},
          {{{0, 3}, {3, 6}, {6, 9}, {9, 10}}, 3, 6},
          {{{0, 1}, {1, 1}, {1, 1}, {1, 1}}, 1, 9},
          {{{0, 1}, {1, 1}, {1, 1}, {1, 1}}, 1, 10}}}};
    const std::map<int, std::int64_t> buffer_size{{3, 15}, {4, 11}};
    const std::vector<std::int64_t> row_numel{3, 1, 1, 1};
    for (int world : {3, 4}) {
      CAPTURE(world);
      for (int rank = 0; rank < world; ++rank) {
        CAPTURE(rank);
        Layout layout(issue_shapes(), rank, world);
        CHECK(layout.rank() == rank);
        CHECK(layout.world_size() == world);
        REQUIRE(layout.slots().size() == 4);
        CHECK((layout.dtypes() == std::vector<at::ScalarType>{at::kFloat}));
        CHECK(layout.buffer_numel(at::kFloat) == buffer_size.at(world));
        CHECK(layout.buffer_numel(at::kDouble) == 0);
        for (std::size_t i = 0; i < 4; ++i) {
          CAPTURE(i);
          const auto& slot = layout.slots()[i];
          const Expected& e = expected.at(world)[i];
          CHECK(slot.rows_per_rank == e.rows_per_rank);
          CHECK(slot.row_numel == row_numel[i]);
          CHECK(slot.offset == e.offset);
          CHECK(slot.held.begin == e.rows[rank].begin);
          CHECK(slot.held.end == e.rows[rank].end);
          for (int other = 0; other < world; ++other) {
            CHECK(layout.rows_of(i, other).begin == e.rows[other].begin);
            CHECK(layout.rows_of(i, other).end == e.rows[other].end);
          }
        }
        // Shard shapes: a scalar's shard is one row on rank 0 and none elsewhere.
        CHECK((layout.slots()[0].shard_shape() ==
               std::vector<std::int64_t>{expected.at(world)[0].rows[rank].count(), 3}));
        CHECK((layout.slots()[3].shard_shape() == std::vector<std::int64_t>{rank == 0 ? 1 : 0}));
        CHECK(layout.index_of("scalar") == 3);
      }
    }
  }

  TEST_CASE("buckets join consecutive slots up to a size; packing and unpacking by bucket equals the whole buffer's") {
    // W = 3, float slots of 9, 4, 1 and 1 elements at offsets 0, 9, 13, 14 (the case above). At 10 elements
    // (40 bytes) per bucket: [0, 9), then 4 + 1 + 1 = 6 more: [9, 15). At one element: each slot alone.
    Layout layout(issue_shapes(), 1, 3);
    const auto ranges = [](const std::vector<sharding::Bucket>& buckets) {
      std::vector<std::pair<std::int64_t, std::int64_t>> out;
      for (const auto& b : buckets) out.emplace_back(b.begin, b.end);
      return out;
    };
    using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;
    CHECK(ranges(layout.buckets(40)) == Ranges{{0, 9}, {9, 15}});
    CHECK(ranges(layout.buckets(4)) == Ranges{{0, 9}, {9, 13}, {13, 14}, {14, 15}});
    CHECK(ranges(layout.buckets(1 << 20)) == Ranges{{0, 15}});
    // With groups (zero3's units), a bucket also ends where the group changes, whatever room is left.
    CHECK(ranges(layout.buckets(1 << 20, {0, 0, 1, 1})) == Ranges{{0, 13}, {13, 15}});
    CHECK(ranges(layout.buckets(1 << 20, {0, 1, 1, 2})) == Ranges{{0, 9}, {9, 14}, {14, 15}});
    CHECK(ranges(layout.buckets(40, {0, 0, 0, 1})) == Ranges{{0, 9}, {9, 14}, {14, 15}});
    CHECK_THROWS_WITH_AS(layout.buckets(40, {0, 1}), "layout: buckets: 2 groups given for 4 slots", baton::Error);
    const auto full = numbered(issue_shapes());
    const at::Tensor whole = layout.pack(full, at::kFloat).view({3, 15});
    for (const auto& bucket : layout.buckets(4)) {
      CAPTURE(bucket.begin);
      const at::Tensor part = layout.pack(full, bucket);
      CHECK(part.equal(whole.narrow(1, bucket.begin, bucket.numel()).reshape({-1})));
      // Unpacking the bucket writes its slots and nothing else.
      std::vector<at::Tensor> out;
      for (const auto& t : full) out.push_back(at::zeros_like(t));
      layout.unpack_into(part, out, bucket);
      for (std::size_t i = 0; i < out.size(); ++i) {
        const auto& slot = layout.slots()[i];
        const bool inside = slot.offset >= bucket.begin && slot.offset + slot.slot_numel() <= bucket.end;
        CHECK(out[i].equal(inside ? full[i] : at::zeros_like(full[i])));
      }
    }
  }

  TEST_CASE("the ranks' shards together are each tensor, bitwise, every element once; buffers hold them padded") {
    const auto specs = issue_shapes();
    const auto full = numbered(specs);
    for (int world : {3, 4}) {
      CAPTURE(world);
      // How many times each value (tensor t, element i: 100 (t + 1) + i) turns up over all ranks' shards.
      std::map<double, int> seen;
      std::vector<std::vector<at::Tensor>> pieces(specs.size());         // by tensor, in rank order
      std::vector<std::vector<at::Tensor>> buffer_pieces(specs.size());  // the same read back from the buffers
      for (int rank = 0; rank < world; ++rank) {
        Layout layout(specs, rank, world);
        at::Tensor buffer = layout.new_buffer(at::kFloat, at::kCPU);
        CHECK(buffer.numel() == (world == 3 ? 15 : 11));  // the same on every rank
        buffer.fill_(-1);                                 // write_shards must zero the padding itself
        layout.write_shards(full, buffer);
        std::int64_t held = 0;
        for (std::size_t i = 0; i < specs.size(); ++i) {
          at::Tensor shard = layout.shard(full[i], i);
          at::Tensor stored = layout.shard_of_buffer(buffer, i);
          CHECK((shard.sizes() == at::IntArrayRef(layout.slots()[i].shard_shape())));
          CHECK(at::equal(stored, shard));
          for (double v : values_of(shard)) ++seen[v];
          pieces[i].push_back(shard);
          buffer_pieces[i].push_back(stored);
          held += shard.numel();
          // The padding after the shard is zero.
          const auto& slot = layout.slots()[i];
          for (double v : values_of(buffer.narrow(0, slot.offset + slot.shard_numel(),
                                                 slot.slot_numel() - slot.shard_numel())))
            CHECK(v == 0);
        }
        // Zero-row shards exist here: rank >= 1 for (1,) and (); rank 3 of 4 has one row of (7, 3) and of (10,).
        if (rank >= 1) {
          CHECK(layout.shard(full[2], 2).numel() == 0);
          CHECK(layout.shard(full[3], 3).numel() == 0);
        }
        CHECK(held <= layout.buffer_numel(at::kFloat));
      }
      std::size_t total = 0;
      for (std::size_t i = 0; i < specs.size(); ++i) {
        at::Tensor rows = specs[i].shape.empty() ? full[i].reshape({1}) : full[i];
        CHECK(at::equal(at::cat(pieces[i]), rows));
        CHECK(at::equal(at::cat(buffer_pieces[i]), rows));
        total += static_cast<std::size_t>(full[i].numel());
      }
      CHECK(total == 21 + 10 + 1 + 1);
      CHECK(seen.size() == total);  // every value present ...
      for (const auto& [value, count] : seen) {
        CAPTURE(value);
        CHECK(count == 1);  // ... exactly once
      }
    }
  }

  TEST_CASE("a shard is a view of the full tensor; a buffer's shard is a view of the buffer") {
    Layout layout(issue_shapes(), 1, 3);
    auto full = numbered(issue_shapes());
    at::Tensor shard = layout.shard(full[0], 0);  // rows [3, 6) of (7, 3)
    CHECK(values_of(shard) == std::vector<double>{109, 110, 111, 112, 113, 114, 115, 116, 117});
    shard.fill_(0);
    CHECK(full[0].sum().item<double>() == (100 * 21 + 20 * 21 / 2) - (109 + 117) * 9 / 2);
    at::Tensor buffer = layout.new_buffer(at::kFloat, at::kCPU);
    layout.shard_of_buffer(buffer, 1).fill_(7);  // rows [4, 8) of (10,): offset 9, 4 elements
    CHECK(values_of(buffer) == std::vector<double>{0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7, 0, 0});
  }

  TEST_CASE("pack lays every rank's buffer out rank-major; unpack undoes it, dropping the padding") {
    const auto specs = issue_shapes();
    const auto full = numbered(specs);
    {
      // W = 4, by hand (offsets 0, 6, 9, 10; S = 11): rank q's part starts at 11 q.
      //   rank 0: w rows 0-1 = 100..105, b 0-2 = 200..202, one = 300, scalar = 400
      //   rank 1: w rows 2-3 = 106..111, b 3-5 = 203..205, padding 0, 0
      //   rank 2: w rows 4-5 = 112..117, b 6-8 = 206..208, 0, 0
      //   rank 3: w row 6 = 118..120 then 3 zeros, b 9 = 209 then 2 zeros, 0, 0
      Layout layout(specs, 2, 4);
      at::Tensor packed = layout.pack(full, at::kFloat);
      CHECK((packed.sizes() == at::IntArrayRef{44}));
      CHECK(values_of(packed) ==
            std::vector<double>{100, 101, 102, 103, 104, 105, 200, 201, 202, 300, 400,  //
                                106, 107, 108, 109, 110, 111, 203, 204, 205, 0,   0,    //
                                112, 113, 114, 115, 116, 117, 206, 207, 208, 0,   0,    //
                                118, 119, 120, 0,   0,   0,   209, 0,   0,   0,   0});
    }
    for (int world : {3, 4}) {
      CAPTURE(world);
      for (int rank = 0; rank < world; ++rank) {
        Layout layout(specs, rank, world);
        const std::int64_t size = layout.buffer_numel(at::kFloat);
        at::Tensor packed = layout.pack(full, at::kFloat);
        REQUIRE(packed.numel() == world * size);
        // Part q is exactly what rank q's write_shards stores.
        for (int q = 0; q < world; ++q) {
          Layout theirs(specs, q, world);
          at::Tensor buffer = theirs.new_buffer(at::kFloat, at::kCPU);
          theirs.write_shards(full, buffer);
          CHECK(at::equal(packed.narrow(0, q * size, size), buffer));
        }
        auto back = layout.unpack(packed);
        REQUIRE(back.size() == full.size());
        for (std::size_t i = 0; i < full.size(); ++i) {
          CHECK((back[i].sizes() == full[i].sizes()));
          CHECK(at::equal(back[i], full[i]));
        }
        // Into existing tensors, a parameter and a non-contiguous one among them.
        std::vector<at::Tensor> targets{at::zeros({3, 7}).t(), at::zeros({10}).requires_grad_(), at::zeros({1}),
                                        at::zeros(at::IntArrayRef{})};
        layout.unpack_into(packed, targets);
        for (std::size_t i = 0; i < full.size(); ++i) CHECK(at::equal(targets[i].detach(), full[i]));
        CHECK_FALSE(targets[1].grad_fn());
      }
    }
  }

  TEST_CASE("one buffer per dtype, each with its own offsets; a tensor of zero rows takes no space") {
    // W = 4: float tensors (7, 3) at 0 (slot 6), (6,) at 6: c = ceil(6/4) = 2, ranks hold [0,2) [2,4) [4,6) [6,6)
    // (rank 3 empty though 6 > 3: torch.chunk makes 3 chunks), slot 2; (0, 5) at 8: c = 0, slot 0; (8, 2) at 8:
    // c = 8/4 = 2 exactly, no padding, rank 3 holds [6,8), slot 2*2 = 4; S_float = 6 + 2 + 0 + 4 = 12.
    // The double tensor (5,): c = 2, [0,2) [2,4) [4,5) [5,5), slot 2 at offset 0 of its own buffer, S_double = 2.
    std::vector<TensorSpec> specs{{"w", {7, 3}, at::kFloat},
                                  {"d", {5}, at::kDouble},
                                  {"six", {6}, at::kFloat},
                                  {"none", {0, 5}, at::kFloat},
                                  {"even", {8, 2}, at::kFloat}};
    Layout layout(specs, 3, 4);
    CHECK((layout.dtypes() == std::vector<at::ScalarType>{at::kFloat, at::kDouble}));
    CHECK(layout.buffer_numel(at::kFloat) == 12);
    CHECK(layout.slots()[4].offset == 8);
    CHECK(layout.slots()[4].held.begin == 6);
    CHECK(layout.slots()[4].held.end == 8);
    CHECK(layout.buffer_numel(at::kDouble) == 2);
    CHECK(layout.slots()[1].offset == 0);
    CHECK(layout.slots()[2].offset == 6);
    CHECK(layout.slots()[3].offset == 8);
    CHECK(layout.slots()[2].held.count() == 0);
    CHECK(layout.slots()[1].held.count() == 0);
    CHECK((layout.slots()[3].shard_shape() == std::vector<std::int64_t>{0, 5}));
    auto full = numbered(specs);
    at::Tensor packed_double = layout.pack(full, at::kDouble);
    // d = 200..204: rank 0 [200, 201], rank 1 [202, 203], rank 2 [204, pad], rank 3 [pad, pad]
    CHECK(values_of(packed_double) == std::vector<double>{200, 201, 202, 203, 204, 0, 0, 0});
    CHECK((packed_double.scalar_type() == at::kDouble));
    auto back = layout.unpack(packed_double);
    CHECK_FALSE(back[0].defined());  // a float tensor: not in the double buffer
    CHECK(at::equal(back[1], full[1]));
    auto floats = layout.unpack(layout.pack(full, at::kFloat));
    CHECK(at::equal(floats[0], full[0]));
    CHECK(at::equal(floats[2], full[2]));
    CHECK((floats[3].sizes() == at::IntArrayRef{0, 5}));
    CHECK(at::equal(floats[4], full[4]));
    // Rank 3's float buffer: w row 6 (118..120, 3 zeros), six: nothing (2 zeros), even rows 6-7: 512..515
    // (tensor 4 numbers from 500).
    at::Tensor buffer = layout.new_buffer(at::kFloat, at::kCPU);
    layout.write_shards(full, buffer);
    CHECK(values_of(buffer) == std::vector<double>{118, 119, 120, 0, 0, 0, 0, 0, 512, 513, 514, 515});
  }

  TEST_CASE("wrong shapes, counts, sizes and ranks are refused with the numbers") {
    CHECK(error_text([] { Layout(issue_shapes(), 3, 3); }) ==
          "sharding layout: rank 3 is outside [0, 2] (world size 3)");
    CHECK(error_text([] { Layout(issue_shapes(), 0, 0); }) ==
          "sharding layout: the world size must be at least 1, not 0");
    CHECK(error_text([] { Layout({{"a", {2}, at::kFloat}, {"a", {3}, at::kFloat}}, 0, 2); }) ==
          "sharding layout: the tensor 'a' is given twice");
    CHECK(error_text([] { Layout({{"a", {2, -1}, at::kFloat}}, 0, 2); }) ==
          "sharding layout: the tensor 'a' has a negative dimension -1 in its shape [2, -1]");
    Layout layout(issue_shapes(), 0, 3);
    auto full = numbered(issue_shapes());
    CHECK(error_text([&] { layout.shard(at::ones({3, 7}), 0); }) ==
          "sharding: shard: the tensor 'w' has shape [3, 7], the layout's is [7, 3]");
    CHECK(error_text([&] { layout.index_of("bias"); }) == "sharding layout: no tensor named 'bias' (it has 4 tensors)");
    CHECK(error_text([&] { layout.pack({full[0], full[1]}, at::kFloat); }) ==
          "sharding: pack: 2 tensors given, the layout has 4");
    CHECK(error_text([&] { layout.pack(full, at::kDouble); }) ==
          "sharding: pack: the layout has no tensor of dtype Double");
    CHECK(error_text([&] { layout.unpack(at::zeros({44})); }) ==
          "sharding: unpack: the gathered Float buffer has shape [44], the layout's is [45] (3 ranks x 15 elements)");
    CHECK(error_text([&] { layout.write_shards(full, at::zeros({14})); }) ==
          "sharding: write_shards: the Float buffer has shape [14], the layout's is [15] (contiguous)");
    CHECK(error_text([&] { layout.shard_of_buffer(at::zeros({15}, at::kDouble), 1); }) ==
          "sharding: shard_of_buffer: the tensor 'b' lives in the Float buffer, not a Double one");
  }
}
