"""What a pool's growth costs (Pool.growth_info()), page reclaim over address ranges
(Pool.set_page_reclaim()) and the refusals of set_device_pool_config(); none of it needs a GPU."""
import ctypes
import unittest

import gpumem

ZERO = gpumem.PoolGrowthInfo(
    mapped_bytes=0,
    map_calls=0,
    moved_bytes=0,
    move_calls=0,
    returned_bytes=0,
    fences_recorded=0,
    driver_ns=0,
)


class HostGrowthTest(unittest.TestCase):
    """A pool over plain host memory: growth is one upstream allocation per new block."""

    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.pool = gpumem.Pool(self.host)
        # Reverse order: the pool goes before its upstream.
        self.addCleanup(self.host.close)
        self.addCleanup(self.pool.close)

    def test_a_new_pool_has_grown_by_nothing(self):
        info = self.pool.growth_info()
        self.assertIsInstance(info, gpumem.PoolGrowthInfo)
        self.assertEqual(info, ZERO)

    def test_growth_is_counted_once_and_cached_memory_costs_nothing(self):
        first = self.pool.alloc(1000)
        grown = self.pool.growth_info()
        self.assertGreaterEqual(grown.mapped_bytes, 1000)
        self.assertEqual(grown.mapped_bytes, self.pool.stats().bytes_reserved)
        self.assertEqual(grown.map_calls, 1)
        self.assertGreater(grown.driver_ns, 0)
        self.assertEqual((grown.moved_bytes, grown.move_calls, grown.returned_bytes), (0, 0, 0))

        first.free()
        self.assertEqual(self.pool.growth_info(), grown)  # a free keeps the memory cached
        again = self.pool.alloc(1000)
        self.assertEqual(again.ptr, first.ptr)  # served from the cache
        self.assertEqual(self.pool.growth_info(), grown)
        again.free()

        self.pool.release()
        self.assertEqual(self.pool.stats().bytes_reserved, 0)
        released = self.pool.growth_info()
        self.assertEqual(released.returned_bytes, grown.mapped_bytes)
        self.assertEqual((released.mapped_bytes, released.map_calls), (grown.mapped_bytes, grown.map_calls))
        self.assertGreaterEqual(released.driver_ns, grown.driver_ns)
        # No ranges: nothing is ever moved, and no fences are recorded over host memory.
        self.assertEqual((released.moved_bytes, released.move_calls, released.fences_recorded), (0, 0, 0))

    def test_each_new_block_is_one_more_map_call(self):
        buffers = [self.pool.alloc(size) for size in (512, 4096, 100000)]
        info = self.pool.growth_info()
        self.assertEqual(info.map_calls, 3)
        self.assertGreaterEqual(info.mapped_bytes, 512 + 4096 + 100000)
        self.assertEqual(info.mapped_bytes, self.pool.stats().bytes_reserved)
        self.assertEqual(info.moved_bytes, 0)
        for b in buffers:
            b.free()

    def test_growth_info_refuses_what_is_not_a_live_pool(self):
        with self.assertRaises(gpumem.InvalidHandle) as caught:
            gpumem.Pool.from_handle(self.host.handle).growth_info()
        self.assertIn("not a pool", caught.exception.detail)
        pool = gpumem.Pool(self.host)
        pool.close()
        with self.assertRaises(gpumem.InvalidHandle) as caught:
            pool.growth_info()
        self.assertIn("is not a live gpumem allocator", caught.exception.detail)


class Ranges:
    """Address ranges over host memory for a FunctionsAllocator, with bookkeeping of what is mapped:
    the units mapped, and each map and unmap, checked to lie inside a reserved range."""

    def __init__(self, unit):
        self.unit = unit
        self.ranges = {}  # start -> (ctypes buffer, size)
        self.mapped = set()  # addresses of the units mapped
        self.calls = []

    def _inside(self, ptr, size):
        assert size > 0 and size % self.unit == 0 and ptr % self.unit == 0, (ptr, size)
        assert any(start <= ptr and ptr + size <= start + n for start, (_, n) in self.ranges.items()), (ptr, size)
        return range(ptr, ptr + size, self.unit)

    def reserve(self, size, device):
        raw = ctypes.create_string_buffer(size + self.unit)
        start = -(-ctypes.addressof(raw) // self.unit) * self.unit
        self.ranges[start] = (raw, size)
        return start

    def unreserve(self, ptr, size, device):
        assert not any(ptr <= u < ptr + size for u in self.mapped), "unreserved with memory mapped"
        del self.ranges[ptr]

    def map(self, ptr, size, device):
        units = self._inside(ptr, size)
        assert self.mapped.isdisjoint(units), "mapped twice"
        self.mapped.update(units)
        self.calls.append(("map", size))

    def unmap(self, ptr, size, device):
        units = self._inside(ptr, size)
        assert self.mapped.issuperset(units), "unmapped what is not mapped"
        self.mapped.difference_update(units)
        self.calls.append(("unmap", size))

    @property
    def mapped_bytes(self):
        return len(self.mapped) * self.unit


class PageReclaimTest(unittest.TestCase):
    """Over ranges, growth first moves the whole free units of the pool's gaps to where memory is needed."""

    UNIT = 4096

    def make_pool(self):
        ranges = Ranges(self.UNIT)
        fa = gpumem.FunctionsAllocator(
            lambda size, device, stream: ctypes.create_string_buffer(size),
            reserve=ranges.reserve,
            unreserve=ranges.unreserve,
            map=ranges.map,
            unmap=ranges.unmap,
            map_unit=self.UNIT,
            range_size=64 * self.UNIT,
        )
        pool = gpumem.Pool(fa)
        self.addCleanup(fa.close)
        self.addCleanup(pool.close)
        return pool, ranges, fa

    def fragment(self, pool):
        """Six unit-sized blocks, every other freed: three one-unit gaps. Returns the live ones."""
        blocks = [pool.alloc(self.UNIT) for _ in range(6)]
        for b in blocks[::2]:
            b.free()
        kept = blocks[1::2]
        info = pool.info()
        self.assertEqual((info.free_bytes, info.free_block_count), (3 * self.UNIT, 3))  # no gap fits 2 units
        return kept

    def grow_over_gaps(self, pool):
        """Allocates 2 units, more than any gap; returns the buffer, the growth and the reserved bytes it added."""
        before, reserved = pool.growth_info(), pool.stats().bytes_reserved
        big = pool.alloc(2 * self.UNIT)
        ctypes.memset(big.ptr, 0x5A, big.size)  # the memory is there
        after = pool.growth_info()
        delta = {f: getattr(after, f) - getattr(before, f) for f in ("mapped_bytes", "moved_bytes", "move_calls")}
        return big, delta, pool.stats().bytes_reserved - reserved

    def test_growth_moves_free_units_by_default(self):
        pool, ranges, fa = self.make_pool()
        kept = self.fragment(pool)
        grown = pool.growth_info()
        self.assertEqual((grown.mapped_bytes, grown.moved_bytes), (6 * self.UNIT, 0))
        self.assertEqual(ranges.mapped_bytes, 6 * self.UNIT)
        del ranges.calls[:]

        big, delta, reserved_growth = self.grow_over_gaps(pool)
        self.assertGreater(delta["moved_bytes"], 0)
        self.assertGreater(delta["move_calls"], 0)
        self.assertLess(reserved_growth, big.size)
        self.assertEqual(delta["mapped_bytes"], reserved_growth)
        self.assertEqual(delta["moved_bytes"] + delta["mapped_bytes"], big.size)
        # The memory came from the gaps: unmapped there, mapped under the new block.
        self.assertIn(("unmap", self.UNIT), ranges.calls)
        self.assertEqual(ranges.mapped_bytes, 6 * self.UNIT + reserved_growth)
        self.assertEqual(pool.stats().bytes_reserved, ranges.mapped_bytes)

        big.free()
        for b in kept:
            b.free()
        pool.release()
        self.assertEqual(ranges.mapped_bytes, 0)
        done = pool.growth_info()
        self.assertEqual(done.returned_bytes, done.mapped_bytes)
        self.assertEqual(ranges.ranges, {})

    def test_growth_maps_the_whole_request_without_page_reclaim(self):
        pool, ranges, fa = self.make_pool()
        pool.set_page_reclaim(False)
        kept = self.fragment(pool)

        big, delta, reserved_growth = self.grow_over_gaps(pool)
        self.assertEqual(pool.growth_info().moved_bytes, 0)
        self.assertEqual(pool.growth_info().move_calls, 0)
        self.assertEqual(reserved_growth, big.size)
        self.assertEqual(delta["mapped_bytes"], big.size)
        self.assertNotIn(("unmap", self.UNIT), ranges.calls)
        self.assertEqual(ranges.mapped_bytes, 8 * self.UNIT)
        self.assertEqual(pool.info().free_bytes, 3 * self.UNIT)  # the gaps are still there
        for b in [big, *kept]:
            b.free()

    def test_truthiness_sets_page_reclaim(self):
        # The library takes exactly 1 or 0; the binding maps any truth value to one of them.
        for value in (True, False, 1, 0, 2, -1, "yes", "", None, [0]):
            with self.subTest(value=value):
                pool, ranges, fa = self.make_pool()
                pool.set_page_reclaim(not value)  # the other way first, so that the call matters
                pool.set_page_reclaim(value)
                kept = self.fragment(pool)
                big, delta, reserved_growth = self.grow_over_gaps(pool)
                if value:
                    self.assertGreater(delta["moved_bytes"], 0)
                    self.assertLess(reserved_growth, big.size)
                else:
                    self.assertEqual(delta["moved_bytes"], 0)
                    self.assertEqual(reserved_growth, big.size)
                for b in [big, *kept]:
                    b.free()

    def test_the_library_itself_takes_only_1_or_0(self):
        pool, ranges, fa = self.make_pool()
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.library().gpumem_pool_set_page_reclaim(pool.handle, 2)
        self.assertIn("enable is 2", caught.exception.detail)


class SetPageReclaimTest(unittest.TestCase):
    def setUp(self):
        self.host = gpumem.Allocator.host()
        self.addCleanup(self.host.close)

    def test_true_and_false_succeed_on_a_pool_without_ranges(self):
        with gpumem.Pool(self.host) as pool:
            self.assertIsNone(pool.set_page_reclaim(True))
            self.assertIsNone(pool.set_page_reclaim(False))
            self.assertIsNone(pool.set_page_reclaim(True))
            with pool.alloc(1000):  # kept for nothing over host memory: the pool works as before
                pass
            self.assertEqual(pool.growth_info().moved_bytes, 0)

    def test_a_destroyed_pool_is_an_invalid_handle(self):
        pool = gpumem.Pool(self.host)
        pool.close()
        for value in (True, False):
            with self.subTest(value=value), self.assertRaises(gpumem.InvalidHandle) as caught:
                pool.set_page_reclaim(value)
            self.assertIn("is not a live gpumem allocator", caught.exception.detail)

    def test_an_allocator_that_is_not_a_pool_is_an_invalid_handle(self):
        with self.assertRaises(gpumem.InvalidHandle) as caught:
            gpumem.Pool.from_handle(self.host.handle).set_page_reclaim(True)
        self.assertIn("is a host allocator, not a pool", caught.exception.detail)


class SetDevicePoolConfigTest(unittest.TestCase):
    """Only refusals: a valid configuration would change the device pools of the whole test process
    (or be Busy once one is made). Parsing errors come before that check, with or without a GPU."""

    def test_an_unknown_key_is_an_invalid_argument(self):
        for config in ("colour:blue", "backend:vm,colour:blue", "page_reclaim:true,bogus:1"):
            with self.subTest(config=config), self.assertRaises(gpumem.InvalidArgument) as caught:
                gpumem.set_device_pool_config(config)
            self.assertIn("unknown key", caught.exception.detail)
            self.assertIn("unknown key", str(caught.exception))
            self.assertIsInstance(caught.exception, ValueError)

    def test_a_malformed_value_is_an_invalid_argument(self):
        for config, words in [
            ("map_unit:lots", ("map_unit", "lots")),
            ("range_size:-1MiB", ("range_size", "negative")),
            ("map_unit:2 furlongs", ("map_unit", "unknown unit")),
            ("backend:fast", ("backend", "fast")),
            ("page_reclaim:maybe", ("page_reclaim", "not true or false")),
            ("backend", ("not key:value",)),
        ]:
            with self.subTest(config=config), self.assertRaises(gpumem.InvalidArgument) as caught:
                gpumem.set_device_pool_config(config)
            for word in words:
                self.assertIn(word, caught.exception.detail)

    def test_valid_keys_before_a_bad_value_do_not_save_the_call(self):
        # The whole text is parsed first: InvalidArgument (not success, nor Busy once a device pool
        # exists) even though backend:classic alone would be accepted.
        with self.assertRaises(gpumem.InvalidArgument) as caught:
            gpumem.set_device_pool_config("backend:classic,map_unit:lots")
        self.assertIn('map_unit="lots"', caught.exception.detail)


if __name__ == "__main__":
    unittest.main()
