# tubelet — `make` builds the library and the CLI, `make test` runs the test suite (normal build,
# then AddressSanitizer + UndefinedBehaviorSanitizer), `make install` installs the library, the
# header, the CLI and a pkg-config file under PREFIX. `make help` lists every target.

PREFIX  ?= /usr/local
CC      ?= gcc
ARCH    ?= -march=native
OPT     ?= -O2
CFLAGS  ?= $(OPT) $(ARCH) -g
WARN     = -Wall -Wextra -Wno-unknown-pragmas
CPPFLAGS = -std=c11 -D_GNU_SOURCE -Iinclude -Isrc
FFMPEG   = libavformat libavcodec libswscale libavutil
LDLIBS   = -ldnnl -lcjson $(shell pkg-config --libs $(FFMPEG) libzip msgpack) -lm
OMP      = -fopenmp
# MPI=1: build with Open MPI's mpicc (data-parallel training, sharded inference; docs/distributed.md)
MPI     ?= 0
ifeq ($(MPI),1)
BUILD   ?= build-mpi
CC       = mpicc
DIST_SRC = src/dist/dist_mpi.c src/dist/common_api.c
else
DIST_SRC = src/dist/dist_local.c src/dist/common_api.c
endif
BUILD   ?= build

SRC      = $(wildcard src/*.c src/io/*.c src/kernels/*.c src/models/*.c src/video/*.c src/synth/*.c src/train/*.c) $(DIST_SRC)
CLI_SRC  = $(wildcard src/cli/*.c)
TEST_SRC = $(wildcard tests/test_*.c)
OBJ      = $(SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIB      = $(BUILD)/libtubelet.a
BIN      = $(BUILD)/tubelet
PUBLIC_H = $(wildcard include/*.h)

.PHONY: all check-cli-headers check-kernel-seam check-models test test-fast test-avx2 test-asan install uninstall clean help fuzz fuzz-long bench test-python test-mpi

all: $(BIN) $(TESTS)

help:
	@echo "make            build $(BIN), $(LIB) and the test programs"
	@echo "make test       run all tests: normal build, 15 s of each fuzz harness, then ASan+UBSan build"
	@echo "make test-fast  run the tests of the normal build only"
	@echo "make test-avx2  the kernel and gradient tests of an x86-64-v3 build (the AVX2 paths)"
	@echo "make test-mpi   build with Open MPI (MPI=1, in $(BUILD)-mpi) and run the 2-rank tests"
	@echo "make test-python  build the Python wheel, install it in a venv ($(PYVENV)), run pytest"
	@echo "make install    install into PREFIX=$(PREFIX) (lib, include, bin, pkgconfig)"
	@echo "make fuzz       build and briefly run every libFuzzer harness (clang; FUZZ_SECONDS=15 each)"
	@echo "make fuzz-long  run every harness for FUZZ_SECONDS=1800 or FUZZ_RUNS=10000000 executions,"
	@echo "                whichever comes first (FUZZ_JOBS at a time); executions and coverage"
	@echo "                per harness go to $(BUILD)-fuzz/fuzz-long.txt"
	@echo "make clean      remove build directories"

$(BUILD)/%.o: %.c $(wildcard include/*.h src/*.h src/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(OMP) -c $< -o $@

# The CLI sees the public headers only (include/) and its own cli.h: no -Isrc for its objects.
$(BUILD)/src/cli/%.o: src/cli/%.c $(wildcard include/*.h src/cli/*.h)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -Iinclude $(CFLAGS) $(WARN) $(OMP) -c $< -o $@

$(LIB): $(OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS) $(OMP) $^ $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(LIB) tests/check.h tests/parity.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(OMP) $< $(LIB) $(LDLIBS) -o $@

test-fast: all check-cli-headers check-kernel-seam check-models
	tests/run.sh $(BUILD)

# Every quoted include of the CLI is cli.h or a public header (include/), so that the CLI stays a
# client of the public API (the compile rule above enforces it too, for the objects it builds).
check-cli-headers:
	@for h in $$(sed -n 's/^#include "\(.*\)"/\1/p' src/cli/*.c src/cli/*.h | sort -u); do \
	  [ "$$h" = cli.h ] || [ -f "include/$$h" ] || \
	  { echo "src/cli includes \"$$h\", which is not a public header (include/)"; exit 1; }; done

# models/ runs every operation through its model's table (kernels/backend.h), never a compute
# kernel by name, so that another backend's table can replace the CPU's.
SEAM_KERNELS = tb_(lin_apply|lin_apply_act|linear|linear_backward|gemm|layernorm|layernorm_backward|bias_act|act_backward|scale_cols|scale_cols_backward|dropout|dropout_serial|softmax_row|vexp|attention_(forward|backward)[a-z_0-9]*|attention_(backward_)?scratch_floats)\(
check-kernel-seam:
	@! grep -nE '\b$(SEAM_KERNELS)' src/models/*.c || \
	  { echo "src/models calls the kernels above by name: call them through m->kern (kernels/backend.h)"; exit 1; }

# models/ has no include or call circle, and a family file is reached only through the registry
# (families.c): tests/check_models.sh reads the objects' symbols (nm).
check-models: all
	tests/check_models.sh $(BUILD)

test-asan:
	$(MAKE) BUILD=$(BUILD)-asan OPT=-O1 \
	  CFLAGS="-O1 $(ARCH) -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" all
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  tests/run.sh $(BUILD)-asan

test: test-fast test-avx2 fuzz test-asan test-python test-mpi

# The kernels' AVX2 + FMA paths (Zen 2/3, Intel client CPUs), whatever CPU runs the suite: a build
# for x86-64-v3 (no AVX-512) and the kernel and gradient tests against their references.
test-avx2:
	$(MAKE) BUILD=$(BUILD)-avx2 ARCH=-march=x86-64-v3 $(BUILD)-avx2/tests/test_kernels $(BUILD)-avx2/tests/test_grads
	for t in test_kernels test_grads; do $(BUILD)-avx2/tests/$$t >$(BUILD)-avx2/$$t.log 2>&1 || \
	  { tail -20 $(BUILD)-avx2/$$t.log; exit 1; }; echo "ok $$t (x86-64-v3): $$(tail -1 $(BUILD)-avx2/$$t.log)"; done

# Data-parallel training over Open MPI: the MPI build (build-mpi/) against one process
# (tests/test_mpi.sh, 2 ranks with --oversubscribe); needs the Python venv of test-python for
# tools/compare_safetensors.py.
test-mpi: test-python
	$(MAKE) MPI=1 BUILD=$(BUILD)-mpi $(BUILD)-mpi/tubelet
	tests/test_mpi.sh $(BUILD)-mpi/tubelet $(PYVENV)/bin/python

# The Python package (pyproject.toml, python/): `pip wheel` builds it with scikit-build-core in an
# isolated environment, the wheel goes into a virtualenv with numpy and pytest from PyPI, and
# python/tests runs against it (from outside the source tree, so the installed copy is tested).
PYTHON ?= python3
PYVENV ?= $(BUILD)/pyvenv
test-python: $(BIN)
	[ -x $(PYVENV)/bin/python ] || $(PYTHON) -m venv $(PYVENV)
	$(PYVENV)/bin/python -m pip install -q --disable-pip-version-check numpy pytest
	rm -rf $(BUILD)/wheel
	$(PYVENV)/bin/python -m pip wheel -q --disable-pip-version-check --no-deps . -w $(BUILD)/wheel
	$(PYVENV)/bin/python -m pip install -q --disable-pip-version-check --force-reinstall \
	  --no-deps $(BUILD)/wheel/tubelet-*.whl
	cd $(BUILD) && TUBELET_CLI=$(CURDIR)/$(BIN) $(CURDIR)/$(PYVENV)/bin/python -m pytest -q \
	  -p no:cacheprovider $(CURDIR)/python/tests

fuzz:
	BUILD=$(BUILD) FUZZ_SECONDS=$(or $(FUZZ_SECONDS),15) tests/fuzz.sh

fuzz-long:
	BUILD=$(BUILD) FUZZ_SECONDS=$(or $(FUZZ_SECONDS),1800) FUZZ_RUNS=$(or $(FUZZ_RUNS),10000000) \
	  FUZZ_JOBS=$(or $(FUZZ_JOBS),1) tests/fuzz.sh --long

bench: $(BIN)
	@echo "see bench/README.md: bench/compare.py runs tubelet, PyTorch and ONNX Runtime"

install: $(BIN) $(LIB)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/tubelet
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libtubelet.a
	install -m 644 $(PUBLIC_H) $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|0.1.0|' tubelet.pc.in \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tubelet.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/tubelet $(DESTDIR)$(PREFIX)/lib/libtubelet.a \
	  $(addprefix $(DESTDIR)$(PREFIX)/,$(PUBLIC_H)) $(DESTDIR)$(PREFIX)/lib/pkgconfig/tubelet.pc

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz $(BUILD)-mpi
