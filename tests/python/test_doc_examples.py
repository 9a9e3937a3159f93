"""The code in README.md and docs/*.md runs as written: a user copies it first.

Every fenced Python, C and C++ block is listed in BLOCKS, keyed by its file and its first line, with
how it runs:
  host       run in a directory holding the files it names (a Python block; a C/C++ fragment is
             wrapped in main() after its prelude, built with `accio config --cflags --libs`, run)
  offload    the same, beside libkernels.so built from docs/offload.md's kernel by the command in
             its first line
  fakegpu    a C fragment into device memory: run as host is, against the fake CUDA driver
             (tests/fake_cuda)
  gpu        a Python block that needs torch on a CUDA GPU (pytest -m gpu: run on the GPU machine)
  signature  an API listing (`accio.read(path, *, ...)`): compared with inspect.signature
  build      the offload kernel (built by the offload blocks)
  elsewhere  compiled by another test, named as the check: its file must hold the block's first line
A new block fails test_every_block_is_listed until it is given a kind here: the docs cannot grow an
example that no test runs."""
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import accio
from conftest import fake_cuda

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGS = {"python": "py", "c": "c", "cpp": "cpp", "c++": "cpp", "fortran": "f90"}
KERNEL = ("docs/offload.md", "/* kernels.c:  cc -shared -fPIC -fopenmp -o libkernels.so kernels.c */")

# (file, first line) -> (kind, prelude, check). A prelude is code put before the block, a check code
# put after it, in the same process (for a C/C++ fragment: inside main(), which returns 0 after the
# check).
BLOCKS = {
    ("README.md", "import accio, numpy as np"): (
        "host", "", "assert open('copy.bin', 'rb').read() == open('data.bin', 'rb').read()\n"
                    "assert n == len(arr) == os.path.getsize('data.bin')\n"),
    ("README.md", "#include <accio/accio.h>"): (
        "host", "static char buf[1 << 20]; size_t size = sizeof buf;", "if (n != (int64_t)size) return 2;"),
    ("README.md", "t = torch.empty(n, dtype=torch.uint8, device=\"cuda\")"): (
        "gpu", "import accio, torch\nn = os.path.getsize('weights.bin')\n",
        "assert bytes(t.cpu().numpy()) == open('weights.bin', 'rb').read()\n"
        "assert w.dtype == torch.bfloat16 and w.shape[0] == 4096 and w.is_cuda\n"),
    ("README.md", "from accio import offload"): ("offload", "", ""),
    ("docs/api.md", "accio.open(path, mode=\"r\", mechanism=None, **settings) -> accio.File   # context manager"): (
        "signature", "", ""),
    ("docs/api.md", "accio.read(path, *, device=None, framework=None, dtype=None, shape=None, out=None, **settings)"): (
        "signature", "", ""),
    ("docs/api.md", "accio.defaults.set(threads=8)                       # every file opened from now on, in every thread"): (
        "host", "import accio\n", "assert accio.defaults.current() == {}\nassert bytes(arr) == open('x.bin', 'rb').read()\n"),
    ("docs/api.md", "accio::Future fut = f.pread_async(buf, n, 0);"): (
        "host", "accio::File f(\"data.bin\", \"r\"); static char buf[4096]; size_t n = sizeof buf;\n"
                "struct { std::vector<int64_t> v; void push(int64_t r) { v.push_back(r); } } q;", ""),
    ("docs/gpu.md", "import accio, torch"): (
        "gpu", "n = os.path.getsize('weights.bin')\n",
        "assert bytes(t.cpu().numpy()) == open('weights.bin', 'rb').read()\n"),
    ("docs/gpu.md", "void* d;                                      /* or cudaMalloc: any device pointer works */"): (
        "fakegpu", "accio_file* f; size_t n = 1 << 20;\nif (accio_open(&f, \"weights.bin\", \"r\", NULL) < 0) return 1;",
        "if (accio_pread(f, d, n, 0) != (int64_t)n || accio_close(f) < 0) return 2;"),
    ("docs/offload.md", KERNEL[1]): ("build", "", ""),
    # A Fortran block is a whole program, built as the text above it says; its check is Python run after it.
    ("README.md", "use accio"): ("host", "", "assert os.path.getsize('checkpoint.bin') == 4096 * 4096 * 8\n"),
    ("docs/api.md", "use accio"): ("host", "", "assert os.path.getsize('checkpoint.bin') == 4096 * 4096 * 8\n"),
    ("docs/architecture.md", "// accio mechanism `chunked`: plain pread/pwrite, one call per `chunk_size` bytes."): (
        "elsewhere", "", "tests/cpp/test_example_mechanism.cpp"),  # and test_docs_worked_example_is_the_compiled_one
    ("docs/architecture.md", 'ACCIO_REGISTER_MECHANISM(MyMechanism, "threads", "task_size");'): (
        "elsewhere", "", "tests/cpp/test_example_mechanism.cpp"),
    ("docs/offload.md", "#include <accio/ve_offload.h>"): ("offload", "", "if (ret != 1000) return 2;"),
    ("docs/offload.md", "from accio import offload"): (
        "offload", "", "assert (x == 2 * np.arange(1000)).all()\n"),
    ("docs/safetensors.md", "from accio.safetensors.torch import load_file            # instead of safetensors.torch"): (
        "gpu", "import torch\nfrom accio.safetensors.torch import save_file\n"
               "save_file({'w': torch.arange(12.0).reshape(3, 4)}, 'model.safetensors')\n",
        "assert weights['w'].is_cuda and weights['w'].cpu().tolist()[2] == [8.0, 9.0, 10.0, 11.0]\n"),
}


def blocks():
    """[(file relative to ROOT, first line, language, text)] of every fenced code block in a language
    of LANGS."""
    out = []
    for doc in DOCS:
        for m in re.finditer(r"^```([\w+]+)\n(.*?)^```", doc.read_text(), re.S | re.M):
            if m.group(1) in LANGS:
                text = m.group(2)
                out.append((str(doc.relative_to(ROOT)), text.splitlines()[0], LANGS[m.group(1)], text))
    return out


ALL = blocks()


def _ids(b):
    return f"{b[0]}:{b[1][:40]}"


def test_every_block_is_listed():
    found = {(f, first) for f, first, _, _ in ALL}
    assert len(found) == len(ALL), "two blocks of one file begin with the same line: key them apart"
    assert not found - set(BLOCKS), f"blocks without a kind in BLOCKS: {sorted(found - set(BLOCKS))}"
    assert not set(BLOCKS) - found, f"BLOCKS names blocks the docs no longer have: {sorted(set(BLOCKS) - found)}"


def _files(d: Path):
    """The files the examples name, with random bytes."""
    rng = os.urandom
    (d / "data.bin").write_bytes(rng((1 << 20) + 5))
    (d / "x.bin").write_bytes(rng(3 << 20))
    (d / "weights.bin").write_bytes(rng(1 << 20))
    (d / "w.bin").write_bytes(rng(4096 * 2 * 64))  # bfloat16, shape (4096, 64)


def _kernel(d: Path):
    """Builds libkernels.so in d as docs/offload.md says (the command in the kernel block's first line)."""
    text = next(t for f, first, _, t in ALL if (f, first) == KERNEL)
    (d / "kernels.c").write_text(text)
    cmd = re.search(r"kernels\.c:\s+(.*?)\s*\*/", KERNEL[1]).group(1).split()
    if not shutil.which(cmd[0]):
        pytest.skip(f"no {cmd[0]}")
    subprocess.run(cmd, cwd=d, check=True)


def _run_python(d: Path, prelude: str, text: str, check: str) -> str:
    code = "import os\n" + prelude + text + check
    r = subprocess.run([sys.executable, "-c", code], cwd=d, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"the example failed:\n{code}\n{r.stdout}{r.stderr}"
    return r.stdout


def _config(*args) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "accio.cli", "config", *args], capture_output=True, text=True, check=True)
    return r.stdout.split()


def _run_fragment(d: Path, lang: str, prelude: str, text: str, check: str, offload: bool, env: dict):
    """A C/C++ fragment: its #include lines at the top, the rest in main() between the prelude and
    the check."""
    compiler = shutil.which("cc" if lang == "c" else "c++")
    if not compiler:
        pytest.skip("no compiler")
    lines = text.splitlines()
    includes = [ln for ln in lines if ln.startswith("#include")]
    body = [ln for ln in lines if not ln.startswith("#include")]
    std = ["#include <stdio.h>", "#include <stdint.h>"] + (["#include <vector>", "#include <accio/accio.hpp>"]
                                                           if lang == "cpp" else ["#include <accio/accio.h>"])
    src = d / f"example.{lang}"
    src.write_text("\n".join(std + includes) + "\nint main(void) {\n" + prelude + "\n" + "\n".join(body) + "\n"
                   + check + "\nreturn 0;\n}\n")
    flags = _config("--cflags", "--libs", *(["--offload"] if offload else []))
    subprocess.run([compiler, "-Wall", "-Werror", "-Wno-unused-variable", "-Wno-unused-result", str(src),
                    "-o", str(d / "example"), *flags], check=True)
    env = {**{k: v for k, v in os.environ.items() if k not in ("ACCIO_OFFLOAD_WORKER", "VEORUN_BIN")}, **env}
    r = subprocess.run([str(d / "example")], cwd=d, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and not r.stderr, f"{src.read_text()}\n{r.stdout}{r.stderr}"


def _run_fortran(d: Path, text: str, check: str):
    """A Fortran block: the whole program as written (the README's example lacked its `end`, and
    gfortran refused it), built with the module source `accio config --fortran` names."""
    compiler = shutil.which("gfortran")
    if not compiler:
        pytest.skip("no gfortran")
    (d / "app.f90").write_text(text)
    subprocess.run([compiler, "-std=f2018", "-Wall", "-Werror", "-J", str(d), *_config("--fortran"), str(d / "app.f90"),
                    "-o", str(d / "example"), *_config("--libs")], check=True, cwd=d)
    r = subprocess.run([str(d / "example")], cwd=d, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and not r.stderr, f"{text}\n{r.stdout}{r.stderr}"
    _run_python(d, "", "", check)


def _example(b, tmp_path, env=None):
    f, first, lang, text = b
    kind, prelude, check = BLOCKS[(f, first)]
    _files(tmp_path)
    if kind == "offload":
        _kernel(tmp_path)
    if lang == "py":
        return _run_python(tmp_path, prelude, text, check)
    if lang == "f90":
        return _run_fortran(tmp_path, text, check)
    return _run_fragment(tmp_path, lang, prelude, text, check, offload=kind == "offload", env=env or {})


@pytest.mark.parametrize("b", [b for b in ALL if BLOCKS.get((b[0], b[1]), ("",))[0] in ("host", "offload", "fakegpu")],
                         ids=_ids)
def test_example_runs(b, tmp_path, tmp_path_factory):
    fake = BLOCKS[(b[0], b[1])][0] == "fakegpu"
    out = _example(b, tmp_path, {"ACCIO_LIBCUDA": fake_cuda(tmp_path_factory)} if fake else None)
    if "# 42" in b[3]:  # the README's offload call prints what its comment says
        assert out.strip() == "42", out


@pytest.mark.gpu
@pytest.mark.parametrize("b", [b for b in ALL if BLOCKS.get((b[0], b[1]), ("",))[0] == "gpu"], ids=_ids)
def test_gpu_example_runs(b, tmp_path):
    ok, why = accio.cuda_available()
    if not ok:
        pytest.skip(why)
    pytest.importorskip("torch")
    _example(b, tmp_path)


@pytest.mark.parametrize("b", [b for b in ALL if BLOCKS.get((b[0], b[1]), ("",))[0] == "elsewhere"], ids=_ids)
def test_examples_compiled_elsewhere_are_there(b):
    """The test named compiles the block: its first line is there, or for a template line such as
    `ACCIO_REGISTER_MECHANISM(MyMechanism, "threads", "task_size");` a call of that shape (a class,
    then quoted setting names)."""
    where = (ROOT / BLOCKS[(b[0], b[1])][2]).read_text()
    first = b[1]
    template = re.fullmatch(r'(\w+)\(\w+(?:, "\w+")*\);', first)
    if template:
        assert re.search(template.group(1) + r'\(\w+(?:, "\w+")*\);', where), f"no call like {first}"
    else:
        assert first in where, f"{first} is not in {BLOCKS[(b[0], b[1])][2]}"


def _documented_signature(line: str):
    """('accio.read', [(name, kind, default text)]) of a listing line such as
    `accio.read(path, *, device=None, **settings) -> int   # comment`."""
    m = re.match(r"(accio(?:\.\w+)+)\((.*)\)", line.split("#")[0].split("->")[0].strip())
    params, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    for p in (p.strip() for p in m.group(2).split(",")):
        if p == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
        elif p.startswith("**"):
            params.append((p[2:], inspect.Parameter.VAR_KEYWORD, None))
        else:
            name, _, default = p.partition("=")
            params.append((name, kind, default or None))
    return m.group(1), params


@pytest.mark.parametrize("line", [ln for f, first, lang, t in ALL if BLOCKS.get((f, first), ("",))[0] == "signature"
                                  for ln in t.splitlines() if ln.strip()], ids=lambda ln: ln.split("(")[0])
def test_documented_signatures_are_the_real_ones(line):
    name, documented = _documented_signature(line)
    obj = accio
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    real = [(p.name, p.kind, None if p.default is inspect.Parameter.empty else repr(p.default))
            for p in inspect.signature(obj).parameters.values()]
    real = [(n, k, d.replace("'", '"') if d else d) for n, k, d in real]
    assert documented == real, f"{line}\nreal: {inspect.signature(obj)}"


SUBCOMMANDS = ("info", "config", "bench", "tune", "run", "offload-bench")
BENCH_SUBS = ("compare", "report", "safetensors")


def documented_invocations():
    """{(command words, option)} for every option the docs show on an `accio` command line: shell
    blocks, inline code and the README's command table (what follows a lone `--` is the program's)."""
    found = set()
    for doc in DOCS:
        text = doc.read_text().replace("\\|", " ")
        for m in re.finditer(r"(?<![\w/.-])accio (%s)\b([^`\n)#;&|]*)" % "|".join(SUBCOMMANDS), text):
            words, rest = [m.group(1)], m.group(2).split(" -- ")[0]
            first = rest.split()[:1]
            if words == ["bench"] and first and first[0] in BENCH_SUBS:
                words.append(first[0])
            for opt in re.findall(r"(?:^|(?<=[\s\[(]))(--?[A-Za-z][\w-]*)", rest):
                found.add((" ".join(words), opt, str(doc.relative_to(ROOT))))
    return found


def test_documented_cli_options_exist():
    """Every option the docs give a subcommand is in that subcommand's --help."""
    helps, missing = {}, []
    for words, opt, doc in sorted(documented_invocations()):
        if words not in helps:
            r = subprocess.run([sys.executable, "-m", "accio.cli", *words.split(), "--help"], capture_output=True,
                               text=True)
            assert r.returncode == 0, r.stderr
            helps[words] = set(re.findall(r"(?:^|(?<=[\s\[,(]))(--?[A-Za-z][\w-]*)", r.stdout))
        if opt not in helps[words]:
            missing.append(f"{doc}: accio {words} {opt}")
    assert len(helps) >= 6, helps.keys()  # the scan found the commands
    assert not missing, "options the docs show that the command does not have:\n" + "\n".join(missing)


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped (letters, digits,
    '_', '-' and spaces kept), spaces made '-'."""
    text = re.sub(r"<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6} (.*)", line)
        if m:
            s = _slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")  # GitHub numbers a repeated heading's anchor
    return out


def test_every_link_between_the_docs_reaches_its_file_and_heading():
    """Links from README.md and docs/*.md to files of the tree, and the #anchors in them, exist. A
    performance.md heading ends in its results path, which GitHub puts in the anchor: six links
    had left it out and led to the top of the page (docs audit, session 27)."""
    bad = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                bad.append(f"{doc.name}: {target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{doc.name}: {target}: no heading with that anchor in {dest.name}")
    assert not bad, "\n".join(bad)
