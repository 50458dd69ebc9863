"""The idiomatic layer's enums and error classes against the ABI description (abi/gpumem-abi.json).

The raw layer (the declaration table of _lib.py and the structs of _types.py) is checked against
the same description by scripts/abi/check_bindings.py, with the Rust and Julia bindings.
"""
import json
import unittest

import gpumem
from gpumem import _lib, errors

from .support import source_dir

ROOT = source_dir()


class DescriptionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        path = None if ROOT is None else ROOT / "abi" / "gpumem-abi.json"
        if path is None or not path.is_file():
            raise unittest.SkipTest("the gpumem sources are not here (set GPUMEM_SOURCE_DIR)")
        cls.description = json.loads(path.read_text())
        cls.values = {v["name"]: v["value"] for e in cls.description["enums"].values() for v in e["values"]}
        cls.statuses = {v["value"]: v["name"] for v in cls.description["enums"]["gpumem_status"]["values"]}

    def test_enums_match_the_headers(self):
        for cls, prefix, *enum in [
            (gpumem.allocator.HookEvent, "GPUMEM_HOOK_"),
            (gpumem.allocator.BlockState, "GPUMEM_BLOCK_"),
            (gpumem.allocator.CudaPoolSource, "GPUMEM_CUDA_POOL_"),
            (gpumem.allocator.StreamReuse, "GPUMEM_STREAM_REUSE_"),
            (gpumem.allocator.PeerAccess, "GPUMEM_PEER_ACCESS_"),
            (gpumem.memory.MemoryType, "GPUMEM_MEMORY_"),
            (gpumem.pinning.PinState, "GPUMEM_PIN_"),
            (gpumem.raw.HostAllocFlags, "GPUMEM_HOST_ALLOC_"),
            (gpumem.raw.HostRegisterFlags, "GPUMEM_HOST_REGISTER_"),
            (gpumem.raw.ManagedFlags, "GPUMEM_MANAGED_"),
            (gpumem.raw.Location, "GPUMEM_LOCATION_"),
            (gpumem.raw.Advice, "GPUMEM_ADVICE_"),
            (gpumem.array.Format, "GPUMEM_FORMAT_"),
            # Enums whose values share a prefix with another's: compared with their own enum only.
            (gpumem.trace.TraceEvent, "GPUMEM_TRACE_", "gpumem_trace_event"),
            (gpumem.trace.TraceFlags, "GPUMEM_TRACE_", "gpumem_trace_flags"),
            (gpumem.trace.TraceFrameKind, "GPUMEM_TRACE_FRAME_", "gpumem_trace_frame_kind"),
        ]:
            values = self.values
            if enum:
                values = {v["name"]: v["value"] for v in self.description["enums"][enum[0]]["values"]}
            with self.subTest(enum=cls.__name__):
                found = {n[len(prefix):]: v for n, v in values.items() if n.startswith(prefix)}
                self.assertEqual({name: int(member) for name, member in cls.__members__.items()}, found)

    def test_every_status_has_its_class(self):
        for status, name in self.statuses.items():
            if status == 0:
                continue
            cls = errors.error_for(status).__class__
            self.assertIsNot(cls, gpumem.Error, name)
            self.assertEqual(cls.NAME, name)
            self.assertEqual(cls.STATUS, status)


class LibraryNamesTest(unittest.TestCase):
    def test_status_names_are_the_librarys(self):
        for cls in gpumem.Error.__subclasses__():
            self.assertEqual(gpumem.status_name(cls.STATUS), cls.NAME)
        self.assertEqual(gpumem.status_name(-1000), gpumem.Error.NAME)

    def test_loaded_version_is_the_packages(self):
        self.assertEqual(gpumem.version(), gpumem.__version__)
        self.assertEqual(gpumem.version_number(), _lib.version_number(*_lib.REQUIRED_VERSION))


if __name__ == "__main__":
    unittest.main()
