"""gpumem's buffers and memory it did not allocate, as CUDA arrays (__cuda_array_interface__)."""
import gc
import unittest
import weakref

import gpumem

from .support import gpu_count


class UnownedTest(unittest.TestCase):
    def test_an_unowned_range_is_a_cuda_array_that_keeps_its_owner(self):
        class Owner:
            pass

        owner = Owner()
        gone = weakref.ref(owner)
        u = gpumem.Unowned(0x7F0000001000, 4096, owner)
        del owner
        gc.collect()
        self.assertIsNotNone(gone())  # held by the Unowned
        self.assertEqual(
            u.__cuda_array_interface__,
            {"shape": (4096,), "typestr": "|u1", "data": (0x7F0000001000, False), "strides": None, "version": 3,
             "stream": None},
        )
        self.assertEqual(int(u), 0x7F0000001000)
        del u
        gc.collect()
        self.assertIsNone(gone())

    def test_a_stream_is_passed_on_and_the_legacy_stream_spelled_1(self):
        self.assertEqual(gpumem.Unowned(0x1000, 8, None, stream=0).__cuda_array_interface__["stream"], 1)
        self.assertEqual(gpumem.Unowned(0x1000, 8, None, stream=0xABC).__cuda_array_interface__["stream"], 0xABC)
        with self.assertRaises(ValueError):
            gpumem.Unowned(0x1000, -1, None)

    def test_host_memory_has_no_cuda_array_interface(self):
        host = gpumem.Allocator.host()
        self.addCleanup(host.close)
        with host.alloc(64) as b:
            self.assertFalse(hasattr(b, "__cuda_array_interface__"))


@unittest.skipIf(gpu_count() == 0, "no GPU")
class DeviceBufferTest(unittest.TestCase):
    def test_a_device_buffer_is_a_cuda_array(self):
        with gpumem.device_pool(0).alloc(1000) as b:
            cai = b.__cuda_array_interface__
            self.assertEqual((cai["shape"], cai["typestr"], cai["data"]), ((1000,), "|u1", (b.ptr, False)))
            self.assertEqual(cai["stream"], 1)  # allocated on the legacy stream
