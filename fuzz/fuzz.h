/* Shared declarations of the libFuzzer targets under fuzz/.
 *
 * Why it is built this way: each fuzz_<name>.c defines only LLVMFuzzerTestOneInput (and, where it
 * needs set-up, LLVMFuzzerInitialize), so the same file links two ways: with clang's libFuzzer
 * (`make fuzz`, build/fuzz/) to search for crashes, and with replay_main.c under the project's own
 * compiler and sanitizers (build/$BUILD/fuzz/replay_<name>) so every seed and every former crash
 * is replayed by `make test`.  Inputs are arbitrary bytes; a target must never assume NUL
 * termination, so fuzz_cstr() hands the parsers a terminated copy. */
#ifndef DS_FUZZ_H
#define DS_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A malloc'ed NUL-terminated copy of the input (inputs may hold NUL bytes; parsers that take a
 * C string then see a prefix, parsers that take a length see all of it). */
char *fuzz_cstr(const uint8_t *data, size_t size);
/* A scratch directory private to this process (created once; under $TMPDIR or /tmp). */
const char *fuzz_tmpdir(void);
/* The cut-down V4.1-style tokenizer (1,024 ids) written from the fetched DeepSeek base once per
 * process; exits with a message when the base is missing (scripts/install-deps.sh fetches it). */
const ds_tokenizer *fuzz_tiny_tokenizer(void);
#endif
