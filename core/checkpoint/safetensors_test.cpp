#include "baton_test.h"
#include "error_text.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/module.h>

#include "baton/error.h"
#include "baton/safetensors.h"

namespace fs = std::filesystem;

using baton::test::read_bytes;
using baton::test::write_bytes;

namespace {

std::string le64(std::uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A file assembled by hand: length field, header text, data bytes.
std::string crafted(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

// The problem reported for a crafted file (the part after "<file>: "), checking that the file is named.
std::string problem_of(const fs::path& path) {
  try {
    baton::read_safetensors(path.string());
  } catch (const baton::SafetensorsError& e) {
    CHECK(e.file() == path.string());
    CHECK(std::string(e.what()).rfind(path.string() + ": ", 0) == 0);
    return e.problem();
  }
  return "<no SafetensorsError>";
}

// The problem `load` reports as a SafetensorsError about `path`.
template <class Load>
std::string problem_of(const std::string& path, Load load) {
  try {
    load();
  } catch (const baton::SafetensorsError& e) {
    CHECK(e.file() == path);
    return e.problem();
  }
  return "<no SafetensorsError>";
}

std::string problem_of_bytes(const fs::path& dir, const std::string& bytes) {
  auto path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  return problem_of(path);
}

using baton::test::contains;

bool python3_on_path() {
  const char* path = std::getenv("PATH");
  if (!path) return false;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && ::access((fs::path(dir) / "python3").c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string run_and_capture(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  std::size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, got);
  CHECK(::pclose(pipe) == 0);
  return out;
}

}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("safetensors: every dtype, 0-d and empty tensors and metadata round trip") {
    auto dir = baton::test::scratch_dir("safetensors_roundtrip");
    const auto path = (dir / "all.safetensors").string();
    baton::NamedTensors tensors = {
        {"f64", at::arange(6, at::kDouble).div(7).reshape({2, 3})},
        {"f32", at::arange(5, at::kFloat).mul(0.1)},
        {"f16", at::arange(4, at::kFloat).mul(0.3).to(at::kHalf)},
        {"bf16", at::arange(4, at::kFloat).mul(-1.7).to(at::kBFloat16)},
        {"i64", at::arange(3, at::kLong).mul(static_cast<std::int64_t>(1000000000000))},
        {"i32", at::arange(-2, 2, at::kInt)},
        {"i16", at::arange(-300, 300, 100, at::kShort)},
        {"i8", at::arange(-128, 128, 51, at::kChar)},
        {"u8", at::arange(0, 256, 64, at::kLong).to(at::kByte)},
        {"bool", at::arange(5, at::kLong).remainder(2).to(at::kBool)},
        {"scalar/0d.value", at::full({}, 2.5, at::kFloat)},
        {"empty", at::zeros({0, 3}, at::kFloat)},
        {"transposed", at::arange(6, at::kFloat).reshape({2, 3}).t()},  // not contiguous
    };
    std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode \"quoted\""}};
    auto digest = baton::write_safetensors(path, tensors, metadata);
    CHECK(digest.bytes == fs::file_size(path));
    const std::string bytes = read_bytes(path);
    CHECK(digest.crc32 == ::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));

    auto back = baton::read_safetensors(path);
    CHECK(back.metadata == metadata);
    REQUIRE(back.tensors.size() == tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      CAPTURE(tensors[i].first);
      CHECK(back.tensors[i].first == tensors[i].first);
      CHECK((back.tensors[i].second.scalar_type() == tensors[i].second.scalar_type()));
      CHECK(back.tensors[i].second.sizes().vec() == tensors[i].second.sizes().vec());
      CHECK(at::equal(back.tensors[i].second, tensors[i].second));
    }
    CHECK(back.tensors[10].second.dim() == 0);
    CHECK(back.tensors[10].second.item<float>() == 2.5f);
  }

  TEST_CASE("safetensors: byte layout matches the spec") {
    auto dir = baton::test::scratch_dir("safetensors_layout");
    const auto path = (dir / "one.safetensors").string();
    baton::write_safetensors(path, {{"a", at::tensor({1.0f, -2.0f})}});
    const std::string bytes = read_bytes(path);
    const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";  // 54 characters
    const std::string header = json + std::string(2, ' ');                                  // padded to 56
    REQUIRE(bytes.size() == 8 + 56 + 8);
    CHECK(bytes.substr(0, 8) == le64(56));
    CHECK(bytes.substr(8, 56) == header);
    // 1.0f = 0x3f800000, -2.0f = 0xc0000000, little-endian.
    CHECK(bytes.substr(64) == std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8));
  }

  TEST_CASE("safetensors: metadata is omitted when empty and an empty file list is valid") {
    auto dir = baton::test::scratch_dir("safetensors_empty");
    const auto path = (dir / "none.safetensors").string();
    baton::write_safetensors(path, {});
    CHECK(read_bytes(path) == le64(8) + "{}      ");
    auto back = baton::read_safetensors(path);
    CHECK(back.tensors.empty());
    CHECK(back.metadata.empty());
  }

  TEST_CASE("safetensors: writer rejects unsupported dtypes and duplicate names, leaving no file") {
    auto dir = baton::test::scratch_dir("safetensors_writer_errors");
    const auto path = (dir / "bad.safetensors").string();
    try {
      baton::write_safetensors(path, {{"ok", at::zeros({1})}, {"z", at::zeros({2}, at::kComplexFloat)}});
      FAIL("expected an error");
    } catch (const baton::Error& e) {
      CHECK(contains(e.what(), path));
      CHECK(contains(e.what(), "tensor 'z'"));
      CHECK(contains(e.what(), "unsupported dtype"));
    }
    CHECK_THROWS_WITH_AS(baton::write_safetensors(path, {{"x", at::zeros({1})}, {"x", at::zeros({1})}}),
                         doctest::Contains("tensor 'x' appears twice"), baton::Error);
    CHECK_THROWS_WITH_AS(baton::write_safetensors(path, {{"__metadata__", at::zeros({1})}}),
                         doctest::Contains("invalid tensor name"), baton::Error);
    CHECK_FALSE(fs::exists(path));
  }

  TEST_CASE("safetensors: write_safetensors_atomic replaces a file whole and keeps the old one when it fails") {
    auto dir = baton::test::scratch_dir("safetensors_atomic");
    const auto path = (dir / "w.safetensors").string();
    auto first = baton::write_safetensors_atomic(path, {{"a", at::full({2}, 1.5)}}, {{"k", "one"}});
    CHECK(first.bytes == fs::file_size(path));
    baton::write_safetensors_atomic(path, {{"b", at::arange(3, at::kLong)}}, {{"k", "two"}});
    auto back = baton::read_safetensors(path);
    REQUIRE(back.tensors.size() == 1);
    CHECK(back.tensors[0].first == "b");
    CHECK(back.tensors[0].second.equal(at::arange(3, at::kLong)));
    CHECK(back.metadata.at("k") == "two");
    CHECK_FALSE(fs::exists(path + ".tmp"));
    // A refused write leaves the previous file untouched and no temporary behind.
    CHECK_THROWS_WITH_AS(baton::write_safetensors_atomic(path, {{"z", at::zeros({2}, at::kComplexFloat)}}),
                         doctest::Contains("unsupported dtype"), baton::Error);
    CHECK(baton::read_safetensors(path).metadata.at("k") == "two");
    CHECK_FALSE(fs::exists(path + ".tmp"));
    CHECK_THROWS_WITH_AS(baton::write_safetensors_atomic((dir / "no" / "x.safetensors").string(), {}),
                         doctest::Contains("no/x.safetensors.tmp"), baton::Error);
  }

  TEST_CASE("safetensors: reader reports each kind of malformed file") {
    auto dir = baton::test::scratch_dir("safetensors_reader_errors");
    const std::string four_floats(16, '\0');
    const std::string entry = R"("dtype":"F32","shape":[4])";

    CHECK(contains(problem_of_bytes(dir, "abc"), "truncated: file has 3 bytes"));
    CHECK(contains(problem_of_bytes(dir, le64(1234) + std::string(992, ' ')),
                   "truncated: header says 1234 bytes, file has 992"));
    CHECK(contains(problem_of_bytes(dir, crafted("{\"a\": ", "")), "invalid JSON header"));
    // Files of other formats are named as such, not as a safetensors file of an absurd header (issue 24 §11).
    CHECK(contains(problem_of_bytes(dir, "x;y\r\n1;2\r\n3;4\r\n"),
                   "not a safetensors file: it starts with the text \"x;y\\r\\n1;2\" (a safetensors file"));
    CHECK(contains(problem_of_bytes(dir, std::string("PK\x03\x04", 4) + std::string(40, '\0')),
                   "not a safetensors file: a zip archive, as torch.save and TorchScript write"));
    CHECK(contains(problem_of_bytes(dir, std::string("\x80\x02}q\x00(X\x01\x00\x00\x00", 13) + std::string(40, 'a')),
                   "not a safetensors file: a Python pickle"));
    CHECK(contains(problem_of_bytes(dir, crafted("[1, 2]  ", "")), "header is a JSON array, expected an object"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{"dtype":"F8","shape":[4],"data_offsets":[0,4]}})", "    ")),
                   "tensor 'a': unknown dtype 'F8'"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{)" + entry + R"(,"data_offsets":[16,0]}})", four_floats)),
                   "tensor 'a': data_offsets out of order"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{)" + entry + R"(,"data_offsets":[0,12]}})", four_floats)),
                   "span 12 bytes, but shape [4] of F32 needs 16"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{)" + entry + R"(,"data_offsets":[0,16]},)"
                                                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}})",
                                                 four_floats)),
                   "tensor 'b' overlaps tensor 'a'"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                                                 std::string(8, 'x'))),
                   "gap of 4 bytes before tensor 'a'"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{)" + entry + R"(,"data_offsets":[0,16]}})", "12345678")),
                   "tensor 'a': data_offsets [0, 16] lie outside the data (8 bytes"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{)" + entry + R"(,"data_offsets":[0,16]}})",
                                                 four_floats + "junk")),
                   "4 trailing bytes after the last tensor"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"__metadata__":{"k":1}})", "")),
                   "__metadata__ entry 'k' is a JSON number, expected a string"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", "")),
                   "tensor 'a': shape: expected a non-negative integer, got -1"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{"dtype":"U8","shape":[0]}})", "")),
                   "tensor 'a': missing field 'data_offsets'"));
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1}})", "")),
                   "tensor 'a': unknown field 'x'"));
    // A shape whose byte count overflows 64 bits must not wrap around to match the offsets.
    CHECK(contains(problem_of_bytes(dir, crafted(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],)"
                                                 R"("data_offsets":[0,0]}})", "")),
                   "shape too large"));
    CHECK(contains(problem_of(dir / "does-not-exist.safetensors"), "cannot open"));
  }

  TEST_CASE("load_safetensors_into loads named tensors into a module by name, strictly or not (issue 24 §22)") {
    struct Inner : torch::nn::Module {
      Inner() { weight = register_parameter("weight", at::zeros({2, 3})); }
      at::Tensor weight;
    };
    struct Outer : torch::nn::Module {
      Outer() {
        inner = register_module("inner", std::make_shared<Inner>());
        count = register_buffer("count", at::zeros({}, at::kLong));
      }
      std::shared_ptr<Inner> inner;
      at::Tensor count;
    };
    auto dir = baton::test::scratch_dir("safetensors_into_module");
    const auto file = (dir / "weights.safetensors").string();
    // float64 in the file: converted to the module's float32.
    baton::write_safetensors(file, {{"inner.weight", at::arange(6, at::kDouble).reshape({2, 3})},
                                    {"count", at::full({}, 7, at::kLong)}});
    Outer model;
    const at::Tensor held = model.inner->weight;  // what an optimizer holds: loaded in place
    CHECK(baton::load_safetensors_into(model, file) == 2);
    CHECK(at::equal(held, at::arange(6, at::kFloat).reshape({2, 3})));
    CHECK(model.count.item<std::int64_t>() == 7);
    CHECK(held.requires_grad());  // still the parameter, gradients on

    baton::write_safetensors(file, {{"inner.weight", at::zeros({3, 2})}});
    CHECK(contains(problem_of(file, [&] { baton::load_safetensors_into(model, file, false); }),
                   "tensor 'inner.weight' is [3, 2] in the file but [2, 3] in the module"));
    baton::write_safetensors(file, {{"inner.weight", at::ones({2, 3})}, {"extra", at::zeros({1})}});
    CHECK(contains(problem_of(file, [&] { baton::load_safetensors_into(model, file); }),
                   "the module's buffer 'count' is not in the file"));
    CHECK(baton::load_safetensors_into(model, file, /*strict=*/false) == 1);
    CHECK(model.inner->weight.sum().item<double>() == 6.0);
    baton::write_safetensors(file, {{"inner.weight", at::ones({2, 3})}, {"count", at::zeros({}, at::kLong)},
                                    {"extra", at::zeros({1})}});
    CHECK(contains(problem_of(file, [&] { baton::load_safetensors_into(model, file); }),
                   "tensor 'extra' belongs to no parameter or buffer of the module"));
  }

  TEST_CASE("safetensors: damaged real files are rejected") {
    auto dir = baton::test::scratch_dir("safetensors_damaged");
    const auto good = dir / "good.safetensors";
    baton::write_safetensors(good.string(), {{"w", at::arange(8, at::kFloat)}, {"b", at::zeros({2})}});
    const std::string bytes = read_bytes(good);

    CHECK(contains(problem_of_bytes(dir, bytes.substr(0, bytes.size() - 5)), "lie outside the data"));
    CHECK(contains(problem_of_bytes(dir, bytes.substr(0, 20)), "truncated: header says"));
    std::string flipped = bytes;
    flipped[8] = 'x';  // the header's opening brace
    CHECK(contains(problem_of_bytes(dir, flipped), "invalid JSON header"));
    std::string bad_length = bytes;
    bad_length[7] = '\x7f';
    CHECK(contains(problem_of_bytes(dir, bad_length), "truncated: header says"));
    CHECK_NOTHROW(baton::validate_safetensors(good.string()));
    auto bad = dir / "bad.safetensors";
    write_bytes(bad, bytes + "x");
    CHECK_THROWS_WITH_AS(baton::validate_safetensors(bad.string()), doctest::Contains("1 trailing bytes"),
                         baton::CheckpointError);
  }

  TEST_CASE("safetensors: an independent stdlib Python reader agrees with the writer") {
    if (!python3_on_path()) {
      MESSAGE("python3 is not on the PATH: skipping the cross-check with tests/tools/read_safetensors.py");
      return;
    }
    auto dir = baton::test::scratch_dir("safetensors_python");
    const auto path = (dir / "py.safetensors").string();
    baton::write_safetensors(path,
                             {{"model/layer.0.weight", at::tensor({1.5f, 2.25f, -0.75f, 4.0f}).reshape({2, 2})},
                              {"bf16", at::tensor({1.0f, 2.5f}).to(at::kBFloat16)},
                              {"half.0d", at::full({}, 0.5, at::kHalf)},
                              {"i64", at::tensor({1, 2, 3}, at::kLong)},
                              {"mask", at::tensor({1, 0, 1}, at::kLong).to(at::kBool)},
                              {"empty", at::zeros({0, 4})}},
                             {{"epoch", "3"}});
    const std::string script = std::string(BATON_SOURCE_DIR) + "/tests/tools/read_safetensors.py";
    const std::string out = run_and_capture("python3 '" + script + "' '" + path + "'");
    // Sums by hand: 1.5 + 2.25 - 0.75 + 4 = 7; 1 + 2.5 = 3.5; 1 + 2 + 3 = 6; two true values = 2.
    CHECK(out ==
          "model/layer.0.weight F32 [2, 2] 7.0\n"
          "bf16 BF16 [2] 3.5\n"
          "half.0d F16 [] 0.5\n"
          "i64 I64 [3] 6.0\n"
          "mask BOOL [3] 2.0\n"
          "empty F32 [0, 4] 0.0\n");
  }
}
