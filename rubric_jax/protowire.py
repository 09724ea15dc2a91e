"""Protobuf wire-format decoding, enough for the XSpace traces jax.profiler writes and xla's HloProto.

`rubric_jax.profile_summary` reads `<host>.xplane.pb` with these instead of depending on TensorFlow or xprof:
a message is a sequence of (field number, value) pairs, varints for wire type 0, fixed 64/32-bit values for
types 1 and 5, and length-delimited bytes (strings, nested messages, packed repeated fields) for type 2.
"""

from __future__ import annotations

import struct
from typing import Iterator

__all__ = ["event", "fields", "packed", "stat", "text", "varint"]


def varint(buf, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def fields(buf) -> Iterator[tuple[int, object]]:
    """(field number, value): varints as int, length-delimited as memoryview, fixed64/fixed32 as bytes."""
    i, n = 0, len(buf)
    while i < n:
        key, i = varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 2:
            length, i = varint(buf, i)
            value = buf[i:i + length]
            i += length
        elif wire == 1:
            value = bytes(buf[i:i + 8])
            i += 8
        elif wire == 5:
            value = bytes(buf[i:i + 4])
            i += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} (not an xplane.pb?)")
        yield key >> 3, value


def text(value) -> str:
    return bytes(value).decode("utf-8", "replace")


def packed(value) -> list[int]:
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = varint(value, i)
        out.append(v)
    return out


def event(buf) -> tuple[int, int, int, list]:
    """XEvent: metadata_id=1, offset_ps=2, duration_ps=3, stats=4 -> (metadata_id, offset_ps, duration_ps, stats).
    The hot loop of a big trace, so the varints are decoded inline."""
    out = [0, 0, 0, 0, 0, 0]  # indexed by field number (5 = num_occurrences, unused)
    stats = []
    i, n = 0, len(buf)
    while i < n:
        key = buf[i]
        i += 1
        if key & 0x80:
            key, i = varint(buf, i - 1)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = shift = 0
            while True:
                b = buf[i]
                i += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            if field < 6:
                out[field] = value
        elif wire == 2:
            length, i = varint(buf, i)
            if field == 4:
                stats.append(buf[i:i + length])
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} (not an xplane.pb?)")
    return out[1], out[2], out[3], stats


def stat(buf, stat_names: dict[int, str]) -> tuple[str, object]:
    """XStat: metadata_id=1, double=2, uint64=3, int64=4, str=5, bytes=6, ref=7 (id of an interned string)."""
    name, value = "", None
    for f, v in fields(buf):
        if f == 1:
            name = stat_names.get(v, "")
        elif f == 2:
            value = struct.unpack("<d", v)[0]
        elif f in (3, 4):
            value = v - (1 << 64) if f == 4 and v >= 1 << 63 else v
        elif f == 5:
            value = text(v)
        elif f == 6:
            value = v
        elif f == 7:
            value = stat_names.get(v, "")
    return name, value
