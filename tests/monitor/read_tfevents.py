#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, with struct alone (no TensorFlow, no protobuf):
it checks the TFRecord framing and both masked CRC-32Cs of every record with its own CRC table,
decodes each tensorflow.Event's protobuf fields by hand, and prints the events as one JSON list:
[{"wall_time": s, "step": n, "file_version": "..."} | {..., "values": [[tag, simple_value], ...]}].
A bad CRC, a truncated record or a malformed field ends it with status 1 and a message on stderr."""
import json
import struct
import sys

_TABLE = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    _TABLE.append(_crc)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(data, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ValueError("varint runs past the end of its message")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, pos


def fields(data):
    """(field number, wire type, value) for each field of a protobuf message."""
    pos = 0
    while pos < len(data):
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire} of field {number} is not one an Event uses")
        if pos > len(data):
            raise ValueError(f"field {number} runs past the end of its message")
        yield number, wire, value


def summary_value(data):
    tag, simple = None, None
    for number, wire, value in fields(data):
        if number == 1 and wire == 2:
            tag = value.decode("utf-8")
        elif number == 2 and wire == 5:
            simple = struct.unpack("<f", value)[0]
    return [tag, simple]


def event(data):
    out = {"step": 0}
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            out["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            out["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            out["file_version"] = value.decode("utf-8")
        elif number == 5 and wire == 2:
            out["values"] = [summary_value(v) for n, w, v in fields(value) if n == 1 and w == 2]
    return out


def records(blob):
    pos = 0
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise ValueError(f"truncated record header at byte {pos}")
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if masked(crc32c(header)) != length_crc:
            raise ValueError(f"length CRC mismatch at byte {pos}")
        data = blob[pos + 12:pos + 12 + length]
        if len(data) != length or pos + 16 + length > len(blob):
            raise ValueError(f"truncated record at byte {pos}")
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if masked(crc32c(data)) != data_crc:
            raise ValueError(f"data CRC mismatch at byte {pos}")
        yield data
        pos += 16 + length


def main():
    events = []
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            blob = f.read()
        try:
            events += [event(data) for data in records(blob)]
        except ValueError as e:
            sys.exit(f"{path}: {e}")
    json.dump(events, sys.stdout)


if __name__ == "__main__":
    main()
