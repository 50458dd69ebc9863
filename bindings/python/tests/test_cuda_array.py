"""gpumem's buffers and memory it did not allocate, as CUDA arrays (__cuda_array_interface__) and
DLPack tensors (__dlpack__)."""
import ctypes
import gc
import importlib.util
import unittest
import weakref

import gpumem
from gpumem import _dlpack

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


def _tensor(capsule, name=b"dltensor"):
    """The DLManagedTensor inside a capsule, read as a consumer reads it."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return _dlpack._ManagedTensor.from_address(get(capsule, name))


def _consume(capsule):
    """What a consumer does: renames the capsule, keeps the tensor, returns it for its deleter."""
    managed = _tensor(capsule)
    rename = ctypes.pythonapi.PyCapsule_SetName
    rename.restype, rename.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    assert rename(capsule, b"used_dltensor") == 0
    return managed


class DlpackHostTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.addCleanup(self.host.close)

    def test_a_host_buffer_is_a_cpu_tensor_of_its_bytes(self):
        b = self.host.alloc(100)
        self.assertEqual(b.__dlpack_device__(), (_dlpack.CPU, 0))
        capsule = b.__dlpack__()  # owns the tensor until consumed or collected
        t = _tensor(capsule).dl_tensor
        self.assertEqual((t.data, t.ndim, t.shape[0], t.byte_offset), (b.ptr, 1, 100, 0))
        self.assertFalse(t.strides)  # NULL: compact
        self.assertEqual((t.device.device_type, t.device.device_id), (_dlpack.CPU, 0))
        self.assertEqual((t.dtype.code, t.dtype.bits, t.dtype.lanes), (1, 8, 1))
        del t, capsule
        b.free()

    def test_the_consumer_holds_the_buffer_until_its_deleter_runs(self):
        held = _dlpack.held()
        b = self.host.alloc(256)
        gone = weakref.ref(b)
        capsule = b.__dlpack__()
        managed = _consume(capsule)
        del b, capsule
        gc.collect()
        self.assertIsNotNone(gone())  # a consumed capsule leaves the buffer to the consumer
        self.assertEqual(self.host.stats().bytes_in_use, 256)
        managed.deleter(ctypes.addressof(managed))
        gc.collect()
        self.assertIsNone(gone())
        self.assertEqual(self.host.stats().bytes_in_use, 0)
        self.assertEqual(_dlpack.held(), held)

    def test_a_capsule_dropped_unconsumed_lets_the_buffer_go(self):
        held = _dlpack.held()
        b = self.host.alloc(64)
        gone = weakref.ref(b)
        capsule = b.__dlpack__()
        del b
        gc.collect()
        self.assertIsNotNone(gone())
        del capsule
        gc.collect()
        self.assertIsNone(gone())
        self.assertEqual((_dlpack.held(), self.host.stats().bytes_in_use), (held, 0))

    def test_what_dlpack_cannot_give_is_refused(self):
        with self.host.alloc(64) as b:
            with self.assertRaisesRegex(BufferError, "never copied"):
                b.__dlpack__(copy=True)
            with self.assertRaisesRegex(BufferError, "not \\(2, 0\\)"):
                b.__dlpack__(dl_device=(2, 0))
            with self.assertRaisesRegex(BufferError, "host memory takes none"):
                b.__dlpack__(stream=7)
            b.__dlpack__(dl_device=(1, 0), copy=False, max_version=(1, 0))  # all it can be
        with self.assertRaisesRegex(BufferError, "freed"):
            b.__dlpack__()


@unittest.skipIf(gpu_count() == 0, "no GPU")
class DlpackDeviceTest(unittest.TestCase):
    def test_frameworks_read_a_device_buffer_without_a_copy(self):
        consumers = [name for name in ("torch", "cupy") if importlib.util.find_spec(name)]
        if not consumers:
            self.skipTest("neither PyTorch nor CuPy is installed")
        for name in consumers:
            with self.subTest(consumer=name):
                module = __import__(name)
                b = gpumem.device_pool(0).alloc(1 << 20)
                self.assertEqual(b.__dlpack_device__(), (_dlpack.CUDA, 0))
                gpumem.memset(b, 0x5A)
                gone = weakref.ref(b)
                array = module.from_dlpack(b)
                self.assertEqual(int(array.data_ptr() if name == "torch" else array.data.ptr), b.ptr)
                del b
                gc.collect()
                self.assertIsNotNone(gone())  # the array holds the buffer
                self.assertEqual(int(array.sum()), 0x5A << 20)
                array[0] = 1  # the same bytes: a write shows through
                self.assertEqual(int(array[:2].sum()), 1 + 0x5A)
                del array
                gc.collect()
                self.assertIsNone(gone())

    def test_the_consumer_stream_waits_for_the_buffers(self):
        torch = __import__("torch") if importlib.util.find_spec("torch") else None
        if torch is None:
            self.skipTest("PyTorch is not installed")
        side = torch.cuda.Stream()
        with gpumem.device_pool(0).alloc(1 << 30, stream=side.cuda_stream) as b:
            for value in range(1, 9):  # about 2 ms of writing on the buffer's stream
                gpumem.memset_async(b, value, stream=side.cuda_stream)
            view = torch.from_dlpack(b)  # on PyTorch's current stream, ordered after side
            self.assertEqual(int(view[-4096:].sum()), 8 * 4096)
            del view
            side.synchronize()
