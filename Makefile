# accio: `make demo` (set up, build, install, run the main job) and `make test` (build, run every test).
# Both install what they need: Debian packages when run as root and missing, PyPI packages into .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
JOBS ?= $(shell nproc)
BUILD := build
# CI=true (set by CI) also runs the C++ tests under ASan+UBSan and TSan, and with the C++ runtime
# linked statically (cpp-test-static-runtime).
SANITIZERS ?= $(if $(filter true 1 yes,$(CI)),1,0)
APT_PACKAGES := g++ gfortran cmake ninja-build pkg-config liburing-dev libgtest-dev fio python3-venv python3-dev openmpi-bin libopenmpi-dev \
	sqlite3 git libffi-dev $(if $(filter x86_64,$(shell uname -m)),libc6-i386)
PY_PACKAGES := "scikit-build-core>=0.10" "nanobind>=2.10.1" "numpy>=1.22" "tqdm>=4.60" "matplotlib>=3.5" \
	"pytest>=7" pytest-timeout "jsonschema>=4" "mpi4py>=3.1" "safetensors==0.8.0" "ml_dtypes>=0.5" "hypothesis>=6.80" "mypy>=1.8,<3"
DEMO := $(BUILD)/demo

.PHONY: demo test deps venv install cpp-test cpp-test-asan cpp-test-tsan cpp-test-static-runtime py-test bench clean \
	gpu-check gpu-deps wheel

demo: install
	$(VENV)/bin/accio info
	mkdir -p $(DEMO)
	$(VENV)/bin/accio bench --preset quick --json $(DEMO)/quick.json --report $(DEMO)/report.html

test: install cpp-test py-test
ifeq ($(SANITIZERS),1)
test: cpp-test-asan cpp-test-tsan cpp-test-static-runtime
endif

deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing:$$missing"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "make: missing Debian packages:$$missing" >&2; \
	    echo "  install them first (sudo apt-get install$$missing), or run make as root, which installs them" >&2; exit 1; fi; \
	fi

$(VENV)/.ready: pyproject.toml Makefile | deps
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(PY_PACKAGES)
	touch $@

venv: $(VENV)/.ready

install: venv
	$(PIP) install -q --no-build-isolation .

# $(1) build dir, $(2) extra CMake flags; $(,) is a literal comma inside $(call ...)
, := ,
define cpp_build
	cmake -S . -B $(1) -G Ninja -DACCIO_BUILD_TESTS=ON -DACCIO_WERROR=ON $(2) >/dev/null
	cmake --build $(1) -j $(JOBS)
endef

cpp-test: deps
	$(call cpp_build,$(BUILD)/test,)
	ctest --test-dir $(BUILD)/test --output-on-failure -j $(JOBS)

cpp-test-asan: deps
	$(call cpp_build,$(BUILD)/asan,-DACCIO_SANITIZE=address$(,)undefined -DCMAKE_BUILD_TYPE=Debug)
	ASAN_OPTIONS=detect_leaks=1 ACCIO_TEST_OPS=60 ctest --test-dir $(BUILD)/asan --output-on-failure -j $(JOBS)

cpp-test-tsan: deps
	$(call cpp_build,$(BUILD)/tsan,-DACCIO_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo)
	TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" ACCIO_TEST_OPS=40 ctest --test-dir $(BUILD)/tsan --output-on-failure -j $(JOBS)

# Every test, the exports check (ctest -L exports) and the fake-GPU tests through libaccio.so among
# them, in the configuration that crashed on a GPU machine (issue 17): libstdc++ and libgcc linked
# statically into every library and program, as some compilers do by default.
STATIC_RUNTIME := -static-libstdc++ -static-libgcc
STATIC_RUNTIME_FLAGS := $(foreach k,SHARED MODULE EXE,"-DCMAKE_$(k)_LINKER_FLAGS=$(STATIC_RUNTIME)")
cpp-test-static-runtime: deps
	$(call cpp_build,$(BUILD)/static-runtime,$(STATIC_RUNTIME_FLAGS))
	ctest --test-dir $(BUILD)/static-runtime --output-on-failure -j $(JOBS)

py-test: install
	$(PY) -m pytest -q tests/python

bench: install
	$(PY) benchmarks/engine_vs_fio.py --json results/engine_vs_fio.json

# On a GPU machine (docs/gpu.md, "Measuring on a GPU machine"): build with the machine's compiler, check,
# and measure, in resumable stages of under 8 minutes (benchmarks/gpu_check.py). STAGE=name[,name] runs those
# stages (again); COPY_TO=dir also copies the report and logs there; COMMIT=sha names the commit when
# the tree has no .git. It uses the system's python3 (torch, CuPy), never $(VENV).
GPU_CHECK_ARGS ?=
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py --command "make gpu-check$(if $(STAGE), STAGE=$(STAGE))" \
	  $(if $(STAGE),--stage $(STAGE)) $(if $(COPY_TO),--copy-to $(COPY_TO)) $(if $(COMMIT),--commit $(COMMIT)) \
	  $(GPU_CHECK_ARGS)

# Where there is network: the packages the GPU machine lacks, as files in .gpu-deps/ (carried there).
gpu-deps:
	$(PYTHON) benchmarks/gpu_check.py prepare-deps

# manylinux wheels in $(BUILD)/wheelhouse (docs/install.md): one per CPython 3.9-3.13 on PATH, or those
# named (WHEEL_PYTHONS="python3.12"), repaired by auditwheel, checked and imported in a clean venv.
WHEEL_PYTHONS ?=
wheel: deps
	$(PYTHON) .ci/wheel.py --out $(BUILD)/wheelhouse --work $(BUILD)/wheel $(WHEEL_PYTHONS)

clean:
	rm -rf $(BUILD) $(VENV)

