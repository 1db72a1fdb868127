#include "baton_test.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "baton/error.h"
#include "checkpoint/durable_file.h"

namespace fs = std::filesystem;

using baton::test::read_bytes;
using baton::test::write_bytes;

TEST_SUITE("checkpoint") {
  TEST_CASE("durable_file: write_file_atomic creates and replaces, leaving no temporary") {
    auto dir = baton::test::scratch_dir("durable_file_atomic");
    const auto path = (dir / "a.txt").string();
    baton::write_file_atomic(path, "first");
    CHECK(baton::read_text_file(path) == "first");
    baton::write_file_atomic(path, std::string("sec\0ond", 7));
    CHECK(read_bytes(path) == std::string("sec\0ond", 7));
    CHECK_FALSE(fs::exists(path + ".tmp"));
    CHECK_THROWS_WITH_AS(baton::write_file_atomic((dir / "no" / "b.txt").string(), "x"),
                         doctest::Contains("no/b.txt.tmp"), baton::Error);
  }

  TEST_CASE("durable_file: rename_durably moves files and folders into place and cleans up when it cannot") {
    auto dir = baton::test::scratch_dir("durable_file_rename");
    const auto target = (dir / "t.txt").string();
    baton::write_file_atomic(target, "old");
    baton::write_file_atomic((dir / "new.txt").string(), "new");
    baton::rename_durably((dir / "new.txt").string(), target);
    CHECK(baton::read_text_file(target) == "new");
    CHECK_FALSE(fs::exists(dir / "new.txt"));
    fs::create_directories(dir / "folder.tmp" / "inner");
    baton::rename_durably((dir / "folder.tmp").string(), (dir / "folder").string());
    CHECK(fs::is_directory(dir / "folder" / "inner"));
    // A folder cannot replace a file: the error names both and the temporary folder is gone.
    fs::create_directories(dir / "other.tmp" / "inner");
    CHECK_THROWS_WITH_AS(baton::rename_durably((dir / "other.tmp").string(), target),
                         doctest::Contains(("other.tmp to " + target).c_str()), baton::Error);
    CHECK_FALSE(fs::exists(dir / "other.tmp"));
    CHECK(baton::read_text_file(target) == "new");
  }

  TEST_CASE("durable_file: crc32_of_file matches the standard check value and zlib over large files") {
    auto dir = baton::test::scratch_dir("durable_file_crc");
    baton::write_file_atomic((dir / "check").string(), "123456789");
    CHECK(baton::crc32_of_file((dir / "check").string()) == 0xCBF43926u);  // the CRC-32 check value
    baton::write_file_atomic((dir / "empty").string(), "");
    CHECK(baton::crc32_of_file((dir / "empty").string()) == 0u);
    // Larger than the 1 MiB read chunk, so the streaming path runs more than once.
    std::string big(3 * (1 << 20) + 12345, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
    baton::write_file_atomic((dir / "big").string(), big);
    const auto expected = static_cast<std::uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(big.data()), big.size()));
    CHECK(baton::crc32_of_file((dir / "big").string()) == expected);
    CHECK_THROWS_WITH_AS(baton::crc32_of_file((dir / "missing").string()), doctest::Contains("missing"), baton::Error);
  }

  TEST_CASE("durable_file: DurableFileWriter counts bytes and crc32 as it writes") {
    auto dir = baton::test::scratch_dir("durable_file_writer");
    const auto path = (dir / "w.bin").string();
    baton::DurableFileWriter writer(path);
    writer.write("12345", 5);
    writer.write("6789", 4);
    writer.finish();
    CHECK(writer.bytes() == 9);
    CHECK(writer.crc32() == 0xCBF43926u);
    CHECK(read_bytes(path) == "123456789");
    CHECK_THROWS_AS(writer.write("x", 1), baton::Error);
  }

  TEST_CASE("durable_file: errors name the path") {
    auto dir = baton::test::scratch_dir("durable_file_errors");
    const auto missing = (dir / "nothing-here").string();
    CHECK_THROWS_WITH_AS(baton::read_text_file(missing), doctest::Contains(missing.c_str()), baton::Error);
    CHECK_THROWS_WITH_AS(baton::fsync_path(missing), doctest::Contains(missing.c_str()), baton::Error);
    CHECK_NOTHROW(baton::fsync_path(dir.string()));
  }
}
