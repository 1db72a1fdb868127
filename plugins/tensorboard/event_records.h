// The records of a TensorBoard event file that the tensorboard logger writes and reads back, in protobuf's wire
// format, encoded here by field number (TensorBoard's tensorboard/compat/proto/event.proto and summary.proto):
//   Event       1 wall_time double, 2 step int64, 3 file_version string, 5 summary Summary, 7 session_log SessionLog
//   Summary     1 value Value (repeated)
//   Value       1 tag string, 2 simple_value float, 4 image Image
//   Image       1 height int32, 2 width int32, 3 colorspace int32, 4 encoded_image_string bytes
//   SessionLog  1 status enum (START = 1)
// Hand-encoded rather than generated with protoc: these few fields do not need protobuf's runtime, and the
// generated code must compile against the protobuf headers of the protoc that made it, which LibTorch's own
// include folder shadows with the older copy that PyTorch's wheels ship.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace baton_tensorboard {

std::string file_version_event(double wall_time, const std::string& version);
std::string session_start_event(double wall_time, std::int64_t step);
std::string scalars_event(double wall_time, std::int64_t step,
                          const std::vector<std::pair<std::string, float>>& values);
struct ImageSummary {
  std::int32_t height = 0, width = 0, colorspace = 0;  // colorspace: 1 grey, 3 RGB, 4 RGBA
  std::string png;
};
std::string image_event(double wall_time, std::int64_t step, const std::string& tag, const ImageSummary& image);

// An event's step and the tags of its scalar values; nullopt when the bytes do not parse as an Event.
struct ScalarTags {
  std::int64_t step = 0;
  std::set<std::string> tags;
};
std::optional<ScalarTags> read_scalar_tags(const std::string& event);

// A TFRecord around `payload`: its little-endian uint64 length, the length's masked CRC-32C, the payload, the
// payload's masked CRC-32C.
std::string tfrecord(const std::string& payload);

}  // namespace baton_tensorboard
