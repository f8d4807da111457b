# dsflash build.  `make` = release, `make BUILD=debug`, `make BUILD=asan` (ASan+UBSan).
# Every .c under src/ except src/cli/main.c goes into libdsflash.a; each tests/unit/test_*.c is its own
# test program linked against it.  New files need no Makefile edit.
BUILD    ?= release
OUT      := build/$(BUILD)
CC       ?= gcc
WARN     := -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation -ffp-contract=off
CSTD     := -std=gnu17
PKGS     := libcjson libcrypto libutf8proc libmicrohttpd
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS_release := -O2 -g -DNDEBUG
CFLAGS_debug   := -O0 -g
CFLAGS_asan    := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_asan   := -fsanitize=address,undefined
CFLAGS   := $(CSTD) $(WARN) $(CFLAGS_$(BUILD)) -pthread -fopenmp-simd -Iinclude -Isrc $(PKG_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS   := $(PKG_LIBS) -lm -pthread
LDFLAGS  := $(LDFLAGS_$(BUILD))

LIB_SRC  := $(filter-out src/cli/main.c,$(shell find src -name '*.c' | sort))
LIB_OBJ  := $(LIB_SRC:%.c=$(OUT)/%.o)
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(OUT)/tests/%)
TEST_COMMON := $(filter-out $(TEST_SRC),$(wildcard tests/unit/*.c))

.PHONY: all test bench clean lib tests
all: $(OUT)/dsflash tests

lib: $(OUT)/libdsflash.a
tests: $(TEST_BIN)

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

test: all
	BUILD=$(BUILD) tests/run.sh

bench: all
	BUILD=$(BUILD) bench/run.sh

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(OUT)/src/cli/main.d $(TEST_BIN:=.d)
