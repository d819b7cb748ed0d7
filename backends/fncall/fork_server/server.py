# The FnCall fork server: runs inside one pool sandbox (a container with
# base/python@3.11), started by the node as `python3 -c <program> <socket
# path>`, where the program is this package put together by
# backends/fncall/embed.py. This module is its entry point and its loop.
#
# It preloads the interpreter and the common stdlib modules once (then
# gc.freeze(), so a child's collections never touch the shared heap), accepts
# ONE connection (the node's, through /proc/<init>/root), unlinks its socket so
# nothing in the sandbox can reach it, and then serves calls one at a time
# (wire.py).
#
# Every call runs in a fresh process (call.py). For Python that process is
# forked *before* the call arrives (the "spare", spare.py) by the zygote
# (zygote.py), a child of this server that does nothing but fork, so the
# server's own work never shares pages with a fresh fork. On the request the
# server writes the call directory and hands the spare a "go" with the stdin
# memfd. Bash calls are spawned with posix_spawn.
#
# The answer goes out first; then the server kills every process left in the
# sandbox but the zygote (this server is the child subreaper), wipes every
# writable place (reset.py), has the next spare forked and only then says
# "clean" (with the taint flag). The node sends the next call only to a clean
# worker.
#
# This process runs as the sandbox's capability-less uid 0, like the calls.
# It is non-dumpable (so are its children until they exec), so a call cannot
# ptrace it or read its memory or fds.
import gc, os, signal, socket, sys

# Preloaded for the calls: a child starts with these already imported.
import json, re, math, collections, itertools, functools, random, string, datetime
import typing, dataclasses, heapq, bisect, copy, decimal, fractions, statistics
import operator, enum, pathlib, textwrap, hashlib, base64, array, numbers
import unittest, argparse, csv, uuid, subprocess, tempfile, glob, contextlib, abc

from .call import call
from .layout import WIPED, libc, log
from .reset import fingerprint, reset, wipe
from .wire import frame, read_frame
from .zygote import Zygote


def main():
    if os.getppid() != 1:
        sys.exit("fncall server: refusing to run outside a sandbox (its parent must be init)")
    libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE 0
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    conn = accept_node(sys.argv[1])
    for d in WIPED:
        wipe(d)
    baseline = fingerprint()
    gc.collect()
    gc.freeze()
    zygote = Zygote()
    spare = zygote.spare()
    conn.sendall(frame([b"ready"]))
    while True:
        try:
            req = read_frame(conn)
        except EOFError:
            return
        # Taken: from here on the call may run. A server that dies before
        # this frame lets the node retry the call on another worker.
        conn.sendall(frame([b"ack"]))
        python = req[0] == b"python"
        try:
            out, used = call(req, spare if python else None, zygote)
            if used is not spare and spare is not None:
                spare.close()  # a bash call: the spare is killed in the reset
        except Exception as e:
            # The call could not start (bad file, no memory): answer it and
            # let the node replace this worker.
            out = [b"-1", b"0", b"0", b"0", b"1", b"", b"", str(e).encode()]
        conn.sendall(frame(out))
        clean = reset(zygote, baseline)
        # The next spare, from the clean server, only while Python calls come.
        spare = None
        if python and clean:
            try:
                spare = zygote.spare()
            except (EOFError, OSError) as e:
                log("no spare: %s" % e)
                clean = False
        conn.sendall(frame([b"clean", b"0" if clean else b"1"]))


def accept_node(path):
    """The node's one connection; the socket is gone from the sandbox after it."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    srv.settimeout(60)
    conn, _ = srv.accept()
    srv.close()
    os.unlink(path)
    conn.settimeout(None)
    return conn
