# dsflash build.  `make` = release, `make BUILD=debug`, `make BUILD=asan` (ASan+UBSan).
# Every .c under src/ except src/cli/main.c goes into libdsflash.a; each tests/unit/test_*.c is its own
# test program linked against it.  New files need no Makefile edit.
BUILD    ?= release
OUT      := build/$(BUILD)
CC       ?= gcc
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation -ffp-contract=off
CSTD     := -std=gnu17
PKGS     := libcjson libcrypto libutf8proc libmicrohttpd libcurl ompi-c   # ompi-c: OpenMPI (src/dist)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS_release := -O2 -g -DNDEBUG
CFLAGS_debug   := -O0 -g
CFLAGS_asan    := -O2 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_asan   := -fsanitize=address,undefined,float-cast-overflow
CFLAGS   := $(CSTD) $(WARN) $(CFLAGS_$(BUILD)) -pthread -fopenmp-simd -Iinclude -Isrc $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   := $(PKG_LIBS) -lm -pthread
LDFLAGS  := $(LDFLAGS_$(BUILD))

LIB_SRC  := $(filter-out src/cli/main.c,$(shell find src -name '*.c' | sort))
LIB_OBJ  := $(LIB_SRC:%.c=$(OUT)/%.o)
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(OUT)/tests/%)
TEST_COMMON := $(filter-out $(TEST_SRC),$(wildcard tests/unit/*.c))
# fuzz/fuzz_<name>.c: one libFuzzer target per parser.  Each is also linked with fuzz/replay_main.c
# by the normal compiler into $(OUT)/fuzz/replay_<name>, which `make test` runs over the seed corpus
# and the saved crash inputs (tests/fuzz/run_replay.sh).
FUZZ_NAMES  := $(patsubst fuzz/fuzz_%.c,%,$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_REPLAY := $(FUZZ_NAMES:%=$(OUT)/fuzz/replay_%)

.PHONY: all test bench clean lib tests fuzz fuzz-build soak
all: $(OUT)/dsflash tests

lib: $(OUT)/libdsflash.a
tests: $(TEST_BIN) $(FUZZ_REPLAY)

$(OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo '  CC   $<'
	@$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(OUT)/libdsflash.a: $(LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^

$(OUT)/dsflash: $(OUT)/src/cli/main.o $(OUT)/libdsflash.a
	@echo '  LD   $@'
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(OUT)/tests/%: tests/unit/%.c $(TEST_COMMON) $(OUT)/libdsflash.a
	@mkdir -p $(dir $@)
	@echo '  TEST $@'
	@$(CC) $(CFLAGS) -MMD -MP -MF $@.d -Itests/unit -o $@ $< $(TEST_COMMON) $(OUT)/libdsflash.a $(LDFLAGS) $(LDLIBS)

# test_step_alloc counts the allocator calls the library makes during a step (link-time wrap)
$(OUT)/tests/test_step_alloc: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=aligned_alloc

$(OUT)/fuzz/replay_%: fuzz/fuzz_%.c fuzz/harness.c fuzz/replay_main.c fuzz/fuzz.h $(OUT)/libdsflash.a
	@mkdir -p $(dir $@)
	@echo '  FUZZ $@'
	@$(CC) $(CFLAGS) -Ifuzz -o $@ $< fuzz/harness.c fuzz/replay_main.c $(OUT)/libdsflash.a $(LDFLAGS) $(LDLIBS)

# libFuzzer builds: the library again with clang, instrumented for coverage, ASan and UBSan, into
# build/fuzz/ (independent of BUILD).  -Werror stays with the gcc builds, which are the warning gate;
# clang's extra warnings on code it only instruments here must not stop a fuzz run.
FUZZ_CC     ?= clang
FUZZ_OUT    := build/fuzz
FUZZ_CFLAGS := $(CSTD) -Wall -Wextra -Wno-unused-parameter -ffp-contract=off -O1 -g -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined -pthread -fopenmp-simd \
               -Iinclude -Isrc -Ifuzz $(PKG_CFLAGS)
# Only what the parsers link (base, io, tokenizer and three parser files): the clang+ASan build of the
# whole library took 8 of CI's minutes for objects no fuzz target uses.  A parser that starts to need
# another file fails to link here, loudly.
FUZZ_LIB_SRC := $(wildcard src/base/*.c src/io/*.c src/tokenizer/*.c) \
                src/server/api_request.c src/engine/sampler.c src/tools/parts_manifest.c
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_OUT)/%.o)
# clang ignores `#pragma GCC target`: a file that uses it gets the same ISA as command-line flags,
# read from the pragma itself so a new per-ISA file cannot be forgotten here (its code still only
# runs after the CPU check in dispatch.c).
pragma_isa = $(shell sed -n 's/^\#pragma GCC target("\(.*\)")/\1/p' $(1) | head -1 | tr ',' '\n' | sed 's/^/-m/' | tr '\n' ' ')
# fast_ops.c passes 32-byte vectors between inlined helpers; clang refuses that without AVX
$(FUZZ_OUT)/src/model/fast_ops.o:       FUZZ_ISA := -mavx2 -mfma
FUZZ_BIN     := $(FUZZ_NAMES:%=$(FUZZ_OUT)/fuzz_%)
FUZZ_SECONDS ?= 60

$(FUZZ_OUT)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo '  CLANG $<'
	@$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_ISA) $(call pragma_isa,$<) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_OUT)/libdsflash.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^

$(FUZZ_OUT)/fuzz_%: fuzz/fuzz_%.c fuzz/harness.c fuzz/fuzz.h $(FUZZ_OUT)/libdsflash.a
	@echo '  FUZZ $@'
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< fuzz/harness.c $(FUZZ_OUT)/libdsflash.a $(PKG_LIBS) -lm -pthread

fuzz-build: $(FUZZ_BIN)

# `make fuzz` (FUZZ_SECONDS per target, default 60): prints executions and crashes per target;
# fails if any target crashed.  Needs the release tokenizer data (scripts/install-deps.sh).
fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh $(FUZZ_NAMES)

# `make soak` (SOAK_SECONDS, default 1800): mixed load on a live tiny-model server (tests/soak/).
soak: $(OUT)/dsflash
	BUILD=$(BUILD) SOAK_SECONDS=$${SOAK_SECONDS:-1800} tests/soak/soak.sh

test: all
	BUILD=$(BUILD) tests/run.sh

bench: all
	BUILD=$(BUILD) bench/run.sh

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(OUT)/src/cli/main.d $(TEST_BIN:=.d) $(FUZZ_LIB_OBJ:.o=.d)
