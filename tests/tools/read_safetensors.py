#!/usr/bin/env python3
"""Reads a safetensors file with the standard library only (struct, json) and prints one line per tensor:

    <name> <dtype> <shape as [d0, d1]> <sum>

The sum adds the tensor's values as float32 in file order (F16 and BF16 are widened exactly; BOOL counts 1 for true)
and is printed with repr() of a Python float rounded through float32. An independent check of baton's writer:
it follows the published format description, not baton's code. Exit status 1 with a message on a malformed file.
"""
import json
import struct
import sys

# dtype -> (struct format character, bytes per element); F16 uses struct's 'e', BF16 is widened by hand.
FORMATS = {
    "F64": ("d", 8), "F32": ("f", 4), "F16": ("e", 2), "BF16": ("H", 2),
    "I64": ("q", 8), "I32": ("i", 4), "I16": ("h", 2), "I8": ("b", 1),
    "U8": ("B", 1), "BOOL": ("?", 1),
}


def to_float32(value):
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


def values(dtype, raw):
    code, size = FORMATS[dtype]
    count = len(raw) // size
    items = struct.unpack("<%d%s" % (count, code), raw)
    if dtype == "BF16":
        # bfloat16 is the upper half of a float32.
        return [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in items]
    return [float(v) for v in items]


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("file shorter than 8 bytes")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError("header length %d beyond the file" % header_len)
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    data = blob[8 + header_len:]
    header.pop("__metadata__", None)
    out = []
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError("tensor %s: offsets outside the data" % name)
        shape = info["shape"]
        count = 1
        for d in shape:
            count *= d
        if count * FORMATS[info["dtype"]][1] != end - begin:
            raise ValueError("tensor %s: size does not match shape" % name)
        total = 0.0
        for v in values(info["dtype"], data[begin:end]):
            total = to_float32(total + v)
        out.append((name, info["dtype"], shape, total))
    return out


def main():
    if len(sys.argv) != 2:
        print("usage: read_safetensors.py FILE", file=sys.stderr)
        return 2
    try:
        tensors = read(sys.argv[1])
    except (OSError, ValueError, KeyError) as e:
        print("%s: %s" % (sys.argv[1], e), file=sys.stderr)
        return 1
    for name, dtype, shape, total in tensors:
        print("%s %s %s %r" % (name, dtype, json.dumps(shape), total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
