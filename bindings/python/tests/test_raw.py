"""Raw memory of each kind: bad input everywhere, the memory itself on a CUDA device."""
import ctypes
import mmap
import os
import unittest
from unittest import mock

import gpumem
from gpumem import Advice, HostAllocFlags, HostRegisterFlags, Location, RawKind

from .support import gpu_count

GPUS = gpu_count()


class RawBadInputTest(unittest.TestCase):
    def test_a_size_of_zero_is_an_invalid_argument(self):
        for name, call in [
            ("device_alloc", lambda: gpumem.device_alloc(0)),
            ("device_alloc_async", lambda: gpumem.device_alloc_async(0)),
            ("host_alloc", lambda: gpumem.host_alloc(0)),
            ("managed_alloc", lambda: gpumem.managed_alloc(0)),
        ]:
            with self.subTest(name), self.assertRaises(gpumem.InvalidArgument) as caught:
                call()
            self.assertEqual(caught.exception.detail, "size is 0")

    def test_a_negative_size_is_refused_before_the_library(self):
        for name, call in [
            ("device_alloc", lambda: gpumem.device_alloc(-1)),
            ("device_alloc_async", lambda: gpumem.device_alloc_async(-1)),
            ("device_alloc_from_pool", lambda: gpumem.device_alloc_from_pool(0x1000, -1)),
            ("host_alloc", lambda: gpumem.host_alloc(-1)),
            ("managed_alloc", lambda: gpumem.managed_alloc(-1)),
        ]:
            with self.subTest(name), self.assertRaises(ValueError) as caught:
                call()
            self.assertEqual(str(caught.exception), "size is -1; it cannot be negative")

    def test_unknown_flags_and_advice_are_invalid_arguments(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.host_alloc(64, 0x8)
        self.assertEqual(caught.exception.detail, "unknown host allocation flags 0x8")
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.managed_alloc(64, flags=gpumem.ManagedFlags.ATTACH_GLOBAL | gpumem.ManagedFlags.ATTACH_HOST)
        self.assertIn("managed flags 0x3", caught.exception.detail)
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.host_register(bytearray(64), flags=0x10)
        self.assertEqual(caught.exception.detail, "unknown host register flags 0x10")
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.managed_advise(bytearray(64), 9)
        self.assertIn("unknown advice 9", caught.exception.detail)

    def test_null_pointers_are_invalid_arguments(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.device_alloc_from_pool(0, 64)
        self.assertEqual(caught.exception.detail, "pool is NULL")
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.host_get_device_pointer(0)
        self.assertEqual(caught.exception.detail, "ptr is NULL")

    def test_ranges_are_bounded_by_python_buffers(self):
        with self.assertRaises(ValueError):
            gpumem.host_register(bytearray(8), 9)
        with self.assertRaises(ValueError):
            gpumem.managed_prefetch(bytearray(8), 0, size=9)
        with self.assertRaises(TypeError):
            gpumem.managed_range_info(0x1000)  # a bare address: the size is needed

    def test_a_raw_buffer_frees_once_by_its_kind(self):
        # NULL, which every free accepts and ignores: the Python side alone is under test.
        pinned = gpumem.RawBuffer(RawKind.PINNED, 0, 0, -1)
        with self.assertRaises(ValueError):
            pinned.free(stream=0)  # pinned memory is freed synchronously
        self.assertFalse(pinned.freed)
        with pinned:
            pass
        self.assertTrue(pinned.freed)
        pinned.free()
        with self.assertRaises(ValueError):
            gpumem.copy(pinned, b"x")
        with self.assertRaises(ValueError):
            int(pinned)
        self.assertIn("freed", repr(pinned))

    def test_a_raw_buffer_freed_by_two_callers_at_once_is_freed_once(self):
        b = gpumem.RawBuffer(RawKind.PINNED, 0, 0, -1)
        calls = []

        class Library:
            def gpumem_host_free(self, ptr):
                calls.append(ptr)
                if len(calls) == 1:
                    b.free()  # another thread's, between the first one's check and its free

        with mock.patch.object(gpumem.raw, "library", Library):
            b.free()
        self.assertEqual(calls, [0])
        self.assertTrue(b.freed)

    def test_a_raw_buffer_whose_free_fails_stays_live(self):
        b = gpumem.RawBuffer(RawKind.DEVICE, 0, 0, 0)

        class Library:
            def gpumem_device_free(self, ptr):
                raise gpumem.InvalidPointer(gpumem.InvalidPointer.STATUS, "not now")

        with mock.patch.object(gpumem.raw, "library", Library), self.assertRaises(gpumem.InvalidPointer):
            b.free()
        self.assertFalse(b.freed)
        b.free()  # NULL, for the library itself
        self.assertTrue(b.freed)

    def test_a_device_the_driver_cannot_tell_is_none(self):
        def pointer_info(ptr):
            raise gpumem.NoDriver(gpumem.NoDriver.STATUS, "no driver here")

        with mock.patch.object(gpumem.raw, "pointer_info", pointer_info):
            self.assertIsNone(gpumem.raw._device_of(0x1000))


@unittest.skipUnless(GPUS == 0, "a CUDA device is present")
class RawNoDriverTest(unittest.TestCase):
    def test_raw_memory_needs_a_driver(self):
        data = bytearray(4096)
        for name, call in [
            ("device_alloc", lambda: gpumem.device_alloc(64)),
            ("device_alloc_async", lambda: gpumem.device_alloc_async(64)),
            ("host_alloc", lambda: gpumem.host_alloc(64)),
            ("managed_alloc", lambda: gpumem.managed_alloc(64)),
            ("host_register", lambda: gpumem.host_register(data)),
            ("host_get_device_pointer", lambda: gpumem.host_get_device_pointer(data)),
            ("managed_prefetch", lambda: gpumem.managed_prefetch(data, 0)),
            ("managed_advise", lambda: gpumem.managed_advise(data, Advice.SET_READ_MOSTLY)),
            ("managed_range_info", lambda: gpumem.managed_range_info(data)),
        ]:
            with self.subTest(name), self.assertRaises((gpumem.NoDriver, gpumem.NoDevice)) as caught:
                call()
            self.assertTrue(caught.exception.detail)


@unittest.skipUnless(GPUS > 0, "no CUDA device (gpumem.device_count() failed or is 0)")
class RawGpuTest(unittest.TestCase):
    def round_trip(self, memory):
        data, back = os.urandom(memory.size), bytearray(memory.size)
        gpumem.copy(memory, data)
        gpumem.copy(back, memory)
        self.assertEqual(back, data)

    def test_device_memory(self):
        for make in (lambda: gpumem.device_alloc(1 << 20), lambda: gpumem.device_alloc_async(1 << 20, 0, stream=0)):
            with make() as b:
                self.assertEqual((b.size, b.device), (1 << 20, 0))
                info = gpumem.pointer_info(b)
                self.assertEqual((info.memory_type, info.device, info.base), (gpumem.MemoryType.DEVICE, 0, b.ptr))
                self.round_trip(b)
            self.assertTrue(b.freed)
            b.free()  # nothing: the address may be another allocation's by now

    def test_device_memory_freed_on_a_stream(self):
        b = gpumem.device_alloc(4096)
        self.assertEqual(b.kind, RawKind.DEVICE)
        b.free(stream=0)
        self.assertTrue(b.freed)

    def test_a_free_of_another_kind_is_an_invalid_pointer(self):
        with gpumem.host_alloc(4096) as pinned:
            with self.assertRaises(gpumem.InvalidPointer) as caught:
                gpumem.library().gpumem_device_free(pinned.ptr)
            self.assertTrue(caught.exception.detail)
            self.assertFalse(pinned.freed)

    def test_a_bad_device_is_refused(self):
        with self.assertRaises(gpumem.InvalidDevice):
            gpumem.device_alloc(64, device=GPUS)
        with self.assertRaises(gpumem.InvalidDevice):
            gpumem.managed_alloc(64, device=GPUS)

    def test_pinned_memory(self):
        with gpumem.host_alloc(1 << 16, HostAllocFlags.PORTABLE | HostAllocFlags.DEVICEMAP) as b:
            self.assertEqual((b.kind, b.device), (RawKind.PINNED, -1))
            ctypes.memmove(b.ptr, b"written by the host", 19)
            self.assertEqual(ctypes.string_at(b.ptr, 19), b"written by the host")
            info = gpumem.pointer_info(b)
            self.assertTrue(info.is_pinned)
            self.assertNotEqual(gpumem.host_get_device_pointer(b), 0)
            with gpumem.device_alloc(b.size) as device:
                gpumem.copy(device, b)
                back = bytearray(b.size)
                gpumem.copy(back, device)
            self.assertEqual(bytes(back[:19]), b"written by the host")
            with self.assertRaises(ValueError):
                b.free(stream=0)

    def test_host_register(self):
        region = mmap.mmap(-1, 1 << 20)  # page-aligned, and no other object's pages
        self.addCleanup(region.close)
        region[:5] = b"hello"
        with gpumem.host_register(region, flags=HostRegisterFlags.DEVICEMAP) as registration:
            self.assertTrue(registration.registered)
            self.assertEqual(registration.size, 1 << 20)
            self.assertTrue(gpumem.pointer_info(registration).is_pinned)
            self.assertNotEqual(registration.device_pointer(), 0)
            with self.assertRaises(gpumem.AlreadyRegistered) as caught:
                gpumem.host_register(registration.ptr, 4096)
            self.assertTrue(caught.exception.detail)
            with gpumem.device_alloc(1 << 20) as device:
                gpumem.copy_async(device, registration, stream=0)
                back = bytearray(1 << 20)
                gpumem.copy(back, device)
            self.assertEqual(bytes(back[:5]), b"hello")
        self.assertFalse(registration.registered)
        registration.unregister()  # nothing
        with gpumem.host_register(region, 4096):  # the range can be registered again
            pass

    def test_managed_memory(self):
        with gpumem.managed_alloc(1 << 20) as m:
            self.assertEqual((m.kind, m.device), (RawKind.MANAGED, 0))
            ctypes.memset(m.ptr, 0x5A, 4096)  # the host writes managed memory directly
            self.assertTrue(gpumem.pointer_info(m).is_managed)
            self.round_trip(m)
            try:
                gpumem.managed_advise(m, Advice.SET_READ_MOSTLY)
            except gpumem.NotSupported as e:
                self.skipTest(f"no managed-memory advice: {e}")
            self.assertTrue(gpumem.managed_range_info(m).read_mostly)
            gpumem.managed_advise(m, Advice.UNSET_READ_MOSTLY)
            self.assertFalse(gpumem.managed_range_info(m).read_mostly)
            gpumem.managed_advise(m, Advice.SET_PREFERRED_LOCATION, Location.HOST)
            self.assertEqual(gpumem.managed_range_info(m).preferred_location, Location.HOST)
            gpumem.managed_advise(m, Advice.SET_ACCESSED_BY, 0)
            self.assertEqual(gpumem.managed_range_info(m).accessed_by & 1, 1)
            gpumem.managed_advise(m, Advice.UNSET_ACCESSED_BY, 0)
            self.assertEqual(gpumem.managed_range_info(m).accessed_by & 1, 0)
            try:
                gpumem.managed_prefetch(m, 0, stream=0)
            except gpumem.NotSupported as e:
                self.skipTest(f"no managed-memory prefetch: {e}")
            self.assertEqual(gpumem.managed_range_info(m).last_prefetch_location, 0)
            gpumem.managed_prefetch(m, Location.HOST, size=4096, stream=0)
            self.assertEqual(gpumem.managed_range_info(m, 4096).last_prefetch_location, Location.HOST)
            with self.assertRaises(gpumem.InvalidDevice):
                gpumem.managed_prefetch(m, GPUS)
            back = bytearray(4096)
            gpumem.copy(back, m, 4096)  # after the queued prefetches: synchronous on the legacy stream

    def test_managed_calls_refuse_other_memory(self):
        with gpumem.device_alloc(4096) as device:
            with self.assertRaises(gpumem.InvalidPointer):
                gpumem.managed_range_info(device)


if __name__ == "__main__":
    unittest.main()
