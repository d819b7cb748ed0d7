# The fork server's pure parts on the host (backends/fncall/fork_server/): the
# wire, the output cap, the call directory's path check, and the embedded
# program as the node runs it (all modules load in the declared order; outside
# a sandbox it refuses to start). Its sandbox side runs in test_fncall.py.
#
#   fork_server_test.py <generated fork_server_source.cpp>   (meson test does this)
import os, shutil, socket, subprocess, sys, tempfile, unittest

sys.dont_write_bytecode = True  # nothing written into the source tree

FNCALL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "backends", "fncall")
sys.path.insert(0, FNCALL)
from fork_server import call, wire  # noqa: E402

GENERATED = sys.argv.pop(1) if len(sys.argv) > 1 else None


class Wire(unittest.TestCase):
    def test_frames_round_trip(self):
        cases = [[], [b""], [b"ack"], [b"python", b"print(1)\n", b"\x00\xff" * 70000, b"", b"3"]]
        a, b = socket.socketpair()
        with a, b:
            for parts in cases:
                data = wire.frame(parts)
                self.assertEqual(wire.fields(data[4:]), parts)
                a.sendall(data)
                self.assertEqual(wire.read_frame(b), parts)

    def test_a_cut_frame_is_eof(self):
        a, b = socket.socketpair()
        with b:
            a.sendall(wire.frame([b"python", b"code"])[:-2])
            a.close()
            self.assertRaises(EOFError, wire.read_frame, b)


class Calls(unittest.TestCase):
    def test_output_stops_at_the_cap(self):
        out = call.Output()
        out.add(b"x" * (call.OUT_CAP - 1))
        self.assertFalse(out.truncated)
        out.add(b"yz")
        out.add(b"more")
        self.assertTrue(out.truncated)
        self.assertEqual(len(out.data), call.OUT_CAP)
        self.assertEqual(out.data[-1:], b"y")

    def test_call_dir_keeps_files_inside(self):
        with tempfile.TemporaryDirectory() as tmp:
            saved, call.CALL_DIR = call.CALL_DIR, tmp + "/call"
            try:
                req = [b"python", b"print(1)", b"", b"5", b"1", b"pkg/mod.py", b"X = 1"]
                call.write_call_dir("python", req[1], req, 1)
                with open(tmp + "/call/pkg/mod.py", "rb") as f:
                    self.assertEqual(f.read(), b"X = 1")
                with open(tmp + "/call/main.py", "rb") as f:
                    self.assertEqual(f.read(), b"print(1)")
                for bad in (b"../escape.py", b"/etc/passwd", b"a/../../x"):
                    shutil.rmtree(tmp + "/call")
                    req[5] = bad
                    with self.assertRaisesRegex(ValueError, "leaves the call directory"):
                        call.write_call_dir("python", req[1], req, 1)
            finally:
                call.CALL_DIR = saved


class Program(unittest.TestCase):
    def program(self):
        if GENERATED is None:
            self.skipTest("no generated fork_server_source.cpp given (meson test passes it)")
        with open(GENERATED, encoding="utf-8") as f:
            text = f.read()
        return text[text.index('R"PY(') + 5:text.rindex(')PY"')]

    def test_the_embedded_program_loads_and_refuses_outside_a_sandbox(self):
        prog = self.program()
        # test_fncall.py tells the server's processes apart by this start.
        self.assertTrue(prog.startswith("# The FnCall fork server"))
        r = subprocess.run([sys.executable, "-c", prog, "/nonexistent/fncall.sock"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("refusing to run outside a sandbox", r.stderr)

    def test_embed_refuses_a_module_before_what_it_imports(self):
        mods = [os.path.join(FNCALL, "fork_server", m + ".py") for m in ("wire", "layout", "call")]
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, os.path.join(FNCALL, "embed.py"),
                                tmp + "/out.cpp", *reversed(mods)],
                               capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("call imports layout, which is not declared before it", r.stderr)


if __name__ == "__main__":
    unittest.main()
