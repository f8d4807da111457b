/* Fuzz target: safetensors files (header length, JSON header, dtypes, shapes, data offsets).  The
 * reader maps a file, so each input is written to a scratch file and opened with ds_st_open, the
 * loader's only entry point.  An accepted file must be internally consistent: every tensor lies
 * inside the file and its byte count matches dtype x shape. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "io/safetensors.h"
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[700];
    if (!path[0]) snprintf(path, sizeof path, "%s/input.safetensors", fuzz_tmpdir());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    ds_stfile *st = NULL;
    ds_error err = {0};
    if (ds_st_open(path, &st, &err) == 0) {
        for (int i = 0; i < st->n_tensors; i++) {
            const ds_tensor *t = &st->tensors[i];
            if (t->begin > st->file_size - st->data_start || t->nbytes > st->file_size - st->data_start - t->begin) abort();
            if (ds_dtype_nbytes(t->dtype, (uint64_t)ds_tensor_numel(t)) != t->nbytes) abort();
            if (ds_st_find(st, t->name) != t) abort();
            volatile uint8_t sink = 0;   /* touch the first and last byte: the view must be readable */
            if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)sink;
        }
        ds_st_close(st);
    } else if (!err.msg[0]) {
        abort();   /* a refusal names its reason */
    }
    return 0;
}
