#include "baton_test.h"

#include <zlib.h>

#include <ATen/ops/allclose.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/_unique.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/builtin_datasets.h"
#include "data/idx.h"
#include "baton/components.h"
#include "components/builtins.h"
#include "data/data_test_support.h"
#include "data/sampler.h"
#include "error_text.h"

using baton::test::error_text;

namespace fs = std::filesystem;
using namespace baton;
using namespace baton::data_test;

namespace {

std::vector<std::uint8_t> idx_bytes(const std::vector<std::uint32_t>& shape, const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> bytes = {0, 0, 0x08, static_cast<std::uint8_t>(shape.size())};
  for (auto s : shape)
    for (int shift : {24, 16, 8, 0}) bytes.push_back(static_cast<std::uint8_t>(s >> shift));
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

// A 2x2x3 byte array 0..11, in both encodings.
const std::vector<std::uint8_t> kTinyData = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::int64_t> iota_vector(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

SamplerOptions sampler_options(std::int64_t size, std::int64_t batch) {
  SamplerOptions o;
  o.dataset_size = size;
  o.batch_size = batch;
  o.seed = 17;
  return o;
}

}  // namespace

TEST_SUITE("data") {
  TEST_CASE("read_idx_file reads plain and gzip files alike") {
    const auto dir = test::scratch_dir("data-idx");
    const auto bytes = idx_bytes({2, 2, 3}, kTinyData);
    write_plain(dir / "tiny", bytes);
    write_gz(dir / "tiny.gz", bytes);
    for (const auto& name : {"tiny", "tiny.gz"}) {
      CAPTURE(name);
      const IdxArray a = read_idx_file((dir / name).string());
      CHECK(a.shape == std::vector<std::int64_t>{2, 2, 3});
      CHECK(a.data == kTinyData);
    }
  }

  TEST_CASE("read_idx_file reads large dimension sizes big-endian") {
    const auto dir = test::scratch_dir("data-idx-big");
    std::vector<std::uint8_t> data(300, 7);
    write_gz(dir / "long.gz", idx_bytes({300}, data));
    const IdxArray a = read_idx_file((dir / "long.gz").string());
    CHECK(a.shape == std::vector<std::int64_t>{300});
    CHECK(a.data.size() == 300);
  }

  TEST_CASE("truncated, padded and malformed IDX files are errors naming the file") {
    const auto dir = test::scratch_dir("data-idx-bad");
    auto bytes = idx_bytes({2, 2, 3}, kTinyData);

    auto truncated = bytes;
    truncated.resize(bytes.size() - 5);  // 7 of the 12 data bytes remain
    write_gz(dir / "truncated.gz", truncated);
    const auto truncated_error = error_text([&] { read_idx_file((dir / "truncated.gz").string()); });
    CHECK(contains(truncated_error, "truncated.gz"));
    CHECK(contains(truncated_error, "expected 12 bytes"));
    CHECK(contains(truncated_error, "found 7"));

    auto bad_magic = bytes;
    bad_magic[0] = 0x1f;
    write_plain(dir / "bad_magic", bad_magic);
    const auto magic_error = error_text([&] { read_idx_file((dir / "bad_magic").string()); });
    CHECK(contains(magic_error, "bad_magic"));
    CHECK(contains(magic_error, "magic"));

    auto float_type = bytes;
    float_type[2] = 0x0d;
    write_plain(dir / "floats", float_type);
    CHECK(contains(error_text([&] { read_idx_file((dir / "floats").string()); }), "type code 13"));

    auto padded = bytes;
    padded.push_back(99);
    write_plain(dir / "padded", padded);
    CHECK(contains(error_text([&] { read_idx_file((dir / "padded").string()); }), "after the 12 bytes"));

    write_plain(dir / "short_header", {0, 0, 8});
    CHECK(contains(error_text([&] { read_idx_file((dir / "short_header").string()); }), "short_header"));

    const auto missing_error = error_text([&] { read_idx_file((dir / "missing.gz").string()); });
    CHECK(contains(missing_error, "missing.gz"));
  }

  TEST_CASE("load_idx_dataset reads a tiny dataset folder, normalises pixels and checks labels") {
    const auto dir = test::scratch_dir("data-mnist-tiny");
    // Two 2x2 images: all 0, all 255; plain files for the test split, gzip for train.
    const auto images = idx_bytes({2, 2, 2}, {0, 0, 0, 0, 255, 255, 255, 255});
    write_plain(dir / "t10k-images-idx3-ubyte", images);
    write_plain(dir / "t10k-labels-idx1-ubyte", idx_bytes({2}, {3, 9}));
    const TensorDataset test = load_idx_dataset(dir.string(), false, 0, "tiny");
    CHECK(test.name == "tiny/test");
    CHECK(test.inputs.sizes().vec() == std::vector<std::int64_t>{2, 1, 2, 2});
    CHECK((test.inputs.scalar_type() == at::kFloat));
    CHECK((test.targets.scalar_type() == at::kLong));
    // MNIST's statistics (the folder name has no "fashion"): (0 - 0.1307) / 0.3081 and (1 - 0.1307) / 0.3081.
    CHECK(test.inputs[0][0][0][0].item<float>() == doctest::Approx(-0.424213).epsilon(1e-5));
    CHECK(test.inputs[1][0][1][1].item<float>() == doctest::Approx(2.821487).epsilon(1e-5));
    CHECK(test.targets[1].item<std::int64_t>() == 9);

    write_gz(dir / "train-images-idx3-ubyte.gz", images);
    write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({3}, {1, 2, 3}));
    const auto count_error = error_text([&] { load_idx_dataset(dir.string(), true); });
    CHECK(contains(count_error, "2 images"));
    CHECK(contains(count_error, "3 labels"));

    write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({2}, {1, 10}));
    const auto label_error = error_text([&] { load_idx_dataset(dir.string(), true); });
    CHECK(contains(label_error, "train-labels-idx1-ubyte.gz"));
    CHECK(contains(label_error, "label 10"));

    write_gz(dir / "train-labels-idx1-ubyte.gz", idx_bytes({2}, {1, 2}));
    const TensorDataset one = load_idx_dataset(dir.string(), true, 1);
    CHECK(one.size() == 1);
    CHECK(one.targets[0].item<std::int64_t>() == 1);
  }

  TEST_CASE("load_idx_dataset takes its statistics from the dataset's name or a choice, not the path (issue 24 §20)") {
    const auto dir = test::scratch_dir("data-fashion-tiny");
    write_plain(dir / "t10k-images-idx3-ubyte", idx_bytes({1, 1, 1}, {255}));
    write_plain(dir / "t10k-labels-idx1-ubyte", idx_bytes({1}, {0}));
    // A folder whose path says "fashion" holding MNIST: MNIST's statistics, as its name says.
    CHECK(load_idx_dataset(dir.string(), false, 0, "mnist").inputs.item<float>() ==
          doctest::Approx((1.0 - 0.1307) / 0.3081).epsilon(1e-5));
    CHECK(load_idx_dataset(dir.string(), false).inputs.item<float>() ==
          doctest::Approx((1.0 - 0.1307) / 0.3081).epsilon(1e-5));
    CHECK(load_idx_dataset(dir.string(), false, 0, "fashion-mnist").inputs.item<float>() ==
          doctest::Approx((1.0 - 0.2860) / 0.3530).epsilon(1e-5));
    CHECK(load_idx_dataset(dir.string(), false, 0, "idx", "fashion-mnist").inputs.item<float>() ==
          doctest::Approx((1.0 - 0.2860) / 0.3530).epsilon(1e-5));
    CHECK(load_idx_dataset(dir.string(), false, 0, "idx", "none").inputs.item<float>() == doctest::Approx(1.0));
    CHECK(contains(error_text([&] { load_idx_dataset(dir.string(), false, 0, "idx", "cifar"); }),
                   "unknown IDX statistics 'cifar'"));

    const auto missing_error = error_text([&] { load_idx_dataset(dir.string(), true); });
    CHECK(contains(missing_error, "train-images-idx3-ubyte.gz"));
  }

  TEST_CASE("the real Fashion-MNIST, when installed") {
    const std::string folder = "/usr/share/datasets/fashion-mnist";
    if (!fs::exists(folder)) {
      MESSAGE("skipped: " << folder << " is not installed (Debian package dataset-fashion-mnist)");
      return;
    }
    const TensorDataset train = load_idx_dataset(folder, true, 0, "fashion-mnist");
    CHECK(train.name == "fashion-mnist/train");
    CHECK(train.inputs.sizes().vec() == std::vector<std::int64_t>{60000, 1, 28, 28});
    CHECK(train.size() == 60000);
    CHECK(train.targets.min().item<std::int64_t>() == 0);
    CHECK(train.targets.max().item<std::int64_t>() == 9);
    CHECK(train.targets[0].item<std::int64_t>() == 9);  // the first training image is an ankle boot
    // The fixed statistics are the training split's own, so it comes out near mean 0, std 1.
    CHECK(std::abs(train.inputs.mean().item<double>()) < 0.01);
    CHECK(train.inputs.std().item<double>() == doctest::Approx(1.0).epsilon(0.01));

    const TensorDataset test = load_idx_dataset(folder, false, 0, "fashion-mnist");
    CHECK(test.size() == 10000);
    CHECK(test.inputs.sizes().vec() == std::vector<std::int64_t>{10000, 1, 28, 28});
    CHECK(test.targets.max().item<std::int64_t>() == 9);
    CHECK(test.targets[2].item<std::int64_t>() == 1);
  }

  TEST_CASE("the synthetic dataset is determined by its seed") {
    const TensorDataset a = make_synthetic_dataset(64, 5);
    const TensorDataset b = make_synthetic_dataset(64, 5);
    const TensorDataset c = make_synthetic_dataset(64, 6);
    CHECK(a.inputs.sizes().vec() == std::vector<std::int64_t>{64, 1, 28, 28});
    CHECK((a.targets.scalar_type() == at::kLong));
    CHECK(at::equal(a.inputs, b.inputs));
    CHECK(at::equal(a.targets, b.targets));
    CHECK_FALSE(at::equal(a.inputs, c.inputs));
    CHECK(a.targets.min().item<std::int64_t>() >= 0);
    CHECK(a.targets.max().item<std::int64_t>() <= 9);
    CHECK_THROWS_AS(make_synthetic_dataset(0, 1), Error);
  }

  TEST_CASE("synthetic samples of one class share a pattern across seeds, up to noise of std 0.5") {
    const TensorDataset a = make_synthetic_dataset(200, 1);
    const TensorDataset b = make_synthetic_dataset(200, 2);
    // Find two samples of the same class from different seeds and two of different classes.
    const auto class_of = [](const TensorDataset& d, std::int64_t i) { return d.targets[i].item<std::int64_t>(); };
    std::int64_t same = -1, other = -1;
    for (std::int64_t j = 0; j < b.size() && (same < 0 || other < 0); ++j) {
      if (class_of(b, j) == class_of(a, 0) && same < 0) same = j;
      if (class_of(b, j) != class_of(a, 0) && other < 0) other = j;
    }
    REQUIRE(same >= 0);
    REQUIRE(other >= 0);
    // Same class: difference of two noises, variance 2 * 0.25 = 0.5. Different classes: adds 2 * var(pattern) = 2.
    const double same_var = a.inputs[0].sub(b.inputs[same]).pow(2).mean().item<double>();
    const double other_var = a.inputs[0].sub(b.inputs[other]).pow(2).mean().item<double>();
    CHECK(same_var == doctest::Approx(0.5).epsilon(0.15));
    CHECK(other_var == doctest::Approx(2.5).epsilon(0.15));
  }

  TEST_CASE("a TensorDataset's get selects rows") {
    const TensorDataset d = make_synthetic_dataset(10, 3);
    const auto idx = at::empty({2}, at::kLong);
    idx[0] = 7;
    idx[1] = 2;
    const Batch batch = d.get(idx);
    CHECK(batch.size() == 2);
    CHECK(at::equal(batch.inputs()[0], d.inputs[7]));
    CHECK(at::equal(batch.inputs()[1], d.inputs[2]));
    CHECK(batch.targets()[0].item<std::int64_t>() == d.targets[7].item<std::int64_t>());
  }

  TEST_CASE("a TensorDataset's spec: class indices make a classification, float targets a regression") {
    TensorDataset images = make_synthetic_dataset(4, 1);
    DataSpec spec = images.spec();
    CHECK(spec.input_shape == std::vector<std::int64_t>{1, 28, 28});
    CHECK(spec.target_shape.empty());
    CHECK(spec.num_classes == 10);
    CHECK(spec.output_size() == 10);
    CHECK(spec.describe() == "1x28x28 inputs, 10 classes");

    TensorDataset table;
    table.inputs = at::zeros({5, 3});
    table.targets = at::zeros({5, 2});
    spec = table.spec();
    CHECK(spec.input_shape == std::vector<std::int64_t>{3});
    CHECK(spec.target_shape == std::vector<std::int64_t>{2});
    CHECK_FALSE(spec.classification());
    CHECK(spec.output_size() == 2);
    CHECK(spec.describe() == "3 inputs, 2 regression targets");
  }

  TEST_CASE("issue 24 §19, §23: a TensorDataset without targets has its inputs' rows; classes come from the targets") {
    TensorDataset inputs_only;
    inputs_only.inputs = at::zeros({64, 3});
    CHECK(inputs_only.size() == 64);
    CHECK_FALSE(inputs_only.spec().has_targets());

    TensorDataset three;  // targets 0, 2, 1, 2: three classes, not a default of ten
    three.name = "three";
    three.inputs = at::zeros({4, 3});
    three.targets = at::zeros({4}, at::kLong);
    three.targets[1] = 2;
    three.targets[2] = 1;
    three.targets[3] = 2;
    CHECK(three.spec().num_classes == 3);
    CHECK(three.spec().describe() == "3 inputs, 3 classes");
    three.num_classes = 5;  // a split that lacks the highest classes says how many there are
    CHECK(three.spec().num_classes == 5);
    three.num_classes = 2;
    CHECK(error_text([&] { three.spec(); }) == "dataset 'three': class target 2 is not below num_classes 2");
  }

  TEST_CASE("the sampler visits every sample once per epoch, reproducibly from (seed, epoch)") {
    BatchSampler sampler(sampler_options(103, 10));
    const auto e0 = sampler.epoch_order(0);
    const auto e1 = sampler.epoch_order(1);
    CHECK(sorted(e0) == iota_vector(103));
    CHECK(sorted(e1) == iota_vector(103));
    CHECK(e0 != e1);
    CHECK(e0 != iota_vector(103));

    BatchSampler fresh(sampler_options(103, 10));
    CHECK(fresh.epoch_order(1) == e1);
    CHECK(fresh.epoch_order(0) == e0);

    auto other_seed = sampler_options(103, 10);
    other_seed.seed = 18;
    CHECK(BatchSampler(other_seed).epoch_order(0) != e0);

    auto no_shuffle = sampler_options(103, 10);
    no_shuffle.shuffle = false;
    CHECK(BatchSampler(no_shuffle).epoch_order(4) == iota_vector(103));
  }

  TEST_CASE("the sampler's batches cover the epoch order, the last one partial unless drop_last") {
    BatchSampler sampler(sampler_options(103, 10));
    CHECK(sampler.batches_per_epoch() == 11);
    CHECK(sampler.samples_per_epoch() == 103);
    std::vector<std::int64_t> seen;
    for (std::int64_t b = 0; b < 11; ++b) {
      const at::Tensor idx = sampler.batch_indices(2, b);
      CHECK((idx.scalar_type() == at::kLong));
      CHECK(idx.size(0) == (b < 10 ? 10 : 3));
      for (std::int64_t i = 0; i < idx.size(0); ++i) seen.push_back(idx[i].item<std::int64_t>());
    }
    CHECK(seen == sampler.epoch_order(2));
    CHECK_THROWS_AS(sampler.batch_indices(2, 11), Error);

    auto drop = sampler_options(103, 10);
    drop.drop_last = true;
    BatchSampler dropping(drop);
    CHECK(dropping.batches_per_epoch() == 10);
    CHECK(dropping.samples_per_epoch() == 100);
    CHECK(dropping.batch_indices(0, 9).size(0) == 10);
    CHECK_THROWS_AS(dropping.batch_indices(0, 10), Error);
  }

  TEST_CASE("two ranks get disjoint, equal shares covering the truncated permutation") {
    auto o = sampler_options(101, 8);
    o.world_size = 2;
    o.rank = 0;
    BatchSampler r0(o);
    o.rank = 1;
    BatchSampler r1(o);
    const auto a = r0.epoch_order(3);
    const auto b = r1.epoch_order(3);
    CHECK(a.size() == 50);
    CHECK(b.size() == 50);
    CHECK(r0.batches_per_epoch() == 7);  // 6 full batches of 8, one of 2
    CHECK(r1.batches_per_epoch() == 7);

    std::set<std::int64_t> all(a.begin(), a.end());
    all.insert(b.begin(), b.end());
    CHECK(all.size() == 100);  // disjoint

    // The union is the single-process permutation of the same (seed, epoch) without its last sample.
    auto single = sampler_options(101, 8);
    auto full = BatchSampler(single).epoch_order(3);
    full.pop_back();
    CHECK(std::set<std::int64_t>(full.begin(), full.end()) == all);
    CHECK(a[0] == full[0]);
    CHECK(b[0] == full[1]);
  }

  TEST_CASE("bad sampler options are errors") {
    auto o = sampler_options(10, 0);
    CHECK_THROWS_AS(BatchSampler{o}, Error);
    o = sampler_options(10, 2);
    o.world_size = 2;
    o.rank = 2;
    CHECK_THROWS_AS(BatchSampler{o}, Error);
    o = sampler_options(1, 2);
    o.world_size = 2;
    CHECK_THROWS_AS(BatchSampler{o}, Error);
    o = sampler_options(0, 2);
    CHECK_THROWS_AS(BatchSampler{o}, Error);
  }
}
