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
FFMPEG   = libavformat libavcodec libswscale libavutil libavdevice
LDLIBS   = -ldnnl -lcjson $(shell pkg-config --libs $(FFMPEG) libzip msgpack libpcre2-8 libutf8proc) -lm
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
# CUDA=1: with the CUDA backend (src/kernels/cuda/, device "cuda"; docs/cuda.md), built by nvcc
# for sm_90 (H100, H200) plus compute_90 PTX, linked with cuBLASLt and the CUDA runtime. Without it
# nothing needs nvcc.
CUDA    ?= 0
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))
NVCC    ?= $(CUDA_HOME)/bin/nvcc
NVCCFLAGS ?= -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifeq ($(CUDA),1)
BUILD   ?= build-cuda
CPPFLAGS += -DTUBELET_CUDA
CUDA_SRC = src/kernels/cuda/table.c
CUDA_OBJ = $(BUILD)/src/kernels/cuda/kernels.o $(BUILD)/src/kernels/cuda/backward.o \
           $(BUILD)/src/kernels/cuda/optim.o
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++ -lpthread
endif
# CUDA=emu: the same backend with kernels.cu compiled by the host's C++ compiler against
# tests/cudaemu, which runs CUDA kernels and cuBLASLt on the CPU, strictly (docs/cuda.md, "The
# emulator"): the kernels checked against the fixtures on a machine without a GPU or nvcc.
ifeq ($(CUDA),emu)
BUILD   ?= build-cudaemu
CPPFLAGS += -DTUBELET_CUDA
CUDA_SRC = src/kernels/cuda/table.c
CUDA_OBJ = $(BUILD)/src/kernels/cuda/kernels.o $(BUILD)/src/kernels/cuda/backward.o \
           $(BUILD)/src/kernels/cuda/optim.o $(BUILD)/tests/cudaemu/emu.o
LDLIBS  += -lstdc++ -lpthread
endif
BUILD   ?= build

SRC      = $(wildcard src/*.c src/io/*.c src/kernels/*.c src/models/*.c src/video/*.c src/synth/*.c src/train/*.c src/text/*.c) $(DIST_SRC) $(CUDA_SRC)
CLI_SRC  = $(wildcard src/cli/*.c)
# tubelet serve's core: part of the CLI (libmicrohttpd), not of the library
SERVE_SRC = $(wildcard src/serve/*.c)
# what the CLI and the server share (JSON results, labels, loading a model): below both
APP_SRC  = $(wildcard src/app/*.c)
SERVE_LIBS = $(shell pkg-config --libs libmicrohttpd)
TEST_SRC = $(wildcard tests/test_*.c)
OBJ      = $(SRC:%.c=$(BUILD)/%.o) $(CUDA_OBJ)
CLI_OBJ  = $(CLI_SRC:%.c=$(BUILD)/%.o) $(SERVE_SRC:%.c=$(BUILD)/%.o) $(BUILD)/src/serve/page_html.o \
           $(APP_SRC:%.c=$(BUILD)/%.o)
TESTS    = $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIB      = $(BUILD)/libtubelet.a
BIN      = $(BUILD)/tubelet
PUBLIC_H = $(wildcard include/*.h)
# Header dependencies: each compile writes the headers it read into a .d file beside its output
# (-MMD: not the system's; -MP: a header removed since is no error), and those are included at the
# end of this file, so that editing a header rebuilds only what includes it. An output whose .d is
# missing (built before this rule, or its .d deleted) is rebuilt once: it lists its .d as a
# prerequisite, a target without a recipe (DEPS, at the end), which counts as changed when missing.
DEPFLAGS = -MMD -MP

.PHONY: test-cuda-build test-cuda-emu all check-build check-cases check-cli-headers check-cli-structure check-kernel-seam check-models test test-fast test-avx2 test-asan install uninstall clean help fuzz fuzz-long bench test-python test-mpi

all: $(BIN) $(TESTS)

help:
	@echo "make            build $(BIN), $(LIB) and the test programs"
	@echo "make test       every stage, one after another: test-fast, test-avx2, fuzz, test-asan,"
	@echo "                test-python, test-mpi, test-cuda-build, test-cuda-emu (15-19 min on 2 cores;"
	@echo "                test-python needs PyPI); TEST_STAGES=\"...\" runs some of them"
	@echo "make test-fast  run the tests of the normal build only"
	@echo "make test-avx2  the kernel and gradient tests of an x86-64-v3 build (the AVX2 paths)"
	@echo "make test-mpi   build with Open MPI (MPI=1, in $(BUILD)-mpi) and run the 2-rank tests"
	@echo "make CUDA=1     build with the CUDA backend (nvcc, cuBLASLt; in $(BUILD)-cuda; docs/cuda.md)"
	@echo "make test-cuda-build  build with CUDA=1 and check that --device cuda fails cleanly without a GPU"
	@echo "make test-cuda-emu    the CUDA kernels on the CPU emulator (tests/cudaemu): every fixture on device cuda"
	@echo "make CUDA=emu   build the CUDA backend against the emulator (in build-cudaemu; docs/cuda.md)"
	@echo "make test-python  build the Python wheel, install it in a venv ($(PYVENV)), run pytest"
	@echo "make install    install into PREFIX=$(PREFIX) (lib, include, bin, pkgconfig)"
	@echo "make fuzz       build and briefly run every libFuzzer harness (clang; FUZZ_SECONDS=15 each)"
	@echo "make fuzz-long  run every harness for FUZZ_SECONDS=1800 or FUZZ_RUNS=10000000 executions,"
	@echo "                whichever comes first (FUZZ_JOBS at a time); executions and coverage"
	@echo "                per harness go to $(BUILD)-fuzz/fuzz-long.txt"
	@echo "make clean      remove build directories"

$(BUILD)/%.o: %.c $(BUILD)/%.d
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(OMP) $(DEPFLAGS) -c $< -o $@

# The binary's three directories see the public headers only (include/: no -Isrc), and each the
# ones below it: the CLI its own cli.h, serve.h (cmd_serve.c) and app.h; the server its own
# serve.h and app.h, never cli.h; src/app its own app.h (make check-cli-headers).
$(BUILD)/src/cli/%.o: src/cli/%.c $(BUILD)/src/cli/%.d
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/serve -Isrc/app $(CFLAGS) $(WARN) $(OMP) $(DEPFLAGS) -c $< -o $@

$(BUILD)/src/serve/%.o: src/serve/%.c $(BUILD)/src/serve/%.d
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/app $(CFLAGS) $(WARN) $(OMP) $(DEPFLAGS) -c $< -o $@

$(BUILD)/src/app/%.o: src/app/%.c $(BUILD)/src/app/%.d
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -Iinclude $(CFLAGS) $(WARN) $(OMP) $(DEPFLAGS) -c $< -o $@

# serve's page at / (src/serve/page.html) as one C string, serve_page
$(BUILD)/src/serve/page_html.c: src/serve/page.html
	@mkdir -p $(dir $@)
	{ echo '/* generated by the Makefile from src/serve/page.html */'; echo 'const char serve_page[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; echo ';'; } >$@

$(BUILD)/src/serve/page_html.o: $(BUILD)/src/serve/page_html.c
	$(CC) -std=c11 $(CFLAGS) $(WARN) $(DEPFLAGS) -c $< -o $@

ifeq ($(CUDA),emu)
$(BUILD)/src/kernels/cuda/%.o: src/kernels/cuda/%.cu $(BUILD)/src/kernels/cuda/%.d
	@mkdir -p $(dir $@)
	$(CXX) -x c++ -std=c++17 -O2 -g -D_GNU_SOURCE -Itests/cudaemu -Iinclude -Isrc \
	  -include tests/cudaemu/emu_args.h -Wall -Wextra $(DEPFLAGS) -c $< -o $@
$(BUILD)/tests/cudaemu/emu.o: tests/cudaemu/emu.cc $(BUILD)/tests/cudaemu/emu.d
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -g -D_GNU_SOURCE -U_FORTIFY_SOURCE -Itests/cudaemu -Wall -Wextra $(DEPFLAGS) -c $< -o $@
else
$(BUILD)/src/kernels/cuda/%.o: src/kernels/cuda/%.cu $(BUILD)/src/kernels/cuda/%.d
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -D_GNU_SOURCE -Iinclude -Isrc -Xcompiler -Wall,-Wextra $(DEPFLAGS) -MF $(@:.o=.d) -c $< -o $@
endif

$(LIB): $(OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS) $(OMP) $^ $(LDLIBS) $(SERVE_LIBS) -lpthread -o $@

# A test program is compiled and linked in one step: its .d is named for it ($@.d, -MT $@).
$(BUILD)/tests/%: tests/%.c $(LIB) $(BUILD)/tests/%.d
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(OMP) $(DEPFLAGS) -MF $@.d -MT $@ $< $(LIB) $(LDLIBS) -o $@

test-fast: all check-build check-cases check-cli-headers check-cli-structure check-kernel-seam check-models
	tests/run.sh $(BUILD)

# The Makefile's own checks (tests/check_build.sh, seconds, nothing built): a header edit rebuilds
# only what includes it (make -n -W HEADER), and make test's stage lines.
check-build: all
	tests/check_build.sh $(BUILD) MPI=$(MPI) CUDA=$(CUDA)

# The test programs' case filter: `build/tests/test_models vivit` runs the cases whose names
# contain "vivit" (tests/check.h); tests/check_cases.sh checks every program's (seconds).
check-cases: all
	tests/check_cases.sh $(BUILD)

# The binary's three directories stay clients of the public API (include/) and their includes run
# one way, src/cli -> src/serve -> src/app: a quoted include of src/cli is cli.h, serve.h, app.h or
# a public header; of src/serve serve.h, app.h or a public header (never the CLI's cli.h); of
# src/app app.h or a public header. The compile rules above enforce it too (their -I).
check-cli-headers:
	@for d in "cli:cli.h serve.h app.h" "serve:serve.h app.h" "app:app.h"; do \
	  dir=$${d%%:*}; own=" $${d#*:} "; \
	  for h in $$(cat src/$$dir/*.c src/$$dir/*.h 2>/dev/null | sed -n 's/^#include "\(.*\)"/\1/p' | sort -u); do \
	    case "$$own" in *" $$h "*) continue ;; esac; [ -f "include/$$h" ] || \
	    { echo "src/$$dir includes \"$$h\", which is not $${d#*:} or a public header (include/)"; exit 1; }; \
	  done; done

# The CLI runs one way: main.c dispatches to the commands, each command (cmd_NAME.c) calls the
# shared files of src/cli/ (common.c, load.c, video_list.c, ...; cli.h), and those call no command:
# main.c defines main only, a cmd_*.c its command only, only main.c uses a command, no call circle
# among the files of src/cli/, src/serve/ and src/app/, cli.h includes no file of src/cli/ (no
# include circle), and src/serve calls nothing of src/cli, src/app nothing of either (the layers
# src/cli -> src/serve -> src/app). tests/check_cli.sh reads the objects' symbols (nm), so calls
# through a pointer count.
check-cli-structure: all
	tests/check_cli.sh $(BUILD)

# models/ runs every operation through its model's table (kernels/backend.h), never a compute
# kernel, the weight packing, the product context or a native-instruction query by name, so that
# another backend's table can replace the CPU's. Nor does it name a CPU table (the backend is
# chosen at load by name, tb_backend_find) or include the CPU's libraries (gemm.h: sgemm;
# lowp.h: oneDNN).
SEAM_KERNELS = tb_(lin_apply|lin_apply_act|linear|linear_backward|gemm|layernorm|layernorm_backward|bias_act|act_backward|scale_cols|scale_cols_backward|dropout|dropout_serial|softmax_row|vexp|attention_(forward|backward)[a-z_0-9]*|attention_(backward_)?scratch_floats|attention_has_bf16|lowp_cpu_has|linear_pack_[a-z_]+|linear_ctx_new|lowp_ctx_[a-z_]+|act_quant_params|gemm_backend)\(
SEAM_CPU = \btb_cpu_[a-z_]*kernels\b|^\#include "\.\./kernels/(gemm|lowp)\.h"
# The family files whose passes move no activation on the host: their buffers come from the
# table's mem_alloc, their copies, clears and outputs are its copy, copy_block, zero, to_host, ...
# (the other family files still copy weights with memcpy at load: Swin's and VideoMAE's image
# initialisation, TimeSformer's resized positions, which a grep cannot tell from activations).
SEAM_HOST_FILES = src/models/vivit.c src/models/xclip.c
SEAM_HOST = \b(memcpy|memset|memmove|tb_alloc|tb_free)\(
check-kernel-seam:
	@! grep -nE '\b$(SEAM_KERNELS)' src/models/*.c || \
	  { echo "src/models calls the kernels above by name: call them through m->kern (kernels/backend.h)"; exit 1; }
	@! grep -nE '$(SEAM_CPU)' src/models/*.c src/models/*.h || \
	  { echo "src/models names a CPU table or includes a CPU library: use m->kern (the backend chosen at load)"; exit 1; }
	@! grep -nE '$(SEAM_HOST)' $(SEAM_HOST_FILES) || \
	  { echo "a family file above moves memory on the host: use m->kern's mem_alloc, copy, zero, to_host, ..."; exit 1; }

# models/ has no include or call circle, a family file is reached only through the registry
# (families.c), no other file of models/ names a family or tests which one it runs, and a
# family's own config struct (tb_config.fam) is named only in its file:
# tests/check_models.sh reads the objects' symbols (nm), the tables' initializers (calls through
# a table count) and the sources without comments.
check-models: all
	tests/check_models.sh $(BUILD)

# The ASan stage runs tests/run.sh only (the fuzzers are ASan builds already; the AVX2, Python,
# MPI and CUDA stages do not run under it); the checks that the sanitizer build skips say so in
# their output, and tests/run.sh lists them at its end.
test-asan:
	@echo "test-asan: tests/run.sh on the ASan+UBSan build $(BUILD)-asan (not the AVX2, fuzz, Python, MPI or CUDA stages); the checks it skips are listed at the end"
	$(MAKE) BUILD=$(BUILD)-asan OPT=-O1 \
	  CFLAGS="-O1 $(ARCH) -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" all
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  tests/run.sh $(BUILD)-asan

# make test: the stages one after another (tests/stages.sh: a line as each starts and ends, with
# its time, and the totals). About 15-19 minutes on 2 quiet cores; test-python (and so test-mpi)
# installs numpy and pytest from PyPI into a venv.
TEST_STAGES ?= test-fast test-avx2 fuzz test-asan test-python test-mpi test-cuda-build test-cuda-emu
test:
	+@tests/stages.sh "$(MAKE)" $(TEST_STAGES)

# tools/gpu_check.sh's program (tests/gpu_parity.c, make CUDA=1): linked --as-needed, so that it
# carries only the libraries it calls (oneDNN and a few small ones; no FFmpeg) to the GPU machine.
$(BUILD)/gpu/gpu_parity: tests/gpu_parity.c $(LIB) $(BUILD)/gpu/gpu_parity.d
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(OMP) $(DEPFLAGS) -MF $@.d -MT $@ $< $(LIB) -Wl,--as-needed $(LDLIBS) -o $@
# Its training half (tests/gpu_grads.c): loss and every gradient of device cuda against PyTorch's.
$(BUILD)/gpu/gpu_grads: tests/gpu_grads.c $(LIB) $(BUILD)/gpu/gpu_grads.d
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(OMP) $(DEPFLAGS) -MF $@.d -MT $@ $< $(LIB) -Wl,--as-needed $(LDLIBS) -o $@

# cudaemu's own test (tests/cudaemu/selftest.cc): the emulation computes what CUDA and cuBLASLt
# do, and each of its checks stops a program that breaks the rule. Needs neither nvcc nor a GPU.
# (each source compiled on its own, -O1, in $(BUILD)/tests/selftest/, for its .d)
$(BUILD)/tests/cudaemu_selftest: $(BUILD)/tests/selftest/selftest.o $(BUILD)/tests/selftest/emu.o
	$(CXX) $^ -o $@
$(BUILD)/tests/selftest/%.o: tests/cudaemu/%.cc $(BUILD)/tests/selftest/%.d
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -g -D_GNU_SOURCE -U_FORTIFY_SOURCE -Itests/cudaemu -Wall -Wextra $(DEPFLAGS) -c $< -o $@

# The CUDA backend's kernels run in the emulator (no nvcc, no GPU needed): its self-test, then
# the programs tools/gpu_check.sh runs on a GPU, on every fixture (gpu_parity: the forward of every
# family; gpu_grads: every gradient), `tubelet train --device cuda` against the CPU's curve, and
# the CLI's video commands on device cuda against the CPU build's (docs/cuda.md). About 2 minutes.
test-cuda-emu: $(BUILD)/tests/cudaemu_selftest $(BIN)
	timeout 300 $(BUILD)/tests/cudaemu_selftest
	timeout 1200 $(MAKE) CUDA=emu BUILD=$(BUILD)-cudaemu $(BUILD)-cudaemu/gpu/gpu_parity \
	  $(BUILD)-cudaemu/gpu/gpu_grads $(BUILD)-cudaemu/tubelet $(BUILD)-cudaemu/tests/test_threads
	tests/check_cuda_state.sh $(BUILD)-cudaemu
	TB_CUDAEMU_STATS=1 timeout 900 $(BUILD)-cudaemu/gpu/gpu_parity
	timeout 900 $(BUILD)-cudaemu/gpu/gpu_grads
	TUBELET_TEST_DEVICE=cuda timeout 900 $(BUILD)-cudaemu/tests/test_threads
	timeout 600 tests/gpu_train.sh $(BUILD)-cudaemu/tubelet
	timeout 600 tests/test_cuda_emu_cli.sh $(BUILD)-cudaemu/tubelet $(BIN)

# The CUDA backend compiles and links (make CUDA=1, in $(BUILD)-cuda), and, on a machine without
# a GPU, --device cuda fails at load with a message (test_backend, test_cli.sh); skipped, with a
# line saying so, where nvcc is missing (CI's clean machines). Parity on a GPU: tools/gpu_check.sh.
test-cuda-build:
	@if [ ! -x "$(NVCC)" ]; then echo "test-cuda-build: skipped (no nvcc at $(NVCC); set CUDA_HOME)"; exit 0; fi; \
	timeout 1200 $(MAKE) CUDA=1 BUILD=$(BUILD)-cuda $(BUILD)-cuda/tubelet $(BUILD)-cuda/tests/test_backend \
	  $(BUILD)-cuda/tests/test_models && tests/check_cuda_state.sh $(BUILD)-cuda && \
	timeout 300 $(BUILD)-cuda/tests/test_backend && timeout 300 tests/test_cli.sh $(BUILD)-cuda/tubelet

# The kernels' AVX2 + FMA paths (Zen 2/3, Intel client CPUs), whatever CPU runs the suite: a build
# for x86-64-v3 (no AVX-512) and the kernel and gradient tests against their references.
test-avx2:
	$(MAKE) BUILD=$(BUILD)-avx2 ARCH=-march=x86-64-v3 $(BUILD)-avx2/tests/test_kernels $(BUILD)-avx2/tests/test_grads
	for t in test_kernels test_grads; do $(BUILD)-avx2/tests/$$t >$(BUILD)-avx2/$$t.log 2>&1 || \
	  { tail -20 $(BUILD)-avx2/$$t.log; exit 1; }; echo "ok $$t (x86-64-v3): $$(tail -1 $(BUILD)-avx2/$$t.log)"; done

# Data-parallel training over Open MPI: the MPI build (build-mpi/) against one process
# (tests/test_mpi.sh, 2 ranks with --oversubscribe), and the same on --device cuda in the emulator
# (MPI=1 CUDA=emu, tests/gpu_mpi.sh: the gradients' staging through the host, counted); needs the
# Python venv of test-python for tools/compare_safetensors.py.
test-mpi: test-python
	$(MAKE) MPI=1 BUILD=$(BUILD)-mpi $(BUILD)-mpi/tubelet
	tests/test_mpi.sh $(BUILD)-mpi/tubelet $(PYVENV)/bin/python
	timeout 1200 $(MAKE) MPI=1 CUDA=emu BUILD=$(BUILD)-mpi-cudaemu $(BUILD)-mpi-cudaemu/tubelet
	timeout 900 tests/gpu_mpi.sh $(BUILD)-mpi-cudaemu/tubelet $(PYVENV)/bin/python

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
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz $(BUILD)-mpi $(BUILD)-cuda $(BUILD)-cudaemu

# The .d files of every output above (see DEPFLAGS), named as targets without a recipe: a missing
# one counts as changed, so that its output is rebuilt and writes it.
DEPS = $(OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TESTS:=.d) $(BUILD)/gpu/gpu_parity.d $(BUILD)/gpu/gpu_grads.d \
       $(BUILD)/tests/selftest/selftest.d $(BUILD)/tests/selftest/emu.d
$(DEPS):
include $(wildcard $(DEPS))
