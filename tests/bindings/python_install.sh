#!/bin/sh
# python_install.sh LIBRARY VERSION SOURCE_DIR PYTHON...
# Installs bindings/python with pip into fresh virtual environments, offline, with the library
# LIBRARY bundled, and checks that `import gpumem` there loads the bundled copy, with no
# GPUMEM_LIBRARY, PYTHONPATH or LD_LIBRARY_PATH. For each PYTHON: a venv without the system's
# packages installed from with build isolation, and one with --system-site-packages installed with
# --no-build-isolation. Exits 77 (a skip) when no PYTHON can make a venv with pip.
set -eu
library=$1 version=$2 source=$3
shift 3

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# pip's build and the check run from here, so that the source tree is never on sys.path.
cd "$scratch"
unset GPUMEM_LIBRARY PYTHONPATH LD_LIBRARY_PATH PYTHONHOME
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1

ran=0
skipped=""
n=0
for python in "$@"; do
  if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
    skipped="$skipped $python (no venv/ensurepip: install python3-venv)"
    continue
  fi
  for mode in isolated system; do
    n=$((n + 1))
    venv=$scratch/venv$n
    if [ $mode = system ]; then
      "$python" -m venv --system-site-packages "$venv"
      isolation=--no-build-isolation
    else
      "$python" -m venv "$venv"
      isolation=
    fi
    echo "== $python: venv ($mode), pip install $isolation $source/bindings/python"
    GPUMEM_LIBRARY=$library "$venv/bin/python" -m pip install --quiet $isolation "$source/bindings/python"
    "$venv/bin/python" - "$version" <<'PY'
import os, sys
import gpumem
from gpumem import _lib

print("gpumem", gpumem.version(), "from", _lib.library_path())
assert gpumem.version() == sys.argv[1], f"loaded {gpumem.version()}, built {sys.argv[1]}"
package = os.path.dirname(os.path.abspath(gpumem.__file__))
assert package.startswith(sys.prefix + os.sep), f"imported {package}, not the venv's copy under {sys.prefix}"
bundled = os.path.join(package, "libgpumem.so.0")
assert _lib.library_path() == bundled, f"loaded {_lib.library_path()}, not the bundled {bundled}"
PY
    ran=$((ran + 1))
  done
done
if [ $ran = 0 ]; then
  echo "skipped: no interpreter can make a venv with pip:$skipped"
  exit 77
fi
[ -z "$skipped" ] || echo "left out:$skipped"
