#!/usr/bin/env python3
"""Prints a gpumem trace's start time (the header's, in nanoseconds since 1970) and each record's
time since it in milliseconds, decoded as docs/trace-format.md describes, for the converter's test:

    start 1796018772627876000 ns; records at 0 250 500 ... ms
"""
import struct
import sys


def number(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"GPUMEMTR":
        raise SystemExit(f"{path} is not a gpumem trace")
    header_size, start = struct.unpack_from("<I", data, 12)[0], struct.unpack_from("<Q", data, 24)[0]
    at, now, times = header_size, 0, []
    while at < len(data):
        kind = data[at]
        at += 1
        fields = 5 + (1 if kind in (1, 5) else 0)  # time, thread, stream, address, size, then by kind
        delta, at = number(data, at)
        for _ in range(fields - 1):
            _, at = number(data, at)
        now += delta
        times.append(now)
    print(f"start {start} ns; records at {' '.join(f'{t / 1e6:g}' for t in times)} ms")


if __name__ == "__main__":
    main(sys.argv[1])
