"""accio in the processes and threads of ML code: data loaders that fork workers (multiprocessing,
a DataLoader) while the parent's threads are inside accio calls, and what the children may then do
with the files and memory they inherited. Each child runs in a subprocess of its own with an alarm,
so that a hang fails the test instead of stalling the run."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import accio


def run_py(code: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, ACCIO_QUIET="1"))


def test_a_forked_child_closes_a_file_another_parent_thread_was_using(data):
    """A File that a parent's thread is inside a call on at the fork (here held in the buffer's
    __cuda_array_interface__ property, which accio asks while the call is in progress; a long
    read_into is the same): that call never ends in the child, whose close() (a with block, del,
    a Dataset's cleanup) waited for it for ever. The child reads and closes the file; the parent's
    call ends in the parent only."""
    p, content = data
    r = run_py(f"""
        import os, signal, sys, threading, accio
        f = accio.open({str(p)!r}, mechanism="posix")
        inside, release = threading.Event(), threading.Event()
        class Held:
            @property
            def __cuda_array_interface__(self):
                inside.set()
                release.wait(120)
                raise AttributeError("not a GPU array")
        def call():
            try:
                f.read_into(Held(), 0)
            except TypeError:
                pass
        t = threading.Thread(target=call)
        t.start()
        assert inside.wait(120)
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)  # the hang ends the child (SIGALRM) instead of leaving it behind
            b = bytearray(4096)
            ok = f.read_into(b, 0) == 4096 and bytes(b) == open({str(p)!r}, "rb").read(4096)
            f.close()
            ok = ok and f.closed
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        release.set()
        t.join(120)
        f.close()  # the parent's call has ended: its close does not wait
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    assert r.returncode == 0, f"child status {r.returncode} (-14: it hung in close()): {r.stderr}"


def test_a_fork_while_another_thread_imports_the_futures_module_leaves_the_child_free(tmp_path):
    """accio imports its Future class on first use (concurrent.futures costs ~10 ms that `accio run`
    would pay per launch). A fork while another thread was inside that import left the import's
    module lock held in the child, by a thread that does not exist there: the child's first async
    call hung (ML audit, session 27: one fork in 300 after the first read_into_async). A hook before
    fork waits for an import in progress. Here the import is held open by a slow loader."""
    r = run_py("""
        import importlib.abc, importlib.util, os, signal, sys, threading, time
        import accio
        started = threading.Event()

        class Slow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "accio._futures":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                real = spec.loader.exec_module
                def exec_module(module):
                    started.set()
                    time.sleep(1.0)
                    real(module)
                spec.loader.exec_module = exec_module
                return spec
        sys.meta_path.insert(0, Slow())
        t = threading.Thread(target=lambda: __import__("accio._futures"))
        t.start()
        started.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            from accio._futures import Future
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        t.join()
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert r.stdout.strip() == "child 0", (r.stdout, r.stderr)
