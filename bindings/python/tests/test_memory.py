"""Memory arguments: what is accepted, and sizes bounded by what Python knows, before any driver call."""
import array
import ctypes
import unittest

import gpumem
from gpumem import _ptr


class MemoryArgumentTest(unittest.TestCase):
    def test_accepted_objects_give_their_address_and_size(self):
        raw = ctypes.create_string_buffer(32)
        self.assertEqual((_ptr.memory(raw).address, _ptr.memory(raw).size), (ctypes.addressof(raw), 32))
        self.assertEqual(_ptr.memory(1234).address, 1234)
        self.assertIsNone(_ptr.memory(1234).size)
        self.assertEqual(_ptr.memory(ctypes.c_void_p(99)).address, 99)
        self.assertEqual(_ptr.memory(ctypes.pointer(raw)).address, ctypes.addressof(raw))
        self.assertEqual(_ptr.memory(None).address, 0)
        self.assertEqual(_ptr.memory(bytearray(10)).size, 10)
        self.assertEqual(_ptr.memory(array.array("i", [1, 2, 3])).size, 3 * array.array("i").itemsize)
        self.assertEqual(_ptr.memory(b"abc", writable=False).size, 3)

    def test_a_bytearray_address_is_its_storage(self):
        data = bytearray(b"\x01\x02\x03\x04")
        mem = _ptr.memory(memoryview(data)[1:])
        self.assertEqual(ctypes.string_at(mem.address, mem.size), b"\x02\x03\x04")
        with self.assertRaises(BufferError):
            data.append(5)  # the export pins the storage while the address is in use
        del mem
        data.append(5)

    def test_a_gpumem_buffer_is_memory(self):
        with gpumem.Allocator.host() as host:
            with host.alloc(48) as b:
                mem = _ptr.memory(b)
                self.assertEqual((mem.address, mem.size, int(b)), (b.ptr, 48, b.ptr))
            with self.assertRaises(ValueError):
                _ptr.memory(b)  # freed: no longer memory to read or write

    def test_refused_objects(self):
        for obj in (b"read-only", memoryview(b"read-only"), "text", 1.5, -1):
            with self.subTest(obj=obj), self.assertRaises((TypeError, ValueError)):
                _ptr.memory(obj)
        with self.assertRaises(TypeError):
            _ptr.memory(memoryview(bytearray(8))[::2])

    def test_sizes_are_bounded_by_python_buffers(self):
        small, large = bytearray(8), bytearray(16)
        with self.assertRaises(ValueError):
            gpumem.copy(small, large)  # 16 bytes into 8
        with self.assertRaises(ValueError):
            gpumem.copy(large, small, 9)
        with self.assertRaises(ValueError):
            gpumem.memset(small, 0, 3, element_size=4)
        with self.assertRaises(TypeError):
            gpumem.copy(1 << 20, 2 << 20)
        with self.assertRaises(ValueError):
            gpumem.pin(small, 9)
        with self.assertRaises(ValueError):
            gpumem.copy2d(dst=small, src=large, width=4, height=3)
        with self.assertRaises(TypeError):
            gpumem.copy2d(dst=small, src=large, width=4, height=2, colour="red")


if __name__ == "__main__":
    unittest.main()
