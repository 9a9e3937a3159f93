#!/usr/bin/env python3
"""How `torch.load` reads a saved tensor's bytes, and whether `accio run` can see them (issue 20).

On the H100 machine (2026-11-27, torch 2.11) `torch.load` of a 1 GiB tensor under `accio run` ran
at 1.11x [0.93-1.15] and the shim's statistics showed 20 MB of calls (the imports) and none of the
tensor's bytes. Most likely the statistics were at fault: they kept rows for the first 1024 files
of a process, and importing torch reads more (docs/preload.md, Statistics). With torch 2.15 on the 2-CPU VM this
shows one readinto of the whole 256 MiB record and no mapping. That machine has no strace, so this looks from inside: it
saves a tensor, then loads it once through a file object that counts what torch asks of it
(`read`, `readinto`, their bytes and sizes, `seek`) and once by path, and reports whether the file
was mapped into the process afterwards (`/proc/self/maps`) and which torch it was.

    python benchmarks/torch_load_reads.py --dir /scratch --size 256m --json results/run/torch_load_reads.json

Without torch it says so and exits 0 (the JSON records "torch": null).
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

from accio._system import parse_size
from accio._usage import write_json


class CountingFile(io.FileIO):
    """A raw file that counts the calls and bytes a reader asks of it."""

    def __init__(self, path):
        super().__init__(path, "rb")
        self.calls = {"read": 0, "readinto": 0, "seek": 0}
        self.bytes = {"read": 0, "readinto": 0}
        self.largest = 0

    def _count(self, what: str, n: int | None) -> None:
        self.calls[what] += 1
        self.bytes[what] += n or 0
        self.largest = max(self.largest, n or 0)

    def read(self, size=-1):
        b = super().read(size)
        self._count("read", len(b) if b is not None else 0)
        return b

    def readinto(self, buf):
        n = super().readinto(buf)
        self._count("readinto", n)
        return n

    def seek(self, pos, whence=0):
        self.calls["seek"] += 1
        return super().seek(pos, whence)


def mapped(path: Path) -> bool:
    """Whether the file is mapped into this process now."""
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(str(path)) for line in f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp", help="directory for the saved tensor (default /tmp)")
    ap.add_argument("--size", default="256m", help="the tensor's size (default 256m)")
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args(argv)
    size = parse_size(a.size)
    out: dict = {"schema": "accio.torch-load-reads/1", "command": " ".join([sys.executable, *sys.argv]),
                 "size": size, "torch": None}
    try:
        import torch
    except ImportError:
        print("torch_load_reads: torch is not installed here: nothing to look at")
    else:
        out["torch"] = torch.__version__
        path = Path(a.dir) / f"accio-torch-load.{os.getpid()}.pt"
        try:
            torch.save(torch.zeros(size // 4, dtype=torch.float32), path)
            f = CountingFile(path)
            t = torch.load(f)
            kept = mapped(path)
            f.close()
            out["through_a_file_object"] = {"calls": f.calls, "bytes": f.bytes, "largest": f.largest,
                                            "mapped_after": kept, "tensor_bytes": t.numel() * t.element_size()}
            del t
            t = torch.load(path)
            out["by_path"] = {"mapped_after": mapped(path), "tensor_bytes": t.numel() * t.element_size()}
            del t
        finally:
            path.unlink(missing_ok=True)
        seen = out["through_a_file_object"]
        print(f"torch {torch.__version__}: a {size >> 20} MiB tensor through a file object: "
              f"readinto {seen['calls']['readinto']} calls, {seen['bytes']['readinto'] >> 20} MiB; read "
              f"{seen['calls']['read']} calls, {seen['bytes']['read'] >> 20} MiB; largest {seen['largest']} B; "
              f"mapped after: {seen['mapped_after']}; by path, mapped after: {out['by_path']['mapped_after']}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
