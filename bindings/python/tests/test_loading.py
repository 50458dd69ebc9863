"""Loading the library: what is tried, and the version check."""
import os
import unittest
from unittest import mock

import gpumem
from gpumem import _lib


class LoadingTest(unittest.TestCase):
    def test_a_library_older_than_needed_is_refused_naming_both_versions(self):
        with mock.patch.object(_lib, "REQUIRED_VERSION", (0, 99, 1)):
            with self.assertRaises(gpumem.LibraryError) as caught:
                _lib.open_library()
        message = str(caught.exception)
        self.assertIn(f"libgpumem {gpumem.version()}, older than 0.99.1", message)
        self.assertIsInstance(caught.exception, ImportError)

    def test_the_version_needed_is_met(self):
        self.assertGreaterEqual(gpumem.version_number(), _lib.version_number(*_lib.REQUIRED_VERSION))

    def test_a_missing_library_names_the_path_tried(self):
        with mock.patch.dict(os.environ, {"GPUMEM_LIBRARY": "/nonexistent/libgpumem.so.0"}):
            with self.assertRaises(gpumem.LibraryError) as caught:
                _lib.open_library()
        self.assertIn("tried /nonexistent/libgpumem.so.0 (from GPUMEM_LIBRARY)", str(caught.exception))

    def test_without_gpumem_library_the_loader_searches_for_the_soname(self):
        environ = {k: v for k, v in os.environ.items() if k != "GPUMEM_LIBRARY"}
        with mock.patch.dict(os.environ, environ, clear=True):
            try:
                lib = _lib.open_library()
            except gpumem.LibraryError as e:
                self.assertIn("tried libgpumem.so.0 (through the dynamic loader's search path)", str(e))
            else:
                self.assertGreaterEqual(lib.gpumem_version_number(), 400)

    def test_without_gpumem_library_the_bundled_copy_is_loaded(self):
        bundled = _lib.library_path()  # the library under test stands in for a wheel's copy
        environ = {k: v for k, v in os.environ.items() if k != "GPUMEM_LIBRARY"}
        with mock.patch.dict(os.environ, environ, clear=True), mock.patch.object(_lib, "BUNDLED", bundled):
            lib = _lib.open_library()
        self.assertEqual(lib._name, bundled)

    def test_gpumem_library_wins_over_the_bundled_copy(self):
        with mock.patch.dict(os.environ, {"GPUMEM_LIBRARY": "/nonexistent/libgpumem.so.0"}):
            with mock.patch.object(_lib, "BUNDLED", _lib.library_path()):
                with self.assertRaises(gpumem.LibraryError) as caught:
                    _lib.open_library()
        self.assertIn("tried /nonexistent/libgpumem.so.0 (from GPUMEM_LIBRARY)", str(caught.exception))

    def test_a_missing_bundled_copy_falls_back_to_the_loader(self):
        environ = {k: v for k, v in os.environ.items() if k != "GPUMEM_LIBRARY"}
        with mock.patch.dict(os.environ, environ, clear=True):
            with mock.patch.object(_lib, "BUNDLED", "/nonexistent/gpumem/libgpumem.so.0"):
                try:
                    _lib.open_library()
                except gpumem.LibraryError as e:
                    self.assertIn("tried libgpumem.so.0 (through the dynamic loader's search path)", str(e))

    def test_a_library_that_is_not_gpumem_is_refused(self):
        with self.assertRaises(gpumem.LibraryError) as caught:
            _lib.open_library("libc.so.6")
        self.assertIn("libc.so.6 is not libgpumem", str(caught.exception))

    def test_the_library_is_loaded_once(self):
        self.assertIs(gpumem.library(), gpumem.library())


if __name__ == "__main__":
    unittest.main()
