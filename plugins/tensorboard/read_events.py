"""Reads a run's TensorBoard folder and checks it against metrics.jsonl.

usage: read_events.py [--spec] <run folder> <tb folder name> <image tag>...

The reader is TensorBoard's own EventAccumulator (the tensorboard package). With --spec it is spec_reader below,
written from the published formats alone (TFRecord framing with masked CRC-32C, protobuf's wire format, the field
numbers of TensorBoard's event.proto and summary.proto): the test uses it where the package cannot be installed.

Every value of metrics.jsonl (the last one logged for a name at a batch: a resumed run logs the steps after its
checkpoint again) must be a scalar of that tag at that step, equal as float32; TensorBoard must hold no other
scalar and no tag two values at one step (a resumed run's file purges the steps it logs again); each image tag
given must hold PNG images. Prints what it found; exits 1 with the first mismatches otherwise.
"""
import json
import math
import os
import struct
import sys



def float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def tensorboard_reader(folder):
    """{tag: [(step, value)]} and {tag: [(step, width, height, encoded)]} as TensorBoard's EventAccumulator reads
    the folder: its files in name order, a SessionLog START dropping what earlier files logged at its step or later."""
    from tensorboard.backend.event_processing import event_accumulator
    accumulator = event_accumulator.EventAccumulator(
        folder, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in tags["scalars"]}
    images = {tag: [(e.step, e.width, e.height, e.encoded_image_string) for e in accumulator.Images(tag)]
              for tag in tags["images"]}
    return scalars, images


def crc32c(data):
    """CRC-32C (Castagnoli; reflected polynomial 0x82F63B78, initial and final value 0xFFFFFFFF)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """A TFRecord file's records: u64 length, u32 masked CRC of the length, data, u32 masked CRC of the data."""
    with open(path, "rb") as f:
        blob = f.read()
    at = 0
    while at < len(blob):
        if len(blob) - at < 12:
            raise ValueError("%s: %d bytes after the last whole record" % (path, len(blob) - at))
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if header_crc != masked_crc(header):
            raise ValueError("%s: the length at byte %d fails its CRC" % (path, at))
        data = blob[at + 12:at + 12 + length]
        footer = blob[at + 12 + length:at + 16 + length]
        if len(data) != length or len(footer) != 4 or struct.unpack("<I", footer)[0] != masked_crc(data):
            raise ValueError("%s: the record at byte %d is cut short or fails its CRC" % (path, at))
        yield data
        at += 16 + length


def fields(message):
    """A protobuf message's (field number, wire type, value) in order: varints as int, 64-bit and 32-bit as raw
    bytes, length-delimited as bytes."""
    at = 0

    def varint():
        nonlocal at
        value, shift = 0, 0
        while True:
            byte = message[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while at < len(message):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, wire, varint()
        elif wire == 1:
            yield number, wire, message[at:at + 8]
            at += 8
        elif wire == 2:
            length = varint()
            yield number, wire, message[at:at + length]
            at += length
        elif wire == 5:
            yield number, wire, message[at:at + 4]
            at += 4
        else:
            raise ValueError("wire type %d is not one TensorBoard's messages use" % wire)


def spec_reader(folder):
    """The same result as tensorboard_reader, from the formats alone. Event: step 2 (int64), file_version 3,
    summary 5, session_log 7; SessionLog: status 1 (START = 1); Summary: value 1 (repeated); Summary.Value: tag 1,
    simple_value 2 (float), image 4; Summary.Image: height 1, width 2, encoded_image_string 4."""
    if crc32c(b"123456789") != 0xE3069283:  # the CRC's published check value
        raise AssertionError("crc32c is wrong")
    scalars, images = {}, {}
    names = sorted(name for name in os.listdir(folder) if "tfevents" in name)
    for name in names:
        for record in records(os.path.join(folder, name)):
            step, summary, start = 0, None, False
            for number, wire, value in fields(record):
                if number == 2 and wire == 0:
                    step = value
                elif number == 5 and wire == 2:
                    summary = value
                elif number == 7 and wire == 2:
                    start = any(n == 1 and v == 1 for n, _, v in fields(value))
            if start:  # a restart: what was logged at this step or later is superseded
                for series in list(scalars.values()) + list(images.values()):
                    series[:] = [item for item in series if item[0] < step]
            if summary is None:
                continue
            for number, wire, value in fields(summary):
                if number != 1 or wire != 2:
                    continue
                tag, simple, image = None, None, None
                for n, w, v in fields(value):
                    if n == 1 and w == 2:
                        tag = v.decode()
                    elif n == 2 and w == 5:
                        (simple,) = struct.unpack("<f", v)
                    elif n == 4 and w == 2:
                        image = dict((n2, v2) for n2, _, v2 in fields(v))
                if simple is not None:
                    scalars.setdefault(tag, []).append((step, simple))
                elif image is not None:
                    images.setdefault(tag, []).append((step, image.get(2, 0), image.get(1, 0), image.get(4, b"")))
    return scalars, images


def main():
    args = sys.argv[1:]
    reader = tensorboard_reader
    if args and args[0] == "--spec":
        reader = spec_reader
        args = args[1:]
    run, tb_name, image_tags = args[0], args[1], args[2:]
    expected = {}
    with open(os.path.join(run, "metrics.jsonl")) as lines:
        for line in lines:
            record = json.loads(line)
            for name, value in record.items():
                if name not in ("epoch", "batch", "sample"):
                    expected[(name, record["batch"])] = value
    scalars, image_series = reader(os.path.join(run, tb_name))
    errors = []
    found = {}
    for tag, series in scalars.items():
        steps = [step for step, _ in series]
        if len(steps) != len(set(steps)):
            errors.append("tag %s has several values at one step: %s" % (tag, steps))
        for step, value in series:
            found[(tag, step)] = value
    for (name, step), value in sorted(expected.items()):
        if (name, step) not in found:
            errors.append("%s at step %d is missing" % (name, step))
            continue
        got = found[(name, step)]
        if value is None:
            if math.isfinite(got):
                errors.append("%s at step %d: expected a non-finite value, got %r" % (name, step, got))
        elif got != float32(value):
            errors.append("%s at step %d: expected %r (as float32 %r), got %r" % (name, step, value,
                                                                                float32(value), got))
    for key in sorted(set(found) - set(expected)):
        errors.append("%s at step %d is not in metrics.jsonl" % key)
    images = {}
    for tag in image_tags:
        if tag not in image_series:
            errors.append("image tag %s is missing (image tags: %s)" % (tag, sorted(image_series)))
            continue
        images[tag] = [step for step, _, _, _ in image_series[tag]]
        for step, width, height, encoded in image_series[tag]:
            if not encoded.startswith(b"\x89PNG\r\n\x1a\n"):
                errors.append("image %s at step %d is not a PNG" % (tag, step))
            if width <= 0 or height <= 0:
                errors.append("image %s at step %d has no size" % (tag, step))
    print(json.dumps({"reader": reader.__name__, "scalars": len(found), "expected": len(expected),
                      "scalar_tags": sorted(scalars), "images": images}))
    if errors:
        print("\n".join(errors[:20]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
