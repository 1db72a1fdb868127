// event_records.h byte for byte: the expected bytes are protobuf's wire format worked out by hand from the field
// numbers (key = field << 3 | wire type; doubles and floats little-endian IEEE; varints 7 bits a byte, low first),
// and TFRecord's masked CRC-32C of the standard check input "123456789" (CRC-32C 0xE3069283, masked by
// ((crc >> 15) | (crc << 17)) + 0xa282ead8 = 0xC78AB0E5).
#include <doctest/doctest.h>

#include <string>

#include "event_records.h"

// In a namespace of its own: the plugin tests are one program, its files compiled together (unity build).
namespace tensorboard_records_test {

namespace pb = baton_tensorboard;

namespace {
std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}
}  // namespace

TEST_CASE("tensorboard event records: the wire format of each event, worked out by hand") {
  const std::string one = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f});  // wall_time 1.0 (field 1, fixed64)
  const std::string zero = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0});
  // Event{wall_time 1, step 5, summary{value{tag "a", simple_value 0.5}}}
  CHECK(pb::scalars_event(1.0, 5, {{"a", 0.5f}}) ==
        one + bytes({0x10, 0x05, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 'a', 0x15, 0, 0, 0, 0x3f}));
  // step 300 is the varint ac 02; session_log (field 7) {status START}
  CHECK(pb::session_start_event(1.0, 300) == one + bytes({0x10, 0xac, 0x02, 0x3a, 0x02, 0x08, 0x01}));
  // step 0 is proto3's default and left out; file_version is field 3
  CHECK(pb::file_version_event(0.0, "v") == zero + bytes({0x1a, 0x01, 'v'}));
  // summary{value{tag "s", image{height 2, width 3, colorspace 1, encoded_image_string "P"}}}
  CHECK(pb::image_event(0.0, 7, "s", {2, 3, 1, "P"}) ==
        zero + bytes({0x10, 0x07, 0x2a, 0x10, 0x0a, 0x0e, 0x0a, 0x01, 's', 0x22, 0x09,  //
                      0x08, 0x02, 0x10, 0x03, 0x18, 0x01, 0x22, 0x01, 'P'}));
}

TEST_CASE("tensorboard event records: a TFRecord frames the payload with masked CRC-32Cs") {
  const std::string record = pb::tfrecord("123456789");
  REQUIRE(record.size() == 8 + 4 + 9 + 4);
  CHECK(record.substr(0, 8) == bytes({9, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(record.substr(12, 9) == "123456789");
  CHECK(record.substr(21) == bytes({0xe5, 0xb0, 0x8a, 0xc7}));
}

TEST_CASE("tensorboard event records: the scalar tags read back; an image is no scalar; bad bytes are refused") {
  const auto scalars = pb::read_scalar_tags(pb::scalars_event(3.5, 1234567, {{"eval/accuracy", 0.9f}, {"l", 2}}));
  REQUIRE(scalars);
  CHECK(scalars->step == 1234567);
  CHECK(scalars->tags == std::set<std::string>{"eval/accuracy", "l"});
  const auto image = pb::read_scalar_tags(pb::image_event(1.0, 9, "samples/eval", {1, 1, 1, "x"}));
  REQUIRE(image);
  CHECK(image->step == 9);
  CHECK(image->tags.empty());
  CHECK_FALSE(pb::read_scalar_tags(bytes({0x2a, 0x05, 0x0a})));  // a summary longer than the bytes left
  CHECK_FALSE(pb::read_scalar_tags(bytes({0x10, 0x80})));        // a varint cut short
  const std::string event = pb::scalars_event(1.0, 2, {{"x", 1}});
  CHECK_FALSE(pb::read_scalar_tags(event.substr(0, event.size() - 2)));  // cut inside the float
}

}  // namespace tensorboard_records_test
