"""What the tests share: the source tree, and whether a GPU is there."""
import os
import pathlib

import gpumem


def source_dir():
    """The repository root (GPUMEM_SOURCE_DIR, else found from this file), or None if its headers are not there."""
    root = pathlib.Path(os.environ.get("GPUMEM_SOURCE_DIR") or pathlib.Path(__file__).resolve().parents[3])
    found = (root / "include" / "gpumem" / "core.h").is_file() and (root / "lib" / "gpumem.map").is_file()
    return root if found else None


def gpu_count():
    """The number of CUDA devices; 0 without a driver or a device."""
    try:
        return gpumem.device_count()
    except gpumem.Error:
        return 0
