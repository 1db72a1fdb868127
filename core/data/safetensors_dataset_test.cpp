// The `safetensors` dataset on files written by an independent writer (a few lines of Python's standard library
// that follow the format's description, not baton's code), with every value a formula of its row and column, so the
// expected batches are computed here without reading the file.
#include "baton_test.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include "baton/components.h"
#include "baton/error.h"
#include "baton/plugin_config.h"
#include "baton/safetensors.h"
#include "components/builtins.h"
#include "error_text.h"

namespace fs = std::filesystem;
using namespace baton;
using baton::test::error_text;

namespace {

using baton::test::contains;

// Writes, in `dir`: data.safetensors with 6 rows of tensors of many dtypes, eval.safetensors with 2 more rows of
// the same inputs and targets (rows 6 and 7 of the same formulas), and other.safetensors whose inputs have another
// row shape. BF16 is float32's upper half, exact for these small whole numbers.
const char* kWriter = R"(import json, struct, sys

# A tensor is (dtype, shape, flat list of values); struct packs each dtype little-endian ("e" is IEEE half).
FORMATS = {"F64": "d", "F32": "f", "F16": "e", "I64": "q", "I32": "i", "U8": "B", "BOOL": "?", "BF16": "H"}

def save(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, values) in tensors.items():
        data = struct.pack("<%d%s" % (len(values), FORMATS[dtype]), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"written_by": "python struct"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

def bf16(x):  # bfloat16 is float32's upper half
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16

def tensors(first, end):
    rows = list(range(first, end))
    n = len(rows)
    return {
        "y": ("I64", [n], [2, 0, 1, 2, 1, 0, 1, 2][first:end]),
        "x32": ("F32", [n, 2, 3], [r * 100 + c for r in rows for c in range(6)]),
        "x16": ("F16", [n, 4], [r * 10 + c for r in rows for c in range(4)]),
        "xbf": ("BF16", [n, 2], [bf16(r * 2 + c) for r in rows for c in range(2)]),
        "x64": ("F64", [n], [r + 0.5 for r in rows]),
        "xu8": ("U8", [n, 3], [r * 3 + c for r in rows for c in range(3)]),
        "xb": ("BOOL", [n, 1], [r % 2 == 1 for r in rows]),
        "yu8": ("U8", [n], [0, 1, 1, 0, 1, 3, 3, 0][first:end]),
        "yf": ("F32", [n, 2], [v for r in rows for v in (float(r), -float(r))]),
        "yf16": ("F16", [n], [r * 0.25 for r in rows]),
        "yneg": ("I32", [n], [0, 1, -1, 0, 0, 0, 0, 0][first:end]),
        "short": ("F32", [n - 1, 2], [0.0] * (2 * (n - 1))),
    }

d = sys.argv[1]
save(d + "/data.safetensors", tensors(0, 6))
save(d + "/eval.safetensors", tensors(6, 8))
save(d + "/other.safetensors", {"x32": ("F32", [2, 5], [0.0] * 10), "y": ("I64", [2], [0, 0])})
)";

fs::path write_files(const std::string& test) {
  const fs::path dir = test::scratch_dir(test);
  std::ofstream(dir / "writer.py") << kWriter;
  const std::string command = "/usr/bin/python3 '" + (dir / "writer.py").string() + "' '" + dir.string() + "' > '" +
                              (dir / "writer.txt").string() + "' 2>&1";
  const int status = std::system(command.c_str());
  const std::string output = test::read_bytes(dir / "writer.txt");
  REQUIRE_MESSAGE(status == 0, output);
  return dir;
}

struct Builder {
  fs::path dir;
  DatasetContext context;
  Components components;

  Builder(fs::path folder) : dir(std::move(folder)) { register_builtin_datasets(components); }

  // The splits for a [data] table of `toml` (path is data.safetensors unless given); unknown keys fail.
  DatasetSplits build(const std::string& toml) const {
    const std::string text = (toml.rfind("path =", 0) == 0 ? "" : "path = \"" + file("data") + "\"\n") + toml;
    const PluginConfig config = PluginConfig::from_toml(text, "safetensors");
    DatasetSplits splits = components.datasets.find("safetensors")->factory(config, context);
    config.reject_unread();
    return splits;
  }
  std::string file(const std::string& stem) const { return (dir / (stem + ".safetensors")).string(); }
  std::string error(const std::string& toml) const {
    return error_text<ConfigError>([&] { build(toml); });
  }
};

at::Tensor longs(const std::vector<std::int64_t>& values) { return at::tensor(values, at::kLong); }

// What row r of each tensor holds, by the writer's formulas.
std::vector<float> x32_row(std::int64_t r) {
  std::vector<float> row;
  for (int c = 0; c < 6; ++c) row.push_back(static_cast<float>(r * 100 + c));
  return row;
}
const std::vector<std::int64_t> kY = {2, 0, 1, 2, 1, 0, 1, 2};

std::vector<float> floats(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}
std::vector<std::int64_t> int64s(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<std::int64_t>(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
}

}  // namespace

TEST_SUITE("data") {
  TEST_CASE("safetensors dataset: the requested rows, float32 inputs of every dtype, class or value targets") {
    const Builder b(write_files("data-safetensors"));
    const DatasetSplits whole = b.build("inputs = \"x32\"\ntargets = \"y\"\neval_fraction = 0");
    REQUIRE(whole.train);
    CHECK(whole.train->size() == 6);
    CHECK(whole.eval->size() == 6);  // eval_fraction 0: the training rows themselves
    const DataSpec spec = whole.train->spec();
    CHECK(spec.input_shape == std::vector<std::int64_t>{2, 3});
    CHECK(spec.target_shape.empty());
    CHECK(spec.num_classes == 3);  // inferred: the largest class, 2, plus one

    // Out of order, a repeat, and a run of neighbours (read in one call): each row exactly where it was asked for.
    const Batch batch = whole.train->get(longs({4, 1, 5, 4, 2, 3}));
    REQUIRE((batch.inputs().scalar_type() == at::kFloat));
    REQUIRE((batch.targets().scalar_type() == at::kLong));
    CHECK(batch.inputs().sizes().vec() == std::vector<std::int64_t>{6, 2, 3});
    std::vector<float> expected_inputs;
    std::vector<std::int64_t> expected_targets;
    for (std::int64_t r : {4, 1, 5, 4, 2, 3}) {
      const auto row = x32_row(r);
      expected_inputs.insert(expected_inputs.end(), row.begin(), row.end());
      expected_targets.push_back(kY[r]);
    }
    CHECK(floats(batch.inputs()) == expected_inputs);
    CHECK(int64s(batch.targets()) == expected_targets);

    // Every input dtype becomes float32 with the file's values.
    const auto inputs_of = [&](const std::string& tensor, const std::vector<std::int64_t>& rows) {
      const DatasetSplits s = b.build("inputs = \"" + tensor + "\"\ntargets = \"y\"\neval_fraction = 0");
      const Batch got = s.train->get(longs(rows));
      CHECK((got.inputs().scalar_type() == at::kFloat));
      std::vector<std::int64_t> shape = s.train->spec().input_shape;
      shape.insert(shape.begin(), static_cast<std::int64_t>(rows.size()));
      CHECK(got.inputs().sizes().vec() == shape);
      return floats(got.inputs());
    };
    CHECK(inputs_of("x16", {5, 0}) == std::vector<float>{50, 51, 52, 53, 0, 1, 2, 3});
    CHECK(inputs_of("xbf", {3, 4}) == std::vector<float>{6, 7, 8, 9});
    CHECK(inputs_of("x64", {1, 5}) == std::vector<float>{1.5f, 5.5f});  // 1-D: one feature per sample
    CHECK(b.build("inputs = \"x64\"\ntargets = \"y\"").train->spec().input_shape == std::vector<std::int64_t>{1});
    CHECK(inputs_of("xu8", {5}) == std::vector<float>{15, 16, 17});
    CHECK(inputs_of("xb", {0, 1, 2, 3}) == std::vector<float>{0, 1, 0, 1});

    // Integer targets of another width are class indices too; float targets are values to regress.
    const DatasetSplits u8 = b.build("inputs = \"x32\"\ntargets = \"yu8\"\neval_fraction = 0");
    CHECK(u8.train->spec().num_classes == 4);
    CHECK(int64s(u8.train->get(longs({5, 1})).targets()) == std::vector<std::int64_t>{3, 1});
    CHECK(b.build("inputs = \"x32\"\ntargets = \"yu8\"\nnum_classes = 10").train->spec().num_classes == 10);

    const DatasetSplits values = b.build("inputs = \"x32\"\ntargets = \"yf\"\neval_fraction = 0");
    CHECK(values.train->spec().num_classes == 0);
    CHECK(values.train->spec().target_shape == std::vector<std::int64_t>{2});
    const Batch value_batch = values.train->get(longs({3, 0}));
    CHECK((value_batch.targets().scalar_type() == at::kFloat));
    CHECK(floats(value_batch.targets()) == std::vector<float>{3, -3, 0, 0});
    const DatasetSplits halves = b.build("inputs = \"x32\"\ntargets = \"yf16\"\neval_fraction = 0");
    CHECK(halves.train->spec().target_shape.empty());
    CHECK(floats(halves.train->get(longs({2, 5})).targets()) == std::vector<float>{0.5f, 1.25f});
    // task = "regression" makes integer targets values.
    const DatasetSplits counts = b.build("inputs = \"x32\"\ntargets = \"y\"\ntask = \"regression\"\neval_fraction = 0");
    CHECK(counts.train->spec().num_classes == 0);
    CHECK(floats(counts.train->get(longs({0, 1})).targets()) == std::vector<float>{2, 0});

    CHECK(contains(error_text([&] { whole.train->get(longs({6})); }), "sample 6 is outside [0, 6)"));
    CHECK(contains(error_text([&] { whole.train->get(longs({-1})); }), "sample -1 is outside [0, 6)"));
  }

  TEST_CASE("safetensors dataset: a seeded split partitions the rows, or eval_path gives the evaluation rows") {
    Builder b(write_files("data-safetensors-split"));
    b.context.seed = 11;
    const DatasetSplits split = b.build("inputs = \"x64\"\ntargets = \"y\"\neval_fraction = 0.5");
    REQUIRE(split.train->size() == 3);
    REQUIRE(split.eval->size() == 3);
    const Batch train = split.train->get(longs({0, 1, 2}));
    const Batch eval = split.eval->get(longs({0, 1, 2}));
    // x64 holds r + 0.5, so each sample names its row: the splits are disjoint, cover the file, and pair each
    // row's input with its own target.
    const at::Tensor rows = at::cat({train.inputs(), eval.inputs()}).reshape({-1}).sub(0.5).to(at::kLong);
    CHECK(int64s(std::get<0>(at::sort(rows))) == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5});
    const std::vector<std::int64_t> row_numbers = int64s(rows);
    const std::vector<std::int64_t> targets = int64s(at::cat({train.targets(), eval.targets()}));
    for (std::size_t i = 0; i < row_numbers.size(); ++i) CHECK(targets[i] == kY[row_numbers[i]]);
    // The split depends on the seed alone.
    const auto eval_rows = [&](std::uint64_t seed) {
      Builder again(b.dir);
      again.context.seed = seed;
      return floats(again.build("inputs = \"x64\"\ntargets = \"y\"\neval_fraction = 0.5").eval->get(longs({0, 1, 2})).inputs());
    };
    CHECK(eval_rows(11) == floats(eval.inputs()));
    bool another_split = false;
    for (std::uint64_t seed = 12; seed < 20 && !another_split; ++seed) another_split = eval_rows(seed) != floats(eval.inputs());
    CHECK(another_split);

    const DatasetSplits separate =
        b.build("inputs = \"x32\"\ntargets = \"y\"\neval_path = \"" + b.file("eval") + "\"");
    CHECK(separate.train->size() == 6);
    REQUIRE(separate.eval->size() == 2);
    const Batch held_out = separate.eval->get(longs({1, 0}));
    std::vector<float> expected = x32_row(7);
    const std::vector<float> row6 = x32_row(6);
    expected.insert(expected.end(), row6.begin(), row6.end());
    CHECK(floats(held_out.inputs()) == expected);
    CHECK(int64s(held_out.targets()) == std::vector<std::int64_t>{kY[7], kY[6]});
    CHECK(separate.eval->spec().num_classes == 3);

    // Only the evaluation split when training is not needed (baton eval, predict).
    b.context.need_train = false;
    const DatasetSplits eval_only = b.build("inputs = \"x32\"\ntargets = \"y\"\neval_path = \"" + b.file("eval") + "\"");
    CHECK_FALSE(eval_only.train);
    CHECK(eval_only.eval->size() == 2);
  }

  TEST_CASE("safetensors dataset: the loader's threads read batches at once, each getting its own rows") {
    const Builder b(write_files("data-safetensors-threads"));
    const DatasetSplits s = b.build("inputs = \"x32\"\ntargets = \"y\"\neval_fraction = 0");
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 200; ++i) {
          const std::int64_t a = (t + i) % 6, c = (t * 5 + i * 7) % 6;
          const Batch got = s.train->get(longs({a, c}));
          std::vector<float> expected = x32_row(a);
          const std::vector<float> second = x32_row(c);
          expected.insert(expected.end(), second.begin(), second.end());
          if (floats(got.inputs()) != expected || int64s(got.targets()) != std::vector<std::int64_t>{kY[a], kY[c]}) ++wrong;
        }
      });
    for (auto& thread : threads) thread.join();
    CHECK(wrong.load() == 0);
  }

  TEST_CASE("safetensors dataset: errors name the key, the file and the problem") {
    const Builder b(write_files("data-safetensors-errors"));
    const std::string data = b.file("data");
    const fs::path dir = b.dir;

    const std::string missing = (dir / "missing.safetensors").string();
    CHECK(contains(b.error("path = \"" + missing + "\""),
                   "plugins.safetensors.path: " + missing + ": cannot open: No such file or directory"));
    std::ofstream(dir / "text.safetensors") << "x,y\n1,2\n3,4\n";
    CHECK(contains(b.error("path = \"" + b.file("text") + "\""),
                   "plugins.safetensors.path: " + b.file("text") + ": not a safetensors file: it starts with the "
                   "text \"x,y\\n1,2\\n\" (a safetensors file starts with its header's length, 8 bytes "
                   "little-endian, then a JSON header)"));  // not "header says 8031924123371070824 bytes" (§11)
    // The file cut short: its last tensor's bytes end past the end.
    const std::string bytes = test::read_bytes(data);
    test::write_bytes(dir / "cut.safetensors", bytes.substr(0, bytes.size() - 3));
    const std::string cut = b.error("path = \"" + b.file("cut") + "\"");
    CHECK(contains(cut, "plugins.safetensors.path: " + b.file("cut") + ": tensor "));
    CHECK(contains(cut, "file truncated?"));
    // A dtype the format has but baton does not read.
    const std::string header = R"({"inputs":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})";
    std::string f8(8, '\0');
    f8[0] = static_cast<char>(header.size());
    test::write_bytes(dir / "f8.safetensors", f8 + header + "abcd");
    CHECK(contains(b.error("path = \"" + b.file("f8") + "\""),
                   "plugins.safetensors.path: " + b.file("f8") + ": tensor 'inputs': unknown dtype 'F8_E4M3'"));

    // A missing tensor: the names the file holds, with their dtypes and shapes.
    const std::string no_inputs = b.error("targets = \"y\"");
    CHECK(contains(no_inputs, "plugins.safetensors.inputs: " + data + ": no tensor 'inputs'; the file holds y (I64 [6]), "
                              "x32 (F32 [6, 2, 3]), x16 (F16 [6, 4])"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"labels\""),
                   "plugins.safetensors.targets: " + data + ": no tensor 'labels'; the file holds y (I64 [6])"));
    CHECK(contains(b.error("inputs = \"short\"\ntargets = \"y\""),
                   "plugins.safetensors.targets: " + data + ": tensor 'y' holds 6 rows, but 'short' holds 5"));

    // Class targets: whole numbers from 0, within num_classes; task and num_classes that do not fit the targets.
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"yneg\""),
                   "plugins.safetensors.targets: " + data + ": tensor 'yneg' holds class -1 at row 2"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"y\"\nnum_classes = 2"),
                   "plugins.safetensors.num_classes: is 2, but " + data + ": tensor 'y' holds class 2 at row 0"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"yf\"\ntask = \"classification\""),
                   "plugins.safetensors.task: " + data + ": tensor 'yf' holds F32 values; class targets are stored as "
                   "integers"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"yf\"\nnum_classes = 3"),
                   "plugins.safetensors.num_classes: applies to class targets"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"x16\"\ntask = \"classification\""),
                   "plugins.safetensors.task: " + data + ": tensor 'x16' holds F16 values"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"xu8\""),
                   "plugins.safetensors.targets: " + data + ": tensor 'xu8' has shape [6, ...]; class targets are one "
                   "index per row"));

    // The evaluation file: its own errors at eval_path; rows shaped as the training file's.
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"y\"\neval_path = \"" + b.file("other") + "\""),
                   "plugins.safetensors.eval_path: " + b.file("other") +
                       ": tensor 'x32' has rows of shape [5], but the training file's input rows have [2, 3]"));
    CHECK(contains(b.error("inputs = \"xu8\"\ntargets = \"y\"\neval_path = \"" + b.file("other") + "\""),
                   "plugins.safetensors.eval_path: " + b.file("other") + ": no tensor 'xu8'"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"y\"\neval_path = \"" + missing + "\""),
                   "plugins.safetensors.eval_path: " + missing + ": cannot open: No such file or directory"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"y\"\neval_path = \"" + b.file("eval") + "\"\neval_fraction = 0.5"),
                   "plugins.safetensors.eval_fraction: cannot be used with eval_path"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"y\"\neval_fraction = 0.01"),
                   "plugins.safetensors.eval_fraction: leaves no evaluation rows of 6"));
    CHECK(contains(b.error("inputs = \"x32\"\ntargets = \"y\"\neval_fraction = 1"),
                   "plugins.safetensors.eval_fraction: expected a number in [0, 1)"));

    // Written by baton's own writer: a scalar and an empty tensor are no rows.
    write_safetensors((dir / "scalar.safetensors").string(),
                      {{"inputs", at::zeros({}, at::kFloat)}, {"targets", at::zeros({0}, at::kLong)}});
    CHECK(contains(b.error("path = \"" + b.file("scalar") + "\""),
                   "plugins.safetensors.inputs: " + b.file("scalar") + ": tensor inputs (F32 []) is a scalar"));
    write_safetensors((dir / "empty.safetensors").string(),
                      {{"inputs", at::zeros({0, 3}, at::kFloat)}, {"targets", at::zeros({0}, at::kLong)}});
    CHECK(contains(b.error("path = \"" + b.file("empty") + "\""),
                   "plugins.safetensors.inputs: " + b.file("empty") + ": tensor inputs (F32 [0, 3]) holds no rows"));
  }
}
