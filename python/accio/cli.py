"""The `accio` command: info, config, bench, tune, run. `accio COMMAND --help` describes each.

This is the Python CLI, installed as accio-py (and `python -m accio`); the `accio` on PATH is native
(src/preload/front.c): it runs `accio run` itself and execs accio-py, unchanged, for the rest.

Exit statuses (accio._usage, docs/api.md): 2 called wrongly, 1 ran and failed, 141 quietly when
stdout's reader went away (`| head`); `accio run` returns the program's status, 126/127 when it
cannot be run or found, 125 for accio's own errors.
"""
from __future__ import annotations

import sys

from . import __version__
from ._usage import FAILURE, USAGE, UsageError, describe, reader_gone, report, stdout_reader_gone


def _cmd_info(args) -> int:
    from . import info
    import json
    import os
    try:  # a path that does not exist is an error (1), not facts about nothing
        os.stat(args.path)
    except OSError as e:
        raise type(e)(e.errno, e.strerror, f"stat {args.path}") from None
    data = info.gather(args.path)
    print(json.dumps(data, indent=2) if args.json else info.render(data))
    errors = info.setting_errors(data)  # shown in their rows too; said again where a script sees it
    for e in errors:
        print(f"accio info: {e}; correct the variable or unset it", file=sys.stderr)
    for w in info.unknown_variables(data):  # a warning: a newer accio may read it
        print(f"accio info: warning: {w}", file=sys.stderr)
    return FAILURE if errors else 0


def _pkg_dir():
    from pathlib import Path
    from .run import package_dir  # the compiled parts' folder (not the sources' in an editable install)
    return Path(package_dir())


def _cmd_config(args) -> int:
    inc, lib = _pkg_dir() / "include", _pkg_dir() / "lib"
    out = []
    if args.fortran:  # first: a source before the libraries (the linker's --as-needed reads in order)
        out.append(str(inc / "accio" / "accio.f90"))
    if args.cflags:
        # --offload: include/accio too, where AVEO's <ve_offload.h>, <veo_hmem.h> and <veo_ve.h> are
        out.append(f"-I{inc}" + (f" -I{inc / 'accio'}" if args.offload else ""))
    if args.libs:
        # --offload: libaccio_offload (the VEO API, accio/ve_offload.h), which uses libaccio itself
        out.append(f"-L{lib} -Wl,-rpath,{lib} " + ("-laccio_offload -laccio" if args.offload else "-laccio"))
    if args.cmake:
        out.append(str(lib / "cmake" / "accio"))
    if args.pkgconfig:
        out.append(str(lib / "pkgconfig"))
    if args.prefix:
        out.append(str(_pkg_dir()))
    if not out:
        raise UsageError("give at least one of --cflags --libs --cmake --pkgconfig --prefix --fortran")
    if args.offload and not (args.libs or args.cflags):
        raise UsageError("--offload goes with --cflags or --libs")
    print(" ".join(out))
    return 0


def _cmd_bench(args) -> int:
    from . import bench
    return bench.main(args)


def _cmd_tune(args) -> int:
    from . import tune
    return tune.main(args)


def _cmd_offload_bench(args) -> int:
    from . import offload_bench
    return offload_bench.main(args)


def build_parser():
    import argparse
    from ._parser import Parser
    p = Parser(prog="accio", description="Move file data between storage and memory "
                                "as fast as the machine allows, and measure which way is fastest.")
    p.add_argument("--version", action="version", version=f"accio {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("info", help="describe this machine's I/O facilities and accio's defaults",
                       description="Kernel, CPUs, memory, io_uring, huge pages, RLIMIT_MEMLOCK, the filesystem "
                       "of PATH and its O_DIRECT support, page-cache residency queries, GPUs, mechanisms, "
                       "and the default settings.")
    s.add_argument("path", nargs="?", default=".", help="file or directory whose filesystem to describe (default .)")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    s.set_defaults(func=_cmd_info)

    s = sub.add_parser("config", help="print compiler and linker flags for the installed library",
                       description="Flags to build C, C++ or Fortran programs against this installation, "
                       "e.g.  cc prog.c $(accio config --cflags --libs)  or  "
                       "gfortran $(accio config --fortran) prog.f90 $(accio config --libs)  (several programs: "
                       "gfortran -c $(accio config --fortran) once, then link accio.o)")
    s.add_argument("--cflags", action="store_true", help="include flags")
    s.add_argument("--libs", action="store_true", help="linker flags (with rpath)")
    s.add_argument("--offload", action="store_true",
                   help="with --libs: link the VEO offload library too (-laccio_offload; accio/ve_offload.h); "
                   "with --cflags: AVEO's header names too (<ve_offload.h>, <veo_hmem.h>, <veo_ve.h>); "
                   "its pkg-config name is accio-offload, its CMake target accio::offload")
    s.add_argument("--cmake", action="store_true", help="directory for CMake's accio_DIR")
    s.add_argument("--pkgconfig", action="store_true", help="directory for PKG_CONFIG_PATH")
    s.add_argument("--prefix", action="store_true", help="installation prefix")
    s.add_argument("--fortran", action="store_true",
                   help="the Fortran module's source (module accio: the C API through iso_c_binding), to "
                   "compile once, before the files that `use accio`")
    s.set_defaults(func=_cmd_config)

    from .bench import add_arguments
    s = sub.add_parser("bench", help="measure every mechanism (IOzone/IOR methodology), tables, JSON, plots",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  accio bench --preset quick --report report.html\n"
                       "  accio bench -T write+sync,cold-read -s 1g -r 1m,16m -t 1,2 --json out.json\n"
                       "  mpirun -np 4 accio bench --preset ior --layout fpp,shared\n"
                       "  accio bench -T random-read -r 4k -Q 1,4,16 --runtime 10s --json qd.json\n"
                       "  accio bench compare A.json B.json   (ratios of two runs; descriptive: no verdict)\n"
                       "  accio bench report run.json -o run.html   (redraw the report of a run)\n"
                       "  accio bench safetensors model.safetensors --device cuda:0 --json st.json"
                       "   (checkpoint loading vs safetensors, fastsafetensors; --help for its options)")
    add_arguments(s)
    s.set_defaults(func=_cmd_bench)

    from .tune import add_arguments as tune_arguments
    s = sub.add_parser("tune", help="profile a filesystem so that the auto mechanism picks the fastest plan",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Measures the mechanisms over request size, cache state, threads and "
                       "read/write on the filesystem holding PATH, within a time budget, and stores the "
                       "decisions as a profile that `auto` uses for every file on that filesystem.",
                       epilog="examples:\n  accio tune /scratch            # about 2 minutes\n"
                       "  accio tune /scratch --show\n"
                       "  accio tune /scratch --evaluate --json eval.json")
    tune_arguments(s)
    s.set_defaults(func=_cmd_tune)

    _add_run_parser(sub)

    from .offload_bench import add_arguments as offload_bench_arguments
    s = sub.add_parser("offload-bench", help="call latency and transfer speed of the offload runtime (AVEO's tests)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="AVEO's latency tests for N = 1..100000 (1: submit N, wait N; 2: submit "
                       "and wait, N times; 3: submit N, wait for the last; 4: N synchronous calls), 1-byte "
                       "transfer latency and transfer bandwidth, over shared memory (spin then sleep, and "
                       "pure spinning) and over a socket transport, with the ratio.",
                       epilog="examples:\n  accio offload-bench --quick\n"
                       "  accio offload-bench --json results/offload/offload_bench.json")
    offload_bench_arguments(s)
    s.set_defaults(func=_cmd_offload_bench)
    return p


def _add_run_parser(sub) -> None:
    """`run` in `accio --help`, its options from the launcher's table; main() hands `accio run ...`
    to the native launcher unread (`accio run --help` is the launcher's own)."""
    from .run import usage_line
    sub.add_parser("run", help=f"run an unmodified program with accelerated read/write (LD_PRELOAD): {usage_line()}")


class _ClosedStdout:
    """sys.stdout for a process started with descriptor 1 closed (`accio info >&-`): what is written
    there is counted and dropped, so the command does its work (bench --json FILE writes its file);
    main then says that output was lost and exits 1, as coreutils report a write error. A command
    that writes nothing there (accio run, its --stats-json report) is not affected."""

    def __init__(self) -> None:
        self.lost = 0

    def write(self, text: str) -> int:
        self.lost += len(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class _NamedStdout:
    """sys.stdout for the CLI, where an OSError writing or flushing it names stdout: `accio info
    >/dev/full` said `accio info: no space left on device`, as if of the path it describes."""

    def __init__(self, f) -> None:
        self._f = f

    def write(self, text: str) -> int:
        try:
            return self._f.write(text)
        except OSError as e:
            raise _on_stdout(e) from None

    def flush(self) -> None:
        try:
            self._f.flush()
        except OSError as e:
            raise _on_stdout(e) from None

    def __getattr__(self, name):
        return getattr(self._f, name)


def _on_stdout(e: OSError) -> OSError:
    return e if e.filename == "stdout" else type(e)(e.errno, e.strerror, "stdout")


def main(argv: list[str] | None = None) -> int:
    """Every command, with one rule for a reader of stdout that went away (`accio tune DIR --show |
    head -5`): no message, exit 141, whichever command was writing (_guarded lets it through); and
    one for a stdout that fails otherwise (full, closed, an I/O error): one line, exit 1."""
    saved = sys.stdout
    sys.stdout = _ClosedStdout() if saved is None else _NamedStdout(saved)  # None: started with it closed
    try:
        try:
            status = _main(argv)
        finally:  # on return and on argparse's SystemExit: a reader gone is found here, not at exit
            sys.stdout.flush()
        if isinstance(sys.stdout, _ClosedStdout) and sys.stdout.lost:
            report("", f"stdout is closed: {sys.stdout.lost} characters of output were lost (write error: Bad "
                   "file descriptor)")
            return status or FAILURE
        return status
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        return reader_gone()
    except OSError as e:  # --help to a full disk, or a command's output flushed at the end
        if e.filename != "stdout":
            raise
        report("", f"write error on {describe(e)}")
        reader_gone()  # the unwritten rest must not fail again at the interpreter's exit
        return FAILURE
    finally:
        sys.stdout = saved


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from ._log import plain_stderr
    plain_stderr()
    if argv[:1] == ["bench"] and argv[1:2]:
        from .bench import SUBCOMMANDS, subcommand  # accio bench compare|report|safetensors: their own parsers
        if argv[1] == "run":  # accio bench run ... is accio bench ...
            argv = ["bench", *argv[2:]]
        elif argv[1] in SUBCOMMANDS:
            return _guarded(f"bench {argv[1]}", subcommand(argv[1]), argv[2:])
    if argv[:1] == ["run"]:  # the native launcher parses run's options (one table: run_cli.h)
        from . import run
        return run.launch(argv[1:])
    if argv[:1] == ["--run-report"]:  # the launcher's, after a --stats run (launcher.c): not for people
        from . import run
        return run.report_main(argv)
    parser = build_parser()
    from .bench import SUBCOMMANDS  # imported by build_parser already
    if argv[:1] and argv[0] in SUBCOMMANDS:  # `accio compare a.json b.json` (`accio run` is handled above)
        parser.error(f"'{argv[0]}' is a sub-command of bench: accio bench {' '.join(argv)}")
    args, extra = parser.parse_known_args(argv)
    if extra:  # a sub-command's unknown option or extra argument: said with that sub-command's usage
        import argparse
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = getattr(args, "command", None)
        after = command in argv and all(x not in argv[:argv.index(command)] for x in extra)
        owner = subs.choices[command] if after else parser  # `accio --bogus info`: the top level's
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):  # `accio` alone: a usage error, so its help goes to stderr
        parser.print_help(sys.stderr)
        return USAGE
    return _guarded(args.command, args.func, args)


def _guarded(command: str, func, args) -> int:
    """Runs a sub-command: UsageError is exit 2, OSError, RuntimeError and a malformed input file (it
    ran and failed) 1, each as one line `accio COMMAND: sentence`. (`accio run` is the native
    launcher's: 125/126/127.)"""
    try:
        return func(args)
    except UsageError as e:
        report(command, str(e))
        return USAGE
    except MemoryError as e:  # a size the machine cannot hold, found past the checks: one line, not a traceback
        report(command, f"out of memory{': ' + str(e) if str(e) else ''}; give smaller sizes")
        return FAILURE
    except (OSError, RuntimeError) as e:
        if isinstance(e, BrokenPipeError) and stdout_reader_gone() or getattr(e, "filename", None) == "stdout":
            raise  # main() exits quietly (the reader went away) or says it once (a failed write)
        text = describe(e)
        if "read environment: ACCIO_" in text:  # the engine refused an ACCIO_* variable: say what to do
            text += "; correct the variable or unset it (`accio info` shows every setting)"
        report(command, text)
        return FAILURE
    except ValueError as e:  # a malformed input file found while running: one line; other ValueErrors are bugs
        import json
        from .safetensors._format import HeaderError
        if not isinstance(e, (HeaderError, UnicodeError, json.JSONDecodeError)):
            raise
        report(command, str(e))
        return FAILURE
    except KeyboardInterrupt as e:
        from ._system import interrupted_status
        return interrupted_status(e)


if __name__ == "__main__":
    sys.exit(main())
