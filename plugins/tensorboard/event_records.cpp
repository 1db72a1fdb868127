#include "event_records.h"

#include <cstring>

#include <boost/crc.hpp>

namespace baton_tensorboard {
namespace {

// Protobuf's wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(wire_type));
}

template <std::size_t N>
void put_little_endian(std::string& out, std::uint64_t value) {
  for (std::size_t i = 0; i < N; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

// int32 and int64 fields are varints of the two's-complement 64-bit value (a negative one takes ten bytes).
void put_int(std::string& out, int field, std::int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<std::uint64_t>(value));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double value) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian<8>(out, bits);
}

void put_float(std::string& out, int field, float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian<4>(out, bits);
}

// Every Event begins with its wall time and step. Proto3 leaves a field at its default (0) out.
std::string event_head(double wall_time, std::int64_t step) {
  std::string event;
  put_double(event, 1, wall_time);
  if (step != 0) put_int(event, 2, step);
  return event;
}

// One field of a message: its number and wire type, a varint's value, a length-delimited field's bytes (fixed-width
// fields are skipped: these messages need none of their values back).
struct Field {
  int number = 0, wire_type = 0;
  std::uint64_t value = 0;
  std::string bytes;
};

class Reader {
 public:
  explicit Reader(const std::string& message) : data_(message) {}
  bool at_end() const { return pos_ == data_.size(); }

  // Reads the next field; false on bytes that are not one (a key of field 0, a cut varint, a length past the end).
  bool next(Field& field) {
    std::uint64_t key = 0;
    if (!varint(key) || (key >> 3) == 0 || (key >> 3) > (1u << 29)) return false;
    field.number = static_cast<int>(key >> 3);
    field.wire_type = static_cast<int>(key & 7);
    field.bytes.clear();
    switch (field.wire_type) {
      case kVarint: return varint(field.value);
      case kFixed64: return skip(8);
      case kFixed32: return skip(4);
      case kLengthDelimited: {
        std::uint64_t size = 0;
        if (!varint(size) || size > data_.size() - pos_) return false;
        field.bytes = data_.substr(pos_, size);
        pos_ += size;
        return true;
      }
      default: return false;  // groups (3, 4) are not in these messages
    }
  }

 private:
  bool varint(std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64 && pos_ < data_.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(data_[pos_++]);
      value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool skip(std::size_t size) {
    if (size > data_.size() - pos_) return false;
    pos_ += size;
    return true;
  }

  const std::string& data_;
  std::size_t pos_ = 0;
};

// CRC-32C (Castagnoli, as TFRecord uses): reflected, initial and final XOR all ones.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

// TFRecord stores each CRC "masked" (rotated and offset), so that a CRC of data that itself holds CRCs stays
// well-distributed.
std::uint32_t masked_crc(const void* data, std::size_t size) {
  Crc32c crc;
  crc.process_bytes(data, size);
  const std::uint32_t value = crc.checksum();
  return ((value >> 15) | (value << 17)) + 0xa282ead8u;
}

}  // namespace

std::string file_version_event(double wall_time, const std::string& version) {
  std::string event = event_head(wall_time, 0);
  put_bytes(event, 3, version);
  return event;
}

std::string session_start_event(double wall_time, std::int64_t step) {
  std::string session_log;
  put_int(session_log, 1, 1);  // status START
  std::string event = event_head(wall_time, step);
  put_bytes(event, 7, session_log);
  return event;
}

std::string scalars_event(double wall_time, std::int64_t step,
                          const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, number] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, number);
    put_bytes(summary, 1, value);
  }
  std::string event = event_head(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string image_event(double wall_time, std::int64_t step, const std::string& tag, const ImageSummary& image) {
  std::string picture;
  put_int(picture, 1, image.height);
  put_int(picture, 2, image.width);
  put_int(picture, 3, image.colorspace);
  put_bytes(picture, 4, image.png);
  std::string value;
  put_bytes(value, 1, tag);
  put_bytes(value, 4, picture);
  std::string summary;
  put_bytes(summary, 1, value);
  std::string event = event_head(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::optional<ScalarTags> read_scalar_tags(const std::string& event) {
  ScalarTags found;
  Field field;
  Reader reader(event);
  std::vector<std::string> summaries;
  while (!reader.at_end()) {
    if (!reader.next(field)) return std::nullopt;
    if (field.number == 2 && field.wire_type == kVarint) found.step = static_cast<std::int64_t>(field.value);
    if (field.number == 5 && field.wire_type == kLengthDelimited) summaries.push_back(field.bytes);
  }
  for (const std::string& summary : summaries) {
    Reader values(summary);
    while (!values.at_end()) {
      if (!values.next(field)) return std::nullopt;
      if (field.number != 1 || field.wire_type != kLengthDelimited) continue;
      const std::string value_bytes = field.bytes;
      Reader value(value_bytes);
      std::optional<std::string> tag;
      bool scalar = false;
      while (!value.at_end()) {
        if (!value.next(field)) return std::nullopt;
        if (field.number == 1 && field.wire_type == kLengthDelimited) tag = field.bytes;
        if (field.number == 2 && field.wire_type == kFixed32) scalar = true;
      }
      if (tag && scalar) found.tags.insert(*tag);
    }
  }
  return found;
}

std::string tfrecord(const std::string& payload) {
  std::string record;
  record.reserve(payload.size() + 16);
  put_little_endian<8>(record, payload.size());
  put_little_endian<4>(record, masked_crc(record.data(), 8));
  record += payload;
  put_little_endian<4>(record, masked_crc(payload.data(), payload.size()));
  return record;
}

}  // namespace baton_tensorboard
