/* safetensors over mmap (CHECKPOINT.md §3): read-only views of every tensor, and an atomic writer.
 * A file is mapped once; tensors are pointers into the mapping, never eager copies (except an
 * unaligned tensor, which is copied into an aligned buffer with a W_DATA_LAYOUT warning). */
#ifndef DS_IO_SAFETENSORS_H
#define DS_IO_SAFETENSORS_H
#include "base/common.h"

typedef enum {
    DS_DT_F32 = 0, DS_DT_F16, DS_DT_BF16, DS_DT_I8, DS_DT_U8, DS_DT_F8_E4M3, DS_DT_F8_E8M0,
    DS_DT_F64, DS_DT_I16, DS_DT_U16, DS_DT_I32, DS_DT_U32, DS_DT_I64, DS_DT_U64, DS_DT_BOOL,
    DS_DT_F8_E5M2, DS_DT_F4, DS_DT_COUNT
} ds_dtype;

const char *ds_dtype_name(ds_dtype t);
bool ds_dtype_is_float(ds_dtype t); /* F32, F16, BF16, F64 (dense float storage) */
/* Bytes per element; for F4 (two 4-bit elements per byte, the first in the low nibble) the byte
 * that holds a pair, i.e. the alignment unit.  Byte counts go through ds_dtype_nbytes. */
int ds_dtype_size(ds_dtype t);
int ds_dtype_bits(ds_dtype t);
/* Bytes of `numel` elements (F4: numel / 2; an odd F4 count has no byte length: UINT64_MAX). */
uint64_t ds_dtype_nbytes(ds_dtype t, uint64_t numel);
/* E2M1 expert codes (CHECKPOINT.md §14) are stored as F4 [out, in] or as packed I8/U8 bytes
 * [out, in/2] — the same bytes either way (two codes per byte, the even input in the low nibble).
 * The one place that rule is written: stored columns for `in` inputs, and inputs for stored columns. */
static inline int64_t ds_e2m1_cols(ds_dtype t, int64_t in) { return t == DS_DT_F4 ? in : in / 2; }
static inline int64_t ds_e2m1_inputs(ds_dtype t, int64_t cols) { return t == DS_DT_F4 ? cols : 2 * cols; }
int ds_dtype_parse(const char *name, ds_dtype *out); /* -1 if unknown */

#define DS_MAX_DIMS 8
typedef struct ds_tensor {
    const char *name;
    ds_dtype dtype;
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    uint64_t nbytes;
    uint64_t begin;        /* data_offsets relative to the data section */
    const void *data;      /* view into the mapping (or aligned copy) */
    const struct ds_stfile *file;
} ds_tensor;

typedef struct ds_stfile {
    char *path;            /* as opened */
    int fd;
    const uint8_t *map;
    uint64_t file_size;
    uint64_t header_len;   /* N */
    uint64_t data_start;   /* 8 + N */
    int n_tensors;
    ds_tensor *tensors;    /* sorted by name */
    char *metadata_json;   /* "__metadata__" object as text, or NULL */
    int n_warnings;
    char **warnings;       /* [n_warnings] W_DATA_LAYOUT texts (also logged) */
    int n_copies;          /* aligned copies made for unaligned tensors (freed on close) */
    void **copies;
} ds_stfile;

/* Open and validate (checklist items 8–12: E_HEADER_TOO_LARGE, E_HEADER_PARSE, E_OFFSETS_RANGE,
 * E_SHARD_TRUNCATED, warnings W_DATA_LAYOUT).  Messages name the file and tensor. */
int ds_st_open(const char *path, ds_stfile **out, ds_error *err);
void ds_st_close(ds_stfile *f);
const ds_tensor *ds_st_find(const ds_stfile *f, const char *name);
int64_t ds_tensor_numel(const ds_tensor *t);
/* Give back the memory of bytes [p, p + n) of f's mapping that this process will not read again:
 * the whole pages of the range leave our mapping (MADV_DONTNEED; the mapping is read-only and
 * shared, so a later read faults the same bytes back in from the file) and the page cache drops
 * them (POSIX_FADV_DONTNEED; only advice: pages another process maps stay).  Returns the bytes of
 * whole pages given back: 0 when the range holds none or is not in the mapping (an aligned copy). */
size_t ds_st_release(const ds_stfile *f, const void *p, size_t n);

/* Writer: collects tensors then writes header + data atomically (temp file, fsync, rename).
 * Data is copied at add time unless `borrow` is set (caller keeps it alive until finish). */
typedef struct ds_stwriter ds_stwriter;
ds_stwriter *ds_stw_new(void);
void ds_stw_add(ds_stwriter *w, const char *name, ds_dtype dt, int ndim, const int64_t *shape,
                const void *data, int borrow);
/* Deferred variant: `fill` is called during finish with a scratch buffer of the tensor's byte
 * size, so a writer holds at most one tensor in memory (mkmodel's mini model is ~6.7 GiB).
 * `data == NULL` in ds_stw_add means zero-filled. */
typedef int (*ds_stw_fill_fn)(void *ctx, const char *name, void *buf, uint64_t nbytes, ds_error *err);
void ds_stw_add_fill(ds_stwriter *w, const char *name, ds_dtype dt, int ndim, const int64_t *shape,
                     ds_stw_fill_fn fill, void *ctx);
void ds_stw_set_metadata(ds_stwriter *w, const char *key, const char *value);
/* By default the header is padded with spaces so the data section starts at a multiple of 8.
 * Forcing a header size of exactly `n` bytes reproduces fixed layouts: the Engram table files
 * (CHECKPOINT.md §9) use n = 104, so data starts at byte 112.  Finish fails (E_INVALID_ARG) if the
 * JSON does not fit or 8 + n is not a multiple of 8. */
#define DS_ENGRAM_HEADER_SIZE 104
void ds_stw_set_header_size(ds_stwriter *w, uint64_t n);
/* Data layout: tensors are placed by descending item size, then by name, so every tensor is
 * aligned to its item size with no gaps; the header lists them in name order. */
int ds_stw_finish(ds_stwriter *w, const char *path, ds_error *err); /* frees w */
void ds_stw_free(ds_stwriter *w);
uint64_t ds_stw_data_bytes(const ds_stwriter *w);

#endif
