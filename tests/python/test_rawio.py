"""accio.RawFile against io.FileIO, side by side: the same operations on two copies of a file, the
same results, positions, errors and resulting bytes (issue 21: accio under open()-style code)."""
from __future__ import annotations

import errno
import io
import os

import pytest

import accio

MODES = ["r", "rb", "w", "wb", "a", "ab", "r+", "r+b", "rb+", "w+", "wb+", "a+", "ab+"]
FILEIO_MODE = {"r": "r", "w": "w", "a": "a", "r+": "r+", "w+": "w+", "a+": "a+"}


def pair(tmp_path, mode, content=b""):
    """(FileIO, RawFile) on two files with the same content, opened in mode."""
    paths = []
    for name in ("fileio", "accio"):
        p = tmp_path / name
        p.write_bytes(content)
        paths.append(p)
    plain = mode.replace("b", "")
    return io.FileIO(paths[0], FILEIO_MODE[plain]), accio.RawFile(paths[1], mode, mechanism="posix"), paths


def outcome(fn):
    """What a call gives: ('ok', value) or ('raises', type, errno)."""
    try:
        v = fn()
    except Exception as e:  # noqa: BLE001 - the point is to compare whatever happens
        return ("raises", type(e).__name__ if not isinstance(e, io.UnsupportedOperation) else "Unsupported",
                getattr(e, "errno", None))
    return ("ok", bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else v)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_gives_fileios_answers(tmp_path, mode):
    content = bytes(range(256)) * 40
    ref, raw, paths = pair(tmp_path, mode, content)
    with ref, raw:
        assert raw.mode == ref.mode
        for q in ("readable", "writable", "seekable", "isatty", "tell"):
            assert outcome(getattr(raw, q)) == outcome(getattr(ref, q)), q
        steps = [
            lambda f: f.read(10), lambda f: f.write(b"hello"), lambda f: f.tell(), lambda f: f.seek(3),
            lambda f: f.read(4), lambda f: f.seek(-2, os.SEEK_CUR), lambda f: f.write(bytearray(b"XY")),
            lambda f: f.tell(), lambda f: f.seek(-7, os.SEEK_END), lambda f: f.read(), lambda f: f.read(),
            lambda f: f.seek(100000), lambda f: f.read(5), lambda f: f.write(memoryview(b"far")),
            lambda f: f.tell(), lambda f: f.seek(-1), lambda f: f.tell(), lambda f: f.seek(0),
            lambda f: f.readall(), lambda f: f.truncate(50), lambda f: f.tell(), lambda f: f.seek(0, os.SEEK_END),
            lambda f: f.truncate(), lambda f: f.seek(0), lambda f: f.read(1 << 20),
        ]
        for i, step in enumerate(steps):
            assert outcome(lambda: step(raw)) == outcome(lambda: step(ref)), f"step {i} in mode {mode}"
    assert paths[1].read_bytes() == paths[0].read_bytes()


def test_readinto_fills_any_writable_buffer_and_stops_at_eof(tmp_path):
    ref, raw, _ = pair(tmp_path, "rb", os.urandom(1000))
    with ref, raw:
        for size in (0, 1, 300, 4096):
            a, b = bytearray(size), bytearray(size)
            assert raw.readinto(a) == ref.readinto(b)
            assert a == b
        a = memoryview(bytearray(64)).cast("I")  # items of 4 bytes: a count of bytes, as FileIO
        assert raw.readinto(a) == 0 == ref.readinto(memoryview(bytearray(64)).cast("I"))


def test_closed_file_raises_valueerror_everywhere_and_close_is_idempotent(tmp_path):
    ref, raw, _ = pair(tmp_path, "r+b", b"abc")
    ref.close()
    raw.close()
    raw.close()
    assert raw.closed and ref.closed
    for op in (lambda f: f.read(1), lambda f: f.write(b"x"), lambda f: f.seek(0), lambda f: f.tell(),
               lambda f: f.fileno(), lambda f: f.readinto(bytearray(1)), lambda f: f.readall(),
               lambda f: f.truncate(0), lambda f: f.readable()):
        assert outcome(lambda: op(raw)) == outcome(lambda: op(ref)) == ("raises", "ValueError", None)


def test_bad_modes_are_refused_with_a_clear_error(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x")
    for mode in ("", "rw+", "r++", "xr", "xa", "rt", "q"):
        with pytest.raises(ValueError, match="invalid mode"):
            accio.RawFile(p, mode)
    with pytest.raises(FileNotFoundError):
        accio.RawFile(tmp_path / "missing")


@pytest.mark.parametrize("mode", ["x", "xb", "bx", "x+", "xb+", "+bx"])
def test_exclusive_create_as_fileio(tmp_path, mode):
    """x and x+: a new file, FileExistsError where the path exists (a dangling symlink too), the file
    there untouched. accio refused them (audit s26: a checkpoint writer that must not replace an
    earlier one used FileIO)."""
    made = {}
    for name, cls in (("fileio", io.FileIO), ("accio", accio.RawFile)):
        p = tmp_path / name
        with cls(p, mode) as f:
            made[name] = (f.mode, f.readable(), f.writable(), outcome(lambda: f.write(b"abc")), outcome(lambda: f.seek(0)),
                          outcome(lambda: f.read(2)))
        assert p.read_bytes() == b"abc"
        with pytest.raises(FileExistsError):
            cls(p, mode)
        assert p.read_bytes() == b"abc"
        link = tmp_path / (name + ".link")
        link.symlink_to(tmp_path / (name + ".target"))
        with pytest.raises(FileExistsError):
            cls(link, mode)
        assert not (tmp_path / (name + ".target")).exists()
    assert made["accio"] == made["fileio"]


def test_fileios_mode_spellings_whence_seek_read_and_closefd(tmp_path):
    """Where RawFile differed from FileIO (audit s26 #15): 'br' and 'b+r' refused, seek(1.5) an
    AttributeError, seek(0, 5) a ValueError (FileIO: lseek's OSError EINVAL), read(None) a
    TypeError, closefd=True an unknown setting."""
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    for mode in ("br", "rbb", "b+r", "+rb", "bw", "ba+"):
        with io.FileIO(p, mode) as ref, accio.RawFile(p, mode) as raw:
            assert raw.mode == ref.mode, mode
        p.write_bytes(b"0123456789")
    ref, raw, _ = pair(tmp_path, "rb", b"0123456789")
    with ref, raw:
        for step in (lambda f: f.seek(1.5), lambda f: f.seek(0, 1.5), lambda f: f.seek(0, 5), lambda f: f.seek(0, -1),
                     lambda f: f.tell(), lambda f: f.seek(2), lambda f: f.read(None), lambda f: f.read(None),
                     lambda f: f.seek(1), lambda f: f.truncate(1.5)):
            assert outcome(lambda: step(raw)) == outcome(lambda: step(ref))
        with pytest.raises(OSError) as e:
            raw.seek(0, 7)
        assert e.value.errno == errno.EINVAL and raw.tell() == 1
    with accio.RawFile(p, "rb", closefd=True) as raw, io.FileIO(p, "rb", closefd=True) as ref:
        assert raw.read() == ref.read()
    for cls in (io.FileIO, accio.RawFile):
        with pytest.raises(ValueError, match="Cannot use closefd=False with file name"):
            cls(p, "rb", closefd=False)


def test_negative_seek_is_einval_and_keeps_the_position(tmp_path):
    ref, raw, _ = pair(tmp_path, "rb", b"0123456789")
    with ref, raw:
        raw.seek(4), ref.seek(4)
        for f in (raw, ref):
            with pytest.raises(OSError) as e:
                f.seek(-5, os.SEEK_CUR)
            assert e.value.errno == errno.EINVAL
        assert raw.tell() == ref.tell() == 4


def test_seek_beyond_the_largest_offset_and_seek_data_hole_as_fileio(tmp_path):
    """seek(2**63) was accepted and the next read raised nanobind's TypeError; SEEK_DATA/SEEK_HOLE
    were refused as an invalid whence. Now as FileIO: OverflowError, and the kernel's answer."""
    ref, raw, _ = pair(tmp_path, "rb", b"0123456789")
    with ref, raw:
        for f in (raw, ref):
            with pytest.raises(OverflowError):
                f.seek(2**63)
        # FileIO asks lseek, which refuses offsets past the filesystem's largest file (EINVAL);
        # RawFile keeps its position: the read there is the OSError EINVAL, not a TypeError
        assert raw.seek(2**63 - 1) == 2**63 - 1
        with pytest.raises(OSError) as e:
            raw.read(1)
        assert e.value.errno == errno.EINVAL
        if hasattr(os, "SEEK_DATA"):
            assert raw.seek(3, os.SEEK_DATA) == ref.seek(3, os.SEEK_DATA) == 3
            assert raw.seek(0, os.SEEK_HOLE) == ref.seek(0, os.SEEK_HOLE) == 10
            for f in (raw, ref):
                with pytest.raises(OSError) as e:
                    f.seek(11, os.SEEK_DATA)
                assert e.value.errno == errno.ENXIO


def test_buffered_reader_writer_and_textiowrapper_run_on_top(tmp_path):
    lines = [f"line {i}: {'x' * (i % 97)}\n" for i in range(5000)]
    p = tmp_path / "text"
    with io.TextIOWrapper(io.BufferedWriter(accio.RawFile(p, "wb")), encoding="utf-8") as t:
        t.writelines(lines)
    assert p.read_text() == "".join(lines)
    with io.BufferedReader(accio.RawFile(p, "rb"), buffer_size=1 << 16) as r:
        assert r.readline().decode() == lines[0]
        r.seek(-len(lines[-1]), os.SEEK_END)
        assert r.read().decode() == lines[-1]
    with io.TextIOWrapper(io.BufferedReader(accio.RawFile(p)), encoding="utf-8") as t:
        assert t.readlines() == lines
    with io.BufferedRandom(accio.RawFile(p, "r+b")) as r:
        r.seek(5)
        r.write(b"#")
        r.flush()
    assert p.read_bytes()[:7] == b"line #:"


def test_append_mode_writes_at_the_end_whatever_the_position(tmp_path):
    ref, raw, paths = pair(tmp_path, "ab+", b"start")
    with ref, raw:
        for f in (ref, raw):
            f.seek(0)
            assert f.write(b"-end") == 4
            assert f.tell() == 9
            f.seek(0)
            assert f.read() == b"start-end"
    assert paths[0].read_bytes() == paths[1].read_bytes() == b"start-end"


@pytest.mark.parametrize("mode", ["ab", "ab+"])
def test_append_mode_after_a_truncate_writes_at_the_new_end(tmp_path, mode):
    # audit session 20 (M3): RawFile wrote NUL bytes up to the size at open before its data
    ref, raw, paths = pair(tmp_path, mode, b"0123456789")
    with ref, raw:
        for f in (ref, raw):
            assert f.truncate(0) == 0
            assert f.write(b"hi") == 2
            assert f.tell() == 2
            assert f.truncate(1) == 1
            assert f.write(b"!") == 1
            assert f.tell() == 2
    assert paths[0].read_bytes() == paths[1].read_bytes() == b"h!"


@pytest.mark.parametrize("mechanism", ["posix", "parallel", "direct", "uring", "auto"])
def test_append_mode_keeps_other_writers_bytes(tmp_path, mechanism):
    # Two append-mode files on one path and a third writer with O_APPEND, in turn: as FileIO, every
    # write lands at the end and none is overwritten.
    results = []
    for opener in (lambda p: io.FileIO(p, "a"), lambda p: accio.RawFile(p, "ab", mechanism=mechanism)):
        p = tmp_path / f"log{len(results)}"
        p.write_bytes(b"0123456789")
        a, b = opener(p), opener(p)
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        with a, b:
            a.write(b"AA")
            b.write(b"BB")
            os.write(fd, b"XY")
            a.write(b"C")
            assert (a.tell(), b.tell()) == (17, 14)
        os.close(fd)
        results.append(p.read_bytes())
    assert results[0] == results[1] == b"0123456789AABBXYC"


def test_fileno_is_the_files_descriptor_and_the_position_is_the_rawfiles_own(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")
    with accio.RawFile(p, "rb") as f:
        st = os.fstat(f.fileno())
        assert (st.st_ino, st.st_size) == (os.stat(p).st_ino, 10)
        assert os.read(f.fileno(), 3) == b"012"  # the descriptor's offset...
        assert f.read(2) == b"01"                # ...is not the RawFile's
