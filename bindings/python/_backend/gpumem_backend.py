"""The gpumem package's build backend (PEP 517), with the standard library alone.

pip builds the package from this directory with nothing installed and nothing downloaded: no
setuptools, no wheel. The wheel carries libgpumem.so.0 inside the package (gpumem/libgpumem.so.0),
which gpumem._lib loads when GPUMEM_LIBRARY is not set. The library comes from GPUMEM_LIBRARY (an
absolute path) when it is set, else from the repository's build trees, build/release then build/dev.
"""
import base64
import hashlib
import io
import os
import re
import sys
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # bindings/python
PACKAGE = "gpumem"
LIBRARY_NAME = "libgpumem.so.0"
BUILD_TREES = ("build/release", "build/dev")
# Fixed times make the same inputs give the same wheel, byte for byte.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _project():
    """The [project] table of pyproject.toml: name, version, description, requires-python, readme."""
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        text = f.read().decode("utf-8")
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        # Older Pythons: the table holds only `key = "string"` lines, which this reads.
        table = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M).group(1)
        return dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', table, re.M))
    return tomllib.loads(text)["project"]


def _metadata(project):
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
        "Description-Content-Type: text/markdown",
        "",
    ]
    with open(os.path.join(HERE, project["readme"]), encoding="utf-8") as f:
        return "\n".join(lines) + "\n" + f.read()


def _dist(project):
    return f"{project['name']}-{project['version']}"


def _package_files():
    """(path in the archive, path on disk) for every module of the package."""
    root = os.path.join(HERE, PACKAGE)
    return [(f"{PACKAGE}/{name}", os.path.join(root, name)) for name in sorted(os.listdir(root)) if name.endswith(".py")]


def find_library():
    """The libgpumem.so.0 to bundle, or SystemExit saying what was looked at."""
    given = os.environ.get("GPUMEM_LIBRARY")
    if given:
        if not os.path.isabs(given):
            # pip runs the backend in the package's directory, not the caller's: a relative path
            # would silently mean another file.
            raise SystemExit(f"gpumem: GPUMEM_LIBRARY={given}: give the library's absolute path to bundle it")
        candidates = [given]
    else:
        repository = os.path.dirname(os.path.dirname(HERE))
        if not os.path.isfile(os.path.join(repository, "include", "gpumem", "gpumem.h")):
            candidates = []
        else:
            candidates = [os.path.join(repository, tree, "lib", LIBRARY_NAME) for tree in BUILD_TREES]
    for path in candidates:
        if os.path.isfile(path):
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    raise SystemExit(f"gpumem: {path} is not a shared library")
            print(f"gpumem: bundling {os.path.realpath(path)}", file=sys.stderr)
            return path
    looked = ", ".join(candidates) if candidates else "no build tree (this is not a gpumem repository)"
    raise SystemExit(
        f"gpumem: no {LIBRARY_NAME} to bundle (looked at {looked}): build the library first "
        f"(cmake --preset release && cmake --build build/release), or set GPUMEM_LIBRARY to its absolute path"
    )


def _tag():
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, name, data, mode=0o644):
        info = zipfile.ZipInfo(name, ZIP_TIME)
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{name},sha256={digest},{len(data)}")

    def close(self, dist_info):
        record = f"{dist_info}/RECORD"
        self.record.append(f"{record},,")
        info = zipfile.ZipInfo(record, ZIP_TIME)
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n")
        self.zip.close()


def _build(wheel_directory, tag, contents):
    project = _project()
    dist = _dist(project)
    name = f"{dist}-{tag}.whl"
    wheel = _Wheel(os.path.join(wheel_directory, name))
    for arcname, data, mode in contents:
        wheel.add(arcname, data, mode)
    dist_info = f"{dist}.dist-info"
    wheel.add(f"{dist_info}/METADATA", _metadata(project).encode("utf-8"))
    purelib = "true" if tag.endswith("-any") else "false"
    wheel_text = f"Wheel-Version: 1.0\nGenerator: gpumem_backend\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
    wheel.add(f"{dist_info}/WHEEL", wheel_text.encode())
    wheel.add(f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode())
    wheel.close(dist_info)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    library = find_library()
    contents = [(arcname, _read(path), 0o644) for arcname, path in _package_files()]
    contents.append((f"{PACKAGE}/{LIBRARY_NAME}", _read(library), 0o755))
    return _build(wheel_directory, _tag(), contents)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # The package stays in this directory, without a bundled library: gpumem._lib then loads
    # GPUMEM_LIBRARY, else libgpumem.so.0 through the dynamic loader.
    return _build(wheel_directory, "py3-none-any", [(f"__editable__.{PACKAGE}.pth", (HERE + "\n").encode(), 0o644)])


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    dist = _dist(project)
    name = f"{dist}.tar.gz"
    files = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
             (project["readme"], os.path.join(HERE, project["readme"])),
             ("_backend/gpumem_backend.py", os.path.abspath(__file__))] + _package_files()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(arcname, data):
            info = tarfile.TarInfo(f"{dist}/{arcname}")
            info.size, info.mode, info.mtime = len(data), 0o644, 315532800
            tar.addfile(info, io.BytesIO(data))
        for arcname, path in files:
            add(arcname, _read(path))
        add("PKG-INFO", _metadata(project).encode("utf-8"))
    return name
