#!/usr/bin/env python3
"""Writes a small snapshot shaped as torch.cuda.memory._dump_snapshot() writes them (plain dicts and
lists), for the converter's test: one 4 MiB segment; 1 MiB and 2 MiB live at once (peak live
3 MiB); the 1 MiB freed and 512 KiB allocated in its place; everything freed. Times are PyTorch's:
wall-clock microseconds since 1970, one entry every 250 ms from the first."""
import pickle
import sys

MiB = 1 << 20
base, stream = 0x7F0000000000, 0
start = 1_796_018_772_627_876  # 2026-11-30, as in examples/traces/gpt.trace's snapshot


def at(ms):
    return start + ms * 1000


entries = [
    {"action": "segment_alloc", "addr": base, "size": 4 * MiB, "stream": stream, "time_us": at(0)},
    {"action": "alloc", "addr": base, "size": MiB, "stream": stream, "time_us": at(250)},
    {"action": "alloc", "addr": base + MiB, "size": 2 * MiB, "stream": stream, "time_us": at(500)},
    {"action": "free_requested", "addr": base, "size": MiB, "stream": stream, "time_us": at(750)},
    {"action": "free_completed", "addr": base, "size": MiB, "stream": stream, "time_us": at(750)},
    {"action": "alloc", "addr": base, "size": MiB // 2, "stream": stream, "time_us": at(1000)},
    {"action": "oom", "addr": 0, "size": 64 << 30, "stream": stream, "time_us": at(1250)},
    {"action": "free_completed", "addr": base + MiB, "size": 2 * MiB, "stream": stream, "time_us": at(1500)},
    {"action": "free_completed", "addr": base, "size": MiB // 2, "stream": stream, "time_us": at(1750)},
    {"action": "segment_free", "addr": base, "size": 4 * MiB, "stream": stream, "time_us": at(2000)},
]
with open(sys.argv[1], "wb") as f:
    pickle.dump({"segments": [], "device_traces": [entries]}, f)
