"""muster.torch.MusterStore against a real musterd: every op torch's c10d
calls, straight and through torch's own PrefixStore (c10d's C++ calling the
Python methods), wait timeouts, and the errors' words."""

import datetime
import threading
import time
import unittest

import harness


@harness.require("torch", "grpc")
class StoreTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.musterd = harness.Musterd()

    @classmethod
    def tearDownClass(cls):
        cls.musterd.kill()

    def make(self, prefix, timeout=datetime.timedelta(seconds=10)):
        from muster import _client
        import muster.torch
        client = _client.StoreClient(self.musterd.endpoint, prefix)
        return muster.torch.MusterStore(client, timeout)

    def test_set_get_add_check_delete(self):
        s = self.make("job/1")
        s.set("a", b"1")
        s.set("b", "text")  # a Python caller may pass str
        self.assertEqual(s.get("a"), b"1")
        self.assertEqual(s.get("b"), b"text")
        self.assertEqual(s.add("n", 5), 5)
        self.assertEqual(s.add("n", 3), 8)
        self.assertEqual(s.get("n"), b"8")  # decimal, as c10d's stores
        self.assertTrue(s.check(["a", "n"]))
        self.assertFalse(s.check(["a", "missing"]))
        self.assertEqual(s.num_keys(), 3)
        self.assertTrue(s.delete_key("a"))
        self.assertFalse(s.delete_key("a"))
        self.assertEqual(s.num_keys(), 2)

    def test_compare_set(self):
        s = self.make("job/2")
        # Absent and expected empty: set.
        self.assertEqual(s.compare_set("k", b"", b"v1"), b"v1")
        # A mismatch returns the value stored; a match swaps.
        self.assertEqual(s.compare_set("k", b"other", b"v2"), b"v1")
        self.assertEqual(s.compare_set("k", b"v1", b"v2"), b"v2")
        # torch 1.13's trampoline passes lists of ints.
        self.assertEqual(s.compare_set("k", list(b"v2"), list(b"v3")), b"v3")

    def test_through_torch_prefix_store(self):
        import torch.distributed as dist
        s = self.make("job/3")
        p = dist.PrefixStore("pg", s)  # C++ calls the Python methods
        p.set("x", "1")
        self.assertEqual(p.get("x"), b"1")
        self.assertEqual(p.add("c", 2), 2)
        self.assertEqual(p.compare_set("x", "1", "2"), b"2")
        p.wait(["x"])
        p.wait(["x"], datetime.timedelta(seconds=1))
        self.assertEqual(p.num_keys(), 2)
        self.assertTrue(p.delete_key("x"))
        self.assertEqual(s.get("pg/c"), b"2")

    def test_wait_blocks_until_set_and_times_out(self):
        from muster import _client
        s = self.make("job/4")
        setter = threading.Timer(0.2, lambda: self.make("job/4").set("late",
                                                                     b"1"))
        setter.start()
        s.wait(["late"], datetime.timedelta(seconds=20))
        self.assertEqual(s.get("late"), b"1")
        setter.join()
        began = time.monotonic()
        with self.assertRaises(_client.StoreTimeout) as e:
            s.wait(["never"], datetime.timedelta(milliseconds=300))
        self.assertGreaterEqual(time.monotonic() - began, 0.29)
        self.assertLess(time.monotonic() - began, 10)
        self.assertIn("never", str(e.exception))
        self.assertIsInstance(e.exception, RuntimeError)  # torch catches it
        # get waits up to the store's timeout.
        s.set_timeout(datetime.timedelta(milliseconds=200))
        with self.assertRaises(_client.StoreTimeout):
            s.get("never")

    def test_unreachable_store_names_the_endpoint(self):
        from muster import _client
        port = harness.free_port()
        client = _client.StoreClient(f"127.0.0.1:{port}", "job/5",
                                     failover_timeout=0.5)
        with self.assertRaises(_client.StoreError) as e:
            client.set("a", b"1")
        self.assertIn(f"127.0.0.1:{port}", str(e.exception))
        self.assertIn("musterd", str(e.exception))

    def test_bad_endpoint_and_missing_prefix(self):
        from muster import _client
        with self.assertRaisesRegex(_client.StoreError, "port 'x' is no num"):
            _client.StoreClient("h:x", "p")
        with self.assertRaisesRegex(_client.StoreError, "MUSTER_STORE_PREFIX"):
            _client.StoreClient("h:1", "")
        self.assertEqual(_client.parse_endpoints("a:1,b,[::1]:7,:9"),
                         ["a:1", "b:29400", "[::1]:7", "127.0.0.1:9"])


if __name__ == "__main__":
    unittest.main()
