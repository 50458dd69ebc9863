#!/usr/bin/env python3
"""Converts a PyTorch memory snapshot into a gpumem trace, for `gpumem replay` and `gpumem viz`.

    python3 tools/torch_snapshot_to_trace.py snapshot.pickle run.trace [--device N]

The snapshot is what torch.cuda.memory._dump_snapshot() writes after
torch.cuda.memory._record_memory_history(): a pickle of plain dicts and lists, read here without
PyTorch. Its trace entries for one device become records of the gpumem trace format
(docs/traces.md): "alloc" an allocation, "free_completed" a free (the moment PyTorch could reuse the
memory), "segment_alloc" and "segment_free" PyTorch's own blocks from cudaMalloc (upstream records,
which a replay ignores but which give PyTorch's reserved bytes), "oom" a failed allocation.
PyTorch keeps only its most recent entries (100,000 unless told otherwise), so frees of earlier
allocations are left unmatched by a replay.

PyTorch stamps each entry with the wall-clock time in microseconds since 1970. The trace's header
takes the first entry's time as the start of the recording, and the records count from it
(docs/trace-format.md), so the first record is 0 s into the trace.
"""
import argparse
import pickle
import struct
import sys
import time

ALLOC, FREE, UPSTREAM_ALLOC, UPSTREAM_FREE, ALLOC_FAILED = 1, 2, 3, 4, 5
EVENTS = {"alloc": ALLOC, "free_completed": FREE, "segment_alloc": UPSTREAM_ALLOC, "segment_free": UPSTREAM_FREE,
          "oom": ALLOC_FAILED}
OUT_OF_MEMORY = -2  # GPUMEM_ERROR_OUT_OF_MEMORY


def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value):
    return varint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def header(device, start_ns, kind=b"pytorch caching allocator"):
    fixed = 8 + 4 + 4 + 4 + 4 + 8 + 2
    return (b"GPUMEMTR" + struct.pack("<IIiIQH", 1, fixed + len(kind), device, 0, start_ns, len(kind)) + kind)


def convert(snapshot, device):
    """The trace file's bytes, and a summary of what PyTorch itself held, for one device."""
    traces = snapshot.get("device_traces") or []
    if device >= len(traces):
        raise SystemExit(f"the snapshot has traces for {len(traces)} device(s), none for device {device}")
    entries = [e for e in traces[device] if e.get("action") in EVENTS]
    # Older snapshots have no times: then a microsecond an entry keeps the order, and the recording
    # is taken to start now.
    timed = bool(entries) and all("time_us" in e for e in entries)
    times = [int(e["time_us"]) * 1000 if timed else index * 1000 for index, e in enumerate(entries)]
    start = times[0] if timed else time.time_ns()
    out = bytearray(header(device, start))
    last_time = times[0] if times else 0
    last_address = 0
    live = reserved = peak_live = peak_reserved = 0
    sizes = {}
    for index, e in enumerate(entries):
        event = EVENTS[e["action"]]
        t = times[index]
        address = int(e.get("addr", 0)) if event != ALLOC_FAILED else 0
        size = int(e.get("size", 0))
        out += bytes([event]) + varint(max(t - last_time, 0)) + varint(1) + varint(int(e.get("stream", 0)))
        out += zigzag(address - last_address) + varint(size if event != FREE else 0)
        if event == ALLOC:
            out += varint(size)
            sizes[address] = size
            live += size
            peak_live = max(peak_live, live)
        elif event == FREE:
            live -= sizes.pop(address, 0)
        elif event == UPSTREAM_ALLOC:
            reserved += size
            peak_reserved = max(peak_reserved, reserved)
        elif event == UPSTREAM_FREE:
            reserved -= size
        elif event == ALLOC_FAILED:
            out += zigzag(OUT_OF_MEMORY)
        last_time = max(t, last_time)
        last_address = address
    return bytes(out), {"records": len(entries), "peak_live": peak_live, "peak_reserved": peak_reserved}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot")
    parser.add_argument("trace")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args(argv)
    with open(args.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    data, summary = convert(snapshot, args.device)
    with open(args.trace, "wb") as f:
        f.write(data)
    live, reserved = summary["peak_live"], summary["peak_reserved"]
    print(f"wrote {args.trace}: {summary['records']} records; in the recorded window PyTorch's peak live "
          f"{live} bytes, peak of its own segments {reserved} bytes"
          + (f" ({reserved / live:.4f} of live)" if live else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
