#!/usr/bin/env python3
"""Writes a small snapshot shaped as torch.cuda.memory._dump_snapshot() writes them (plain dicts and
lists), for the converter's test: one 4 MiB segment; 1 MiB and 2 MiB live at once (peak live
3 MiB); the 1 MiB freed and 512 KiB allocated in its place; everything freed."""
import pickle
import sys

MiB = 1 << 20
base, stream = 0x7F0000000000, 0
entries = [
    {"action": "segment_alloc", "addr": base, "size": 4 * MiB, "stream": stream, "time_us": 10},
    {"action": "alloc", "addr": base, "size": MiB, "stream": stream, "time_us": 11},
    {"action": "alloc", "addr": base + MiB, "size": 2 * MiB, "stream": stream, "time_us": 12},
    {"action": "free_requested", "addr": base, "size": MiB, "stream": stream, "time_us": 13},
    {"action": "free_completed", "addr": base, "size": MiB, "stream": stream, "time_us": 13},
    {"action": "alloc", "addr": base, "size": MiB // 2, "stream": stream, "time_us": 14},
    {"action": "oom", "addr": 0, "size": 64 << 30, "stream": stream, "time_us": 15},
    {"action": "free_completed", "addr": base + MiB, "size": 2 * MiB, "stream": stream, "time_us": 16},
    {"action": "free_completed", "addr": base, "size": MiB // 2, "stream": stream, "time_us": 17},
    {"action": "segment_free", "addr": base, "size": 4 * MiB, "stream": stream, "time_us": 18},
]
with open(sys.argv[1], "wb") as f:
    pickle.dump({"segments": [], "device_traces": [entries]}, f)
