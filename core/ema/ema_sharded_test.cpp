// The EMA sharded over a data-parallel run's ranks (EmaOptions::shard_over), with ranks as threads of this process
// joined over loopback Gloo: each rank keeps its rows of every tensor (sharding/layout.h), updates them without a
// collective, and the gathered EMA is the one a single process computes.
#include "baton_test.h"

#include <algorithm>
#include <map>
#include <mutex>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include "baton/communicator.h"
#include "baton/ema.h"
#include "baton/error.h"
#include "baton/state_dict.h"
#include "loopback_ranks.h"
#include "shard_checks.h"

using namespace baton;

namespace {

// 5x4 + 4 | BatchNorm 4 + 4, buffers 4 + 4 + 1 (int) | 4x3 + 3: 55 floating elements in 8 tensors, and a counter.
torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(5, 4), torch::nn::BatchNorm1d(4), torch::nn::Linear(4, 3));
}

// Every floating tensor i holds arange(numel) / 8 + 100 i + k, so a misplaced slice shows in any comparison; the
// batch-norm counter holds k. The same on every rank, as data-parallel training keeps it.
void set_weights(torch::nn::Sequential& model, double k) {
  at::NoGradGuard no_grad;
  int i = 0;
  auto fill = [&](at::Tensor t) {
    if (t.is_floating_point())
      t.copy_(at::arange(t.numel(), at::kFloat).div(8).view(t.sizes()) + (100.0 * i + k));
    else
      t.fill_(static_cast<std::int64_t>(k));
    ++i;
  };
  for (auto& p : model->parameters()) fill(p);
  for (auto& b : model->buffers()) fill(b);
}

// After updates with k = 1, 2, 3 at s = 0.5 from k = 0: c_k = s c_{k-1} + (1 - s) k gives 0.5, 1.25, 2.125, so
// every averaged tensor must equal its k = 2.125 weights, and the counter (copied, not averaged) 3.
void check_closed_form(const std::vector<std::pair<std::string, at::Tensor>>& ema) {
  torch::nn::Sequential expected = small_model();
  set_weights(expected, 2.125);
  std::size_t i = 0;
  for (const auto& item : expected->named_parameters()) {
    REQUIRE(ema.at(i).first == item.key());
    CHECK(ema.at(i).second.allclose(item.value()));
    ++i;
  }
  for (const auto& item : expected->named_buffers()) {
    REQUIRE(ema.at(i).first == item.key());
    if (item.value().is_floating_point())
      CHECK(ema.at(i).second.allclose(item.value()));
    else
      CHECK(ema.at(i).second.item<std::int64_t>() == 3);
    ++i;
  }
  CHECK(i == ema.size());
}

// The updates check_closed_form expects, from weights at k = 0.
void update_with_k_1_2_3(ExponentialMovingAverage& ema, torch::nn::Sequential& model) {
  for (int k = 1; k <= 3; ++k) {
    set_weights(model, k);
    ema.update(*model);
  }
}

bool same(const std::vector<std::pair<std::string, at::Tensor>>& a,
          const std::vector<std::pair<std::string, at::Tensor>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || a[i].second.scalar_type() != b[i].second.scalar_type() ||
        !at::equal(a[i].second, b[i].second))
      return false;
  return true;
}

EmaOptions options(double smoothing, std::shared_ptr<Communicator> comm = nullptr) {
  EmaOptions o;
  o.smoothing = smoothing;
  o.threads = 1;  // the ranks are threads already
  o.shard_over = std::move(comm);
  return o;
}

// A run sharded zero3 between steps, as the EMA sees it: the model's parameters emptied, each rank holding its rows
// of them (torch.chunk's, computed here) in tensors of its own, the buffers whole.
struct HeldModel {
  torch::nn::Sequential model = small_model();
  std::vector<HeldRows> held;
  int rank, world;

  HeldModel(int rank_in, int world_in) : rank(rank_in), world(world_in) {
    set_weights(model, 0);
    at::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      held.push_back({item.key(), item.value().sizes().vec(),
                      baton::test::chunk_rows(item.value(), rank, world).clone()});
      item.value().set_data(at::empty({0}));
    }
  }
  // The run's weights at k: the rows of each parameter and the whole buffers.
  void set(double k) {
    auto whole = small_model();
    set_weights(whole, k);
    at::NoGradGuard no_grad;
    std::size_t i = 0;
    for (auto& p : whole->parameters()) held[i++].rows.copy_(baton::test::chunk_rows(p, rank, world));
    auto mine = model->buffers();
    auto theirs = whole->buffers();
    for (std::size_t b = 0; b < mine.size(); ++b) mine[b].copy_(theirs[b]);
  }
  std::vector<HeldRows> rows_now() const { return held; }
  std::vector<at::Tensor> copies() const {
    std::vector<at::Tensor> out;
    for (const auto& h : held) out.push_back(h.rows.clone());
    return out;
  }
};

}  // namespace

TEST_SUITE("ema_sharded") {
  TEST_CASE("held rows (sharding zero3): the EMA reads, swaps and writes each rank's rows of emptied parameters") {
    for (int world : {1, 2, 3}) {
      CAPTURE(world);
      const auto body = [world](std::shared_ptr<Communicator> comm) {
        HeldModel run(comm ? comm->rank() : 0, world);
        EmaOptions o = options(0.5, comm);
        o.held_rows = [&run] { return run.rows_now(); };
        ExponentialMovingAverage ema(*run.model, o);  // starts from the rows at k = 0
        CHECK(ema.sharded() == (world > 1));
        for (double k : {1.0, 2.0, 3.0}) {
          run.set(k);
          ema.update(*run.model);
        }
        check_closed_form(ema.state_dict());
        // Swapped in: the rows hold this rank's rows of the EMA (k = 2.125), the model's buffers the EMA's; the
        // model's parameters stay empty. Swapped back: the raw rows bitwise.
        const auto raw = run.copies();
        HeldModel expected(comm ? comm->rank() : 0, world);
        expected.set(2.125);
        ema.swap(*run.model);
        for (std::size_t i = 0; i < run.held.size(); ++i) {
          CAPTURE(run.held[i].name);
          CHECK(run.held[i].rows.allclose(expected.held[i].rows));
        }
        CHECK(run.model->buffers()[0].allclose(expected.model->buffers()[0]));
        CHECK(run.model->parameters()[0].numel() == 0);
        check_closed_form(ema.state_dict());  // still the EMA while swapped (gathered from the shard)
        ema.swap(*run.model);
        for (std::size_t i = 0; i < run.held.size(); ++i) CHECK(at::equal(run.held[i].rows, raw[i]));
        // copy_to writes the rows.
        ema.copy_to(*run.model);
        for (std::size_t i = 0; i < run.held.size(); ++i) CHECK(run.held[i].rows.allclose(expected.held[i].rows));
      };
      if (world == 1)
        body(nullptr);
      else
        baton::test::run_ranks(world, body);
    }
  }

  TEST_CASE("held rows over several ranks need a sharded EMA") {
    baton::test::run_ranks(2, [](std::shared_ptr<Communicator> comm) {
      HeldModel run(comm->rank(), 2);
      EmaOptions o = options(0.5);  // whole, not sharded
      o.held_rows = [&run] { return run.rows_now(); };
      CHECK_THROWS_WITH_AS(ExponentialMovingAverage(*run.model, o),
                           doctest::Contains("over several ranks the EMA must be sharded as the run is"), Error);
    });
  }

  TEST_CASE("each rank keeps its rows of every tensor, updates them with no collective, gathers the closed form") {
    for (int world : {2, 3}) {
      CAPTURE(world);
      baton::test::run_ranks(world, [world](std::shared_ptr<Communicator> comm) {
        auto model = small_model();
        set_weights(model, 0);
        ExponentialMovingAverage ema(*model, options(0.5, comm));
        CHECK(ema.sharded());
        // FSDP2's Shard(0): every rank keeps a block of ceil(rows / W) rows of each floating tensor (padded where
        // it holds fewer), plus the 8-byte counter kept whole. Rows x row size: [4, 5], [4] x 5 (a bias, batch
        // norm's weight, bias, running mean and variance), [3, 4], [3]. W = 2: 2*5 + 5*2 + 2*4 + 2 = 30 fp32;
        // W = 3: 2*5 + 5*2 + 1*4 + 1 = 25.
        const std::int64_t held = world == 2 ? 30 : 25;
        CHECK(ema.full_bytes() == 55 * 4 + 8);
        CHECK(ema.bytes() == held * 4 + 8);
        const std::int64_t before = comm->collectives();
        update_with_k_1_2_3(ema, model);
        CHECK(comm->collectives() == before);
        check_closed_form(ema.state_dict());
        CHECK(comm->collectives() == before + 1);  // one allgather for the whole EMA
      });
    }
  }

  TEST_CASE("sharded and whole EMAs agree bit for bit: warmup smoothing, exclude, buffers = copy, fp32 of bf16") {
    baton::test::run_ranks(2, [](std::shared_ptr<Communicator> comm) {
      struct Variant {
        const char* name;
        EmaOptions options;
        bool bf16;
      };
      std::vector<Variant> variants;
      variants.push_back({"fp32", options(0.9), false});
      variants.push_back({"exclude", options(0.9), false});
      variants.back().options.exclude = {"2.*"};
      variants.push_back({"buffers copied", options(0.9), false});
      variants.back().options.buffers = EmaBuffers::copy;
      variants.push_back({"bf16 weights, fp32 EMA", options(0.9), true});
      variants.back().options.float32 = true;
      variants.push_back({"bf16 weights, bf16 EMA", options(0.9), true});
      for (const auto& variant : variants) {
        CAPTURE(variant.name);
        auto model = small_model();
        if (variant.bf16) model->to(at::kBFloat16);
        set_weights(model, 0);
        EmaOptions sharded_options = variant.options;
        sharded_options.shard_over = comm;
        ExponentialMovingAverage whole(*model, variant.options), sharded(*model, sharded_options);
        for (int k = 1; k <= 6; ++k) {
          set_weights(model, k * 0.37);
          const double s = k < 3 ? 0.25 * k : 0.9;  // a changing smoothing, as warmup gives
          whole.update(*model, s);
          sharded.update(*model, s);
        }
        CHECK(same(whole.state_dict(), sharded.state_dict()));
      }
    });
  }

  TEST_CASE("swap gathers the EMA into the model and puts the raw weights back bitwise; get names sharded tensors") {
    baton::test::run_ranks(2, [](std::shared_ptr<Communicator> comm) {
      auto model = small_model();
      set_weights(model, 0);
      ExponentialMovingAverage ema(*model, options(0.5, comm));
      update_with_k_1_2_3(ema, model);
      CHECK_THROWS_WITH_AS(ema.get("0.weight"),
                           doctest::Contains("'0.weight' is sharded across the ranks, so no rank holds all of it"),
                           Error);
      CHECK(ema.get("1.num_batches_tracked").item<std::int64_t>() == 3);  // integer buffers stay whole
      const auto raw = [&] {
        std::vector<std::pair<std::string, at::Tensor>> out;
        for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value().clone());
        for (const auto& item : model->named_buffers()) out.emplace_back(item.key(), item.value().clone());
        return out;
      }();
      {
        EmaSwapGuard guard(ema, *model);
        std::vector<std::pair<std::string, at::Tensor>> held;
        for (const auto& item : model->named_parameters()) held.emplace_back(item.key(), item.value());
        for (const auto& item : model->named_buffers()) held.emplace_back(item.key(), item.value());
        check_closed_form(held);
        CHECK(ema.get("0.weight").numel() == 20);  // whole while swapped in
        CHECK_THROWS_AS(ema.update(*model), Error);
      }
      std::vector<std::pair<std::string, at::Tensor>> back;
      for (const auto& item : model->named_parameters()) back.emplace_back(item.key(), item.value());
      for (const auto& item : model->named_buffers()) back.emplace_back(item.key(), item.value());
      CHECK(same(raw, back));
      // The slices are intact after the swap: another update still follows the closed form's recurrence.
      set_weights(model, 4);
      ema.update(*model);
      auto fresh = small_model();
      set_weights(fresh, 0.5 * 2.125 + 0.5 * 4);
      auto ema_now = ema.state_dict();
      std::size_t i = 0;
      for (const auto& item : fresh->named_parameters()) CHECK(ema_now.at(i++).second.allclose(item.value()));
    });
  }

  TEST_CASE("a whole EMA saved at any world size loads into W = 3 slices; copy_to and bad states") {
    baton::test::run_ranks(3, [](std::shared_ptr<Communicator> comm) {
      auto model = small_model();
      set_weights(model, 0);
      ExponentialMovingAverage whole(*model, options(0.5));
      update_with_k_1_2_3(whole, model);
      set_weights(model, 0);
      ExponentialMovingAverage sharded(*model, options(0.5, comm));
      sharded.load_state_dict(whole.state_dict());
      CHECK(same(whole.state_dict(), sharded.state_dict()));

      auto target = small_model();
      sharded.copy_to(*target);
      std::vector<std::pair<std::string, at::Tensor>> copied;
      for (const auto& item : target->named_parameters()) copied.emplace_back(item.key(), item.value());
      for (const auto& item : target->named_buffers()) copied.emplace_back(item.key(), item.value());
      check_closed_form(copied);

      auto state = whole.state_dict();
      state[0].second = at::full({4, 6}, 1.0);
      CHECK_THROWS_WITH_AS(sharded.load_state_dict(state),
                           "EMA state: tensor '0.weight' has shape [4, 6] but the EMA expects [4, 5]", Error);
      CHECK(same(whole.state_dict(), sharded.state_dict()));  // a bad state changes nothing
    });
  }

  TEST_CASE("save_rows at W = 2 writes each rank's rows only; load_rows at W = 3 and W = 1 reads each rank's rows back") {
    // Each rank of 2 saves its rows (no collective); the blocks are kept as the ranks' files would hold them.
    std::mutex lock;
    std::map<std::string, std::vector<std::pair<std::int64_t, at::Tensor>>> blocks;  // key: (first row, rows)
    baton::test::run_ranks(2, [&](std::shared_ptr<Communicator> comm) {
      auto model = small_model();
      set_weights(model, 0);
      ExponentialMovingAverage ema(*model, options(0.5, comm));
      update_with_k_1_2_3(ema, model);
      StateDict out;
      const std::int64_t before = comm->collectives();
      ema.save_rows(out, "ema/");
      CHECK(comm->collectives() == before);
      CHECK(out.tensor_keys().empty());
      std::lock_guard<std::mutex> guard(lock);
      for (const auto& key : out.row_keys()) {
        std::int64_t first = 0;
        at::Tensor rows = out.row_block(key, &first).clone();
        blocks[key].emplace_back(first, rows);
      }
    });
    // 8 floating tensors split over both ranks ([4, 5] and the six of [4] as 2 + 2 rows, [3, 4] and [3] as 2 + 1),
    // and the counter once (rank 0): 17 blocks of 9 tensors.
    std::size_t count = 0;
    for (const auto& [key, list] : blocks) count += list.size();
    CHECK(blocks.size() == 9);
    CHECK(count == 17);
    CHECK(blocks.at("ema/1.num_batches_tracked").size() == 1);
    CHECK(blocks.at("ema/2.weight").at(0).second.size(0) + blocks.at("ema/2.weight").at(1).second.size(0) == 3);
    // The whole tensors, put together here from the blocks by their first rows.
    std::map<std::string, at::Tensor> whole;
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> shapes;
    for (auto& [key, list] : blocks) {
      std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<at::Tensor> parts;
      for (const auto& [first, rows] : list) parts.push_back(rows.dim() == 0 ? rows : rows);
      whole[key] = parts.size() == 1 ? parts[0] : at::cat(parts);
      shapes.emplace_back(key, whole[key].sizes().vec());
    }
    const auto reader = [&](std::vector<std::string>* asked) {
      StateDict in;
      in.attach_rows(shapes, [&whole, asked](const std::string& key, std::int64_t first, std::int64_t n) {
        if (asked) asked->push_back(key + " " + std::to_string(first) + "+" + std::to_string(n));
        const at::Tensor& t = whole.at(key);
        return t.dim() == 0 ? t : t.narrow(0, first, n);
      });
      return in;
    };
    baton::test::run_ranks(3, [&](std::shared_ptr<Communicator> comm) {
      auto model = small_model();
      set_weights(model, 0);
      ExponentialMovingAverage ema(*model, options(0.5, comm));
      std::vector<std::string> asked;
      StateDict in = reader(&asked);
      CHECK(ema.saved_as_rows(in, "ema/"));
      CHECK_FALSE(ema.saved_as_rows(in));
      ema.load_rows(in, "ema/");
      // Rank 2 of 3 holds rows [4, 4) of the [4, 5] weight (none: ceil(4 / 3) = 2), row 2 of the [3, 4] one.
      if (comm->rank() == 2) {
        CHECK(std::find(asked.begin(), asked.end(), "ema/2.weight 2+1") != asked.end());
        for (const auto& a : asked) CHECK(a.rfind("ema/0.weight", 0) != 0);
      }
      check_closed_form(ema.state_dict());
    });
    auto model = small_model();
    set_weights(model, 0);
    ExponentialMovingAverage one(*model, options(0.5));
    one.load_rows(reader(nullptr), "ema/");
    check_closed_form(one.state_dict());
    // A tensor of another shape: named, and the EMA left as it was.
    shapes[0].second = {9, 5};
    auto before = one.state_dict();
    CHECK_THROWS_WITH_AS(one.load_rows(reader(nullptr), "ema/"), doctest::Contains("has shape [9, 5]"), Error);
    CHECK(same(before, one.state_dict()));
  }
}
