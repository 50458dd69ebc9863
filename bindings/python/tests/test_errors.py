"""Bad input: the exception class of its status, with the library's detail."""
import ctypes
import pickle
import unittest

import gpumem


class ErrorClassTest(unittest.TestCase):
    def test_str_has_the_name_and_the_detail(self):
        e = gpumem.OutOfMemory(-2, "asked 1024 bytes")
        self.assertEqual(str(e), "GPUMEM_ERROR_OUT_OF_MEMORY: asked 1024 bytes")
        self.assertEqual(e.status, -2)
        self.assertEqual(e.detail, "asked 1024 bytes")
        self.assertIsInstance(e, MemoryError)
        self.assertIsInstance(gpumem.InvalidArgument(-1, ""), ValueError)

    def test_an_unknown_status_gives_the_base_class(self):
        e = gpumem.errors.error_for(-1000, "from the future")
        self.assertIs(type(e), gpumem.Error)
        self.assertEqual(str(e), "GPUMEM_UNKNOWN_STATUS: from the future")

    def test_errors_pickle(self):
        e = pickle.loads(pickle.dumps(gpumem.NotOwned(-13, "detail")))
        self.assertIs(type(e), gpumem.NotOwned)
        self.assertEqual((e.status, e.detail), (-13, "detail"))


class BadInputTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.addCleanup(self.host.close)

    def test_alloc_of_size_0_is_an_invalid_argument(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            self.host.alloc(0)
        self.assertEqual(caught.exception.status, -1)
        self.assertEqual(caught.exception.detail, "size is 0")
        self.assertEqual(str(caught.exception), "GPUMEM_ERROR_INVALID_ARGUMENT: size is 0")
        self.assertEqual(caught.exception.cuda_result, 0)

    def test_a_negative_size_is_refused_before_the_library(self):
        with self.assertRaises(ValueError):
            self.host.alloc(-1)

    def test_a_bad_alignment_is_an_invalid_argument(self):
        with self.assertRaises(gpumem.InvalidArgument):
            gpumem.Allocator.host(alignment=3)

    def test_an_allocator_closed_twice_is_an_invalid_handle(self):
        a = gpumem.Allocator.host()
        a.close()
        self.assertTrue(a.closed)
        with self.assertRaises(gpumem.InvalidHandle) as caught:
            a.close()
        self.assertIn("is not a live gpumem allocator", caught.exception.detail)
        with self.assertRaises(gpumem.InvalidHandle):
            a.alloc(16)

    def test_a_foreign_pointer_freed_is_not_owned(self):
        foreign = ctypes.create_string_buffer(64)
        with self.assertRaises(gpumem.NotOwned) as caught:
            self.host.free(ctypes.addressof(foreign))
        self.assertIn("was not allocated by this host allocator", caught.exception.detail)

    def test_a_pool_frees_only_its_own(self):
        with gpumem.Pool(self.host) as pool:
            b = self.host.alloc(64)
            with self.assertRaises(gpumem.NotOwned) as caught:
                pool.free(b.ptr)
            self.assertIn("was not allocated by this pool", caught.exception.detail)
            with self.assertRaises(ValueError):
                pool.free(b)
            b.free()

    def test_close_is_refused_while_buffers_live(self):
        a = gpumem.Allocator.host()
        b = a.alloc(100)
        with self.assertRaises(gpumem.Busy) as caught:
            a.close()
        self.assertIn("has 1 live allocation (100 bytes)", caught.exception.detail)
        self.assertFalse(a.closed)
        b.free()
        a.close()

    def test_an_upstream_is_not_closed_under_its_pool(self):
        pool = gpumem.Pool(self.host)
        with self.assertRaises(gpumem.Busy) as caught:
            self.host.close()
        self.assertIn("relied on 1 time", caught.exception.detail)
        pool.close()

    def test_a_bad_hook_mask_is_an_invalid_argument(self):
        with self.assertRaises(gpumem.InvalidArgument):
            self.host.add_hook(0, print)

    def test_a_failed_status_leaves_the_librarys_detail_per_status(self):
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.Pool(self.host, limit_fraction=0.5)
        self.assertIn("host", caught.exception.detail)


if __name__ == "__main__":
    unittest.main()
