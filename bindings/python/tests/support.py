"""What the tests share: the source tree, and whether a GPU is there."""
import os
import pathlib
import subprocess
import sys

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


def run_python(script, *args):
    """Runs `script` in a new interpreter with this gpumem package and library, for what could
    crash the process or needs its exit: the finished subprocess.CompletedProcess, text captured."""
    env = dict(os.environ)
    package_root = str(pathlib.Path(gpumem.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["GPUMEM_LIBRARY"] = gpumem.library()._name
    return subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=120)
