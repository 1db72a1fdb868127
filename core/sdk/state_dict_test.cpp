#include "baton_test.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>

#include "baton/error.h"
#include "baton/state_dict.h"
#include "error_text.h"

using baton::test::error_text;

namespace {

using baton::test::contains;

}  // namespace

TEST_SUITE("sdk") {
  TEST_CASE("StateDict keeps tensors in insertion order and replaces in place") {
    baton::StateDict sd;
    CHECK(sd.empty());
    sd.set_tensor("z.weight", at::zeros({2}));
    sd.set_tensor("a/bias", at::zeros({3}));
    sd.set_tensor("m", at::zeros({1}));
    sd.set_tensor("a/bias", at::arange(4));
    CHECK(sd.tensor_keys() == std::vector<std::string>{"z.weight", "a/bias", "m"});
    CHECK(sd.tensor("a/bias").numel() == 4);
    CHECK(sd.has_tensor("m"));
    CHECK_FALSE(sd.has_tensor("missing"));
    CHECK_FALSE(sd.empty());
    auto message = error_text<baton::CheckpointError>([&] { sd.tensor("missing"); });
    CHECK(contains(message, "'missing'"));
  }

  TEST_CASE("StateDict tensors are shallow: the stored tensor shares storage") {
    baton::StateDict sd;
    at::Tensor t = at::zeros({2});
    sd.set_tensor("t", t);
    t.add_(1);
    CHECK(sd.tensor("t")[0].item<float>() == 1.0f);
  }

  TEST_CASE("StateDict scalars: typed getters, order, replacement") {
    baton::StateDict sd;
    sd.set_int("step", 7);
    sd.set_double("lr", 0.25);
    sd.set_bool("nesterov", true);
    sd.set_string("name", "sgd");
    sd.set_int("step", 8);
    CHECK(sd.keys() == std::vector<std::string>{"step", "lr", "nesterov", "name"});
    CHECK(sd.get_int("step") == 8);
    CHECK(sd.get_double("lr") == 0.25);
    CHECK(sd.get_bool("nesterov"));
    CHECK(sd.get_string("name") == "sgd");
    CHECK(sd.get_double("step") == 8.0);  // an int is accepted where a double is asked
    CHECK(sd.has("lr"));
    CHECK_FALSE(sd.has("missing"));
    // Replacing with another type changes the type.
    sd.set_string("lr", "high");
    CHECK(sd.get_string("lr") == "high");
  }

  TEST_CASE("StateDict typed getters name the key and the type found") {
    baton::StateDict sd;
    sd.set_double("lr", 0.5);
    sd.set_string("name", "x");
    auto wrong = error_text<baton::CheckpointError>([&] { sd.get_int("lr"); });
    CHECK(contains(wrong, "'lr'"));
    CHECK(contains(wrong, "is a double"));
    CHECK(contains(wrong, "expected a int"));
    auto wrong_double = error_text<baton::CheckpointError>([&] { sd.get_double("name"); });
    CHECK(contains(wrong_double, "'name' is a string"));
    auto wrong_bool = error_text<baton::CheckpointError>([&] { sd.get_bool("name"); });
    CHECK(contains(wrong_bool, "expected a bool"));
    auto missing = error_text<baton::CheckpointError>([&] { sd.get_string("nope"); });
    CHECK(contains(missing, "'nope'"));
    CHECK(contains(missing, "no scalar"));
  }

  TEST_CASE("StateDict scalars_json round trips exactly and keeps int apart from double") {
    baton::StateDict sd;
    const double third = 1.0 / 3.0;
    const double tiny = 4.9406564584124654e-324;  // the smallest subnormal
    sd.set_double("third", third);
    sd.set_double("tiny", tiny);
    sd.set_double("one", 1.0);
    sd.set_int("big", std::numeric_limits<std::int64_t>::max());
    sd.set_int("neg", -5);
    sd.set_bool("flag", false);
    sd.set_string("text", "a \"quoted\" line\n");
    sd.set_double("nan", std::numeric_limits<double>::quiet_NaN());
    sd.set_double("minus_inf", -std::numeric_limits<double>::infinity());

    baton::StateDict back;
    back.set_string("stale", "removed by set_scalars_json");
    back.set_scalars_json(sd.scalars_json());
    CHECK(back.keys() == sd.keys());
    CHECK(back.get_double("third") == third);
    CHECK(back.get_double("tiny") == tiny);
    CHECK(back.get_double("one") == 1.0);
    CHECK_FALSE(error_text<baton::CheckpointError>([&] { back.get_int("one"); }).empty());  // still a double
    CHECK(back.get_int("big") == std::numeric_limits<std::int64_t>::max());
    CHECK(back.get_int("neg") == -5);
    CHECK(back.get_bool("flag") == false);
    CHECK(back.get_string("text") == "a \"quoted\" line\n");
    CHECK(std::isnan(back.get_double("nan")));
    CHECK(back.get_double("minus_inf") == -std::numeric_limits<double>::infinity());
    CHECK_FALSE(back.has("stale"));
  }

  TEST_CASE("StateDict scalars_json text is a JSON object in insertion order") {
    baton::StateDict sd;
    sd.set_int("b", 1);
    sd.set_double("a", 0.5);
    sd.set_bool("c", true);
    CHECK(sd.scalars_json() == R"({"b":1,"a":0.5,"c":true})");
    CHECK(baton::StateDict().scalars_json() == "{}");
  }

  TEST_CASE("StateDict set_scalars_json rejects bad input with the reason") {
    baton::StateDict sd;
    CHECK(contains(error_text<baton::CheckpointError>([&] { sd.set_scalars_json("{\"a\": "); }), "invalid JSON"));
    CHECK(contains(error_text<baton::CheckpointError>([&] { sd.set_scalars_json("[1, 2]"); }), "expected a JSON object, got array"));
    auto nested = error_text<baton::CheckpointError>([&] { sd.set_scalars_json(R"({"ok": 1, "list": [1]})"); });
    CHECK(contains(nested, "'list'"));
    auto huge = error_text<baton::CheckpointError>([&] { sd.set_scalars_json(R"({"n": 18446744073709551615})"); });
    CHECK(contains(huge, "does not fit in int64"));
  }

  TEST_CASE("StateDict copies are independent, moves leave an empty usable dict") {
    baton::StateDict sd;
    sd.set_int("n", 1);
    sd.set_tensor("t", at::zeros({1}));
    baton::StateDict copy = sd;
    copy.set_int("n", 2);
    copy.set_tensor("u", at::zeros({1}));
    CHECK(sd.get_int("n") == 1);
    CHECK_FALSE(sd.has_tensor("u"));

    baton::StateDict moved = std::move(sd);
    CHECK(moved.get_int("n") == 1);
    CHECK(sd.empty());  // NOLINT(bugprone-use-after-move): documented as usable
    sd.set_int("again", 3);
    CHECK(sd.get_int("again") == 3);

    moved.clear();
    CHECK(moved.empty());
    CHECK(moved.keys().empty());
    CHECK(moved.tensor_keys().empty());
  }

  TEST_CASE("StateDict row tensors: blocks set by a rank, rows read back from a block or from files") {
    baton::StateDict saved;
    // Rows 2..4 of a [6, 2] tensor, as rank 1 of 2 holds them (ceil(6 / 2) = 3 rows each).
    const at::Tensor block = at::arange(6, at::kFloat).reshape({3, 2});
    saved.set_rows("w", block, 3);
    saved.set_rows("count", at::arange(1, at::kLong).reshape({}), 0);
    CHECK(saved.row_keys() == std::vector<std::string>{"w", "count"});
    CHECK(saved.has_rows("w"));
    CHECK_FALSE(saved.has_tensor("w"));  // rows are not whole tensors
    CHECK_FALSE(saved.empty());
    std::int64_t first = -1;
    CHECK(saved.row_block("w", &first).equal(block));
    CHECK(first == 3);
    CHECK(saved.rows_shape("w") == std::vector<std::int64_t>{6, 2});
    CHECK(saved.rows_shape("count").empty());
    // Rows 4..5 are the block's last two; row 2 is not in it.
    CHECK(saved.read_rows("w", 4, 2).equal(block.narrow(0, 1, 2)));
    CHECK(contains(error_text<baton::CheckpointError>([&] { saved.read_rows("w", 2, 2); }),
                   "rows [2, 4) are not in its block of rows [3, 6)"));
    CHECK(contains(error_text<baton::CheckpointError>([&] { saved.read_rows("w", 5, 2); }),
                   "rows [5, 7) asked of a tensor of 6 rows"));
    CHECK(contains(error_text<baton::Error>([&] { saved.set_rows("bad", at::zeros({}), 1); }), "of a 0-d tensor"));

    // Read from files: the reader is asked for exactly the rows wanted, at the global shape attached.
    baton::StateDict loaded;
    loaded.set_bool("started", true);
    std::vector<std::pair<std::string, std::int64_t>> asked;
    const at::Tensor whole = at::arange(12, at::kFloat).reshape({6, 2});
    loaded.attach_rows({{"w", {6, 2}}}, [&](const std::string& key, std::int64_t begin, std::int64_t count) {
      asked.emplace_back(key, begin);
      return whole.narrow(0, begin, count);
    });
    CHECK(loaded.row_keys() == std::vector<std::string>{"w"});
    CHECK(loaded.rows_shape("w") == std::vector<std::int64_t>{6, 2});
    CHECK(loaded.read_rows("w", 1, 2).equal(whole.narrow(0, 1, 2)));
    CHECK(asked == std::vector<std::pair<std::string, std::int64_t>>{{"w", 1}});
    CHECK(contains(error_text<baton::CheckpointError>([&] { loaded.row_block("w"); }), "held in files"));
    CHECK(contains(error_text<baton::CheckpointError>([&] { loaded.read_rows("v", 0, 1); }), "no row tensor 'v'"));
    // Copies share the files' reader; clear() drops it.
    baton::StateDict copy = loaded;
    CHECK(copy.read_rows("w", 5, 1).equal(whole.narrow(0, 5, 1)));
    copy.clear();
    CHECK(copy.empty());
    CHECK_FALSE(copy.has_rows("w"));
  }
}
