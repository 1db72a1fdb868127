"""Reads a run's TensorBoard folder with TensorBoard's own EventAccumulator and checks it against metrics.jsonl.

usage: read_events.py <run folder> <tb folder name> <image tag>...

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

from tensorboard.backend.event_processing import event_accumulator


def float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def main():
    run, tb_name, image_tags = sys.argv[1], sys.argv[2], sys.argv[3:]
    expected = {}
    with open(os.path.join(run, "metrics.jsonl")) as lines:
        for line in lines:
            record = json.loads(line)
            for name, value in record.items():
                if name not in ("epoch", "batch", "sample"):
                    expected[(name, record["batch"])] = value
    accumulator = event_accumulator.EventAccumulator(
        os.path.join(run, tb_name),
        size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    errors = []
    found = {}
    for tag in tags["scalars"]:
        steps = [event.step for event in accumulator.Scalars(tag)]
        if len(steps) != len(set(steps)):
            errors.append("tag %s has several values at one step: %s" % (tag, steps))
        for event in accumulator.Scalars(tag):
            found[(tag, event.step)] = event.value
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
        if tag not in tags["images"]:
            errors.append("image tag %s is missing (image tags: %s)" % (tag, tags["images"]))
            continue
        events = accumulator.Images(tag)
        images[tag] = [event.step for event in events]
        for event in events:
            if not event.encoded_image_string.startswith(b"\x89PNG\r\n\x1a\n"):
                errors.append("image %s at step %d is not a PNG" % (tag, event.step))
            if event.width <= 0 or event.height <= 0:
                errors.append("image %s at step %d has no size" % (tag, event.step))
    print(json.dumps({"scalars": len(found), "expected": len(expected), "scalar_tags": sorted(tags["scalars"]),
                      "images": images}))
    if errors:
        print("\n".join(errors[:20]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
