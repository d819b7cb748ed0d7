# The python layer: a sandbox from base/python@3.11 runs Python.

from dsec_harness import PYTHON


def test_python_layer(client):
    status, sb = client.create([PYTHON], memory_mb=512)
    assert status == 201, sb
    assert sb["layers"] == [PYTHON], sb
    r = client.sh(sb["id"], "python3 -c 'print(6*7)'", timeout_s=120)
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "42\n", r


def test_python_version_and_stdlib(client):
    sid = client.create_ok([PYTHON], memory_mb=512)
    r = client.sh(sid, ["python3", "-c", "import sys, json, sqlite3, ssl; "
                        "print(sys.version_info[:2])"], timeout_s=120)
    assert r["exit_code"] == 0, r
    assert r["stdout"].strip() == "(3, 11)", r


def test_python_file_round_trip(client):
    sid = client.create_ok([PYTHON], memory_mb=512)
    code = b"import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
    status, out = client.put_file(sid, "/work/a.py", code)
    assert status == 200, out
    r = client.sh(sid, "python3 /work/a.py", stdin="1 2 3 4", timeout_s=120)
    assert r["stdout"] == "10\n", r


def test_python_has_no_network(client):
    sid = client.create_ok([PYTHON], memory_mb=512)
    r = client.sh(sid, ["python3", "-c", "import socket; s=socket.socket(); s.settimeout(3); "
                        "s.connect(('1.1.1.1', 80)); print('CONNECTED')"], timeout_s=60)
    assert "CONNECTED" not in r["stdout"], r
    assert r["exit_code"] != 0, r
