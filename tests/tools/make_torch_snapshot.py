#!/usr/bin/env python3
"""Writes a small snapshot shaped as torch.cuda.memory._dump_snapshot() writes them (plain dicts and
lists), for the converter's test: one 4 MiB segment; 1 MiB and 2 MiB live at once (peak live
3 MiB); the 1 MiB freed and 512 KiB allocated in its place; everything freed. Times are PyTorch's:
wall-clock microseconds since 1970, one entry every 250 ms from the first.

    make_torch_snapshot.py OUT [--frames] [--protocol N] [--truncate BYTES]

--frames gives each allocation the call stack PyTorch records (its "frames", the innermost call
first; frames shared between stacks are shared objects, so the pickle refers back to them through
its memo), and the snapshot the other keys a real one has ("segments", "allocator_settings"), for
gpumem viz, which reads the pickle itself. --protocol picks the pickle protocol; --truncate keeps
only the first BYTES bytes, a damaged file."""
import argparse
import pickle

MiB = 1 << 20
base, stream = 0x7F0000000000, 0
start = 1_796_018_772_627_876  # 2026-11-30, as in examples/traces/gpt.trace's snapshot


def at(ms):
    return start + ms * 1000


def frame(name, line):
    return {"filename": "train.py", "line": line, "name": name}


def snapshot(frames):
    step, module = frame("train_step", 100), frame("<module>", 120)
    stacks = {MiB: [frame("forward", 42), step, module], 2 * MiB: [frame("backward", 57), step, module],
              MiB // 2: [frame("naïve_λ", 7), step, module]}
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
    if not frames:
        return {"segments": [], "device_traces": [entries]}
    for e in entries:
        e["frames"] = stacks[e["size"]] if e["action"] == "alloc" else []
    settings = {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1, "garbage_collection_threshold": 0.0,
                "expandable_segments": False, "roundup_power2_divisions": [1, 2.5], "big": 1 << 70}
    segment = {"device": 0, "address": base, "total_size": 4 * MiB, "stream": stream, "segment_type": "large",
               "segment_pool_id": (0, 0), "is_expandable": True, "frames": [], "blocks": []}
    return {"segments": [segment], "device_traces": [entries], "allocator_settings": settings,
            "external_annotations": []}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--frames", action="store_true")
    parser.add_argument("--protocol", type=int, default=pickle.DEFAULT_PROTOCOL)
    parser.add_argument("--truncate", type=int)
    args = parser.parse_args()
    data = pickle.dumps(snapshot(args.frames), protocol=args.protocol)
    with open(args.out, "wb") as f:
        f.write(data if args.truncate is None else data[:args.truncate])


if __name__ == "__main__":
    main()
