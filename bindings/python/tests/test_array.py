"""CUDA arrays and 3D copies: bounds and fields everywhere, bytes on a CUDA device."""
import os
import unittest

import gpumem
from gpumem import ArrayDesc, Format

from .support import gpu_count

GPUS = gpu_count()


def region(width, height, depth, pitch, rows, x=0, y=0, z=0):
    """The byte offsets of a 3D region's rows in memory of `pitch` bytes per row, `rows` per slice."""
    return [((z + k) * rows + y + j) * pitch + x for k in range(depth) for j in range(height)]


class CopyFieldsTest(unittest.TestCase):
    def test_sizes_are_bounded_by_python_buffers(self):
        with self.assertRaises(ValueError):
            # 2 slices of 2 rows of 4 bytes need 16 bytes.
            gpumem.copy3d(dst=bytearray(15), src=bytearray(16), width=4, height=2, depth=2)
        with self.assertRaises(ValueError):
            # The one row is row 1 of slice 1 with 3 rows a slice: it starts at (1 * 3 + 1) * 8 + 2 = 34.
            gpumem.copy3d(
                dst=bytearray(37), dst_x=2, dst_y=1, dst_z=1, dst_pitch=8, dst_height=3,
                src=bytearray(8), width=4, height=1, depth=1,
            )
        with self.assertRaises(ValueError):
            gpumem.copy3d_async(dst=bytearray(64), src=b"short", width=4, height=2, depth=1, stream=0)

    def test_unknown_fields_are_refused(self):
        with self.assertRaises(TypeError) as caught:
            gpumem.copy3d(dst=bytearray(8), src=bytearray(8), width=8, height=1, depth=1, dst_slice=1)
        self.assertIn("unknown copy3d field(s): dst_slice", str(caught.exception))
        with self.assertRaises(TypeError):
            gpumem.copy2d(dst=bytearray(8), src=bytearray(8), width=8, height=1, depth=1)

    def test_element_sizes(self):
        self.assertEqual(ArrayDesc(0, Format.F16, 4, 8, 0, 0).element_size, 8)
        self.assertEqual(ArrayDesc(0, Format.U8, 1, 8, 0, 0).element_size, 1)
        self.assertEqual(ArrayDesc(0, Format.I32, 2, 8, 0, 0).element_size, 8)

    def test_an_unknown_format_is_refused_before_the_library(self):
        with self.assertRaises(ValueError):
            gpumem.Array(4, format=99)

    def test_a_width_of_zero_is_an_invalid_argument(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.Array(0)
        self.assertEqual(caught.exception.detail, "width is 0")

    def test_staging_released_is_not_held(self):
        gpumem.copy_staging_release()
        self.assertEqual(gpumem.copy_staging_held(), 0)  # no copy is using any

    def test_negative_extents_and_offsets_are_refused_before_the_library(self):
        with self.assertRaises(ValueError) as caught:
            gpumem.Array(16, -1)
        self.assertEqual(str(caught.exception), "height is -1; it cannot be negative")
        with self.assertRaises(ValueError) as caught:
            gpumem.copy2d(dst=bytearray(64), dst_x=-8, src=bytearray(64), width=8, height=2)
        self.assertEqual(str(caught.exception), "dst_x is -8; it cannot be negative")
        with self.assertRaises(ValueError) as caught:
            gpumem.copy3d(dst=1 << 20, src=2 << 20, width=8, height=2, depth=1, src_z=-1)
        self.assertEqual(str(caught.exception), "src_z is -1; it cannot be negative")


@unittest.skipUnless(GPUS == 0, "a CUDA device is present")
class ArrayNoDriverTest(unittest.TestCase):
    def test_arrays_and_copies_need_a_driver(self):
        with self.assertRaises((gpumem.NoDriver, gpumem.NoDevice)):
            gpumem.Array(16, 16)
        with self.assertRaises((gpumem.NoDriver, gpumem.NoDevice)):
            gpumem.copy3d(dst=bytearray(16), src=bytes(16), width=4, height=2, depth=2)


@unittest.skipUnless(GPUS > 0, "no CUDA device (gpumem.device_count() failed or is 0)")
class ArrayGpuTest(unittest.TestCase):
    def test_a_3d_array_round_trip(self):
        data, back = os.urandom(16 * 8 * 4), bytearray(16 * 8 * 4)
        with gpumem.Array(16, 8, 4, format=Format.U8) as array:
            self.assertEqual(array.desc(), ArrayDesc(0, Format.U8, 1, 16, 8, 4))
            gpumem.copy3d(dst=array, src=data, width=16, height=8, depth=4)
            gpumem.copy3d(dst=back, src_array=array, width=16, height=8, depth=4)
        self.assertEqual(back, data)
        self.assertTrue(array.closed)
        array.close()  # nothing
        with self.assertRaises(ValueError):
            array.desc()
        with self.assertRaises(ValueError):
            gpumem.copy3d(dst=back, src=array, width=16, height=8, depth=4)

    def test_a_3d_region_of_device_memory(self):
        pitch, rows, depth = 64, 10, 3
        src = bytes(range(8 * 4 * 2))
        expected = bytearray(pitch * rows * depth)
        for i, offset in enumerate(region(8, 4, 2, pitch, rows, x=5, y=2, z=1)):
            expected[offset : offset + 8] = src[i * 8 : i * 8 + 8]
        with gpumem.device_alloc(len(expected)) as device, gpumem.device_alloc(16 * 4 * 2) as packed:
            gpumem.memset(device, 0)
            gpumem.copy3d(
                dst=device, dst_x=5, dst_y=2, dst_z=1, dst_pitch=pitch, dst_height=rows,
                src=src, width=8, height=4, depth=2,
            )
            back = bytearray(len(expected))
            gpumem.copy(back, device)
            self.assertEqual(back, expected)

            # Device to device, the copy kernel's path: into rows of 16 bytes, 4 rows a slice.
            gpumem.memset(packed, 0xEE)
            gpumem.copy3d_async(
                dst=packed, dst_pitch=16, dst_height=4,
                src=device, src_x=5, src_y=2, src_z=1, src_pitch=pitch, src_height=rows,
                width=8, height=4, depth=2, stream=0,
            )
            back = bytearray(16 * 4 * 2)
            gpumem.copy(back, packed)  # after the queued copy: synchronous on the legacy stream
        packed_rows = region(8, 4, 2, 16, 4)
        self.assertEqual([bytes(back[o : o + 8]) for o in packed_rows], [src[i : i + 8] for i in range(0, 64, 8)])
        self.assertEqual({bytes(back[o + 8 : o + 16]) for o in packed_rows}, {b"\xee" * 8})

    def test_a_2d_array_of_four_floats_per_element(self):
        data = os.urandom(4 * 16 * 3)
        with gpumem.Array(4, 3, format=Format.F32, channels=4) as array:
            self.assertEqual((array.element_size, array.desc().height, array.desc().depth), (16, 3, 0))
            gpumem.copy2d(dst_array=array, src=data, width=64, height=3)
            back = bytearray(len(data))
            gpumem.copy2d(dst=back, src=array, width=64, height=3)
            self.assertEqual(back, data)
            # One element in from the left, two elements wide: x and width in bytes of whole elements.
            part = bytearray(32 * 3)
            gpumem.copy2d(dst=part, src_array=array.handle, src_x=16, width=32, height=3)
            self.assertEqual(part, b"".join(data[r * 64 + 16 : r * 64 + 48] for r in range(3)))
            with self.assertRaises(gpumem.InvalidArgument):
                gpumem.copy2d(dst=part, src=array, src_x=8, width=16, height=1)  # half an element

    def test_staging_of_copies_with_plain_host_memory(self):
        data = os.urandom(4 << 20)  # above the size the driver copies directly
        with gpumem.device_alloc(len(data)) as device:
            gpumem.copy(device, data)
            held = gpumem.copy_staging_held()
            self.assertGreater(held, 0)
            self.assertLessEqual(held, gpumem.COPY_STAGING_LIMIT)
            gpumem.copy_staging_release()
            self.assertEqual(gpumem.copy_staging_held(), 0)
            back = bytearray(len(data))
            gpumem.copy(back, device)
            self.assertEqual(back, data)

    def test_a_1d_array(self):
        data = os.urandom(200)
        with gpumem.Array(100, format=Format.U16) as array:
            self.assertEqual(array.desc(), ArrayDesc(0, Format.U16, 1, 100, 0, 0))
            gpumem.copy2d(dst=array, src=data, width=200, height=1)
            back = bytearray(200)
            gpumem.copy3d(dst=back, src=array, width=200, height=1, depth=1)
            self.assertEqual(back, data)

    def test_bad_arrays(self):
        with self.assertRaises(gpumem.InvalidArgument):
            gpumem.Array(4, channels=3)
        with self.assertRaises(gpumem.InvalidArgument):
            gpumem.Array(4, 0, 4)  # a depth without a height
        with self.assertRaises(gpumem.InvalidDevice):
            gpumem.Array(4, device=GPUS)
        with gpumem.Array(4, 4) as array:
            with self.assertRaises(TypeError):
                gpumem.copy2d(dst=array, dst_array=array, src=bytes(4), width=4, height=1)
            with self.assertRaises(gpumem.InvalidArgument):
                gpumem.copy2d(dst_array=array, src=bytes(256), width=64, height=4)  # past the array's end


if __name__ == "__main__":
    unittest.main()
