/* Where the float weights of a release come from: the one interface between "a float model"
 * and the release writer.
 *
 * Two implementations exist and they must be interchangeable bit for bit: `dsflash quantize`
 * reads a directory of BF16/F32 safetensors (this file), and `dsflash mkmodel` generates the
 * weights on the fly (mkmodel_source.c).  The writer never sees which one it has, so the
 * quantization, layout and JSON code paths are literally the same for both, and a release made by
 * mkmodel equals the one quantize makes from mkmodel's --float-out directory.
 *
 * Every tensor is seen as a 2-D array [rows, cols] (cols = last dimension; a 1-D tensor is one
 * row, a scalar one element).  Reads are by row range and must be thread-safe: the writer calls
 * them from several worker threads.  read_f32 returns exactly the values the stored dtype holds,
 * widened to fp32; read_raw returns the stored bytes. */
#ifndef DS_TOOLS_QUANT_SOURCE_H
#define DS_TOOLS_QUANT_SOURCE_H
#include "base/common.h"
#include "io/safetensors.h"
#include "tools/quant_rotation.h"

typedef struct ds_fsrc_tensor {
    char *name;
    ds_dtype dtype;          /* BF16, F16 or F32 */
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    int64_t rows, cols;      /* 2-D view */
    uint64_t nbytes;
} ds_fsrc_tensor;

typedef struct ds_fsrc ds_fsrc;
struct ds_fsrc {
    int n;
    ds_fsrc_tensor *t;       /* sorted by name */
    char *config_json;       /* config.json text of the float model (no quantization_config) */
    char *label;             /* what the manifests record as "src" */
    bool has_rotation;       /* a rotation file came with the source */
    ds_rot32 rot;            /* its block (identity when !has_rotation) */
    /* rows [r0, r1) of tensor i: fp32 values / stored bytes, row-major */
    int (*read_f32)(ds_fsrc *s, int i, int64_t r0, int64_t r1, float *out, ds_error *err);
    int (*read_raw)(ds_fsrc *s, int i, int64_t r0, int64_t r1, void *out, ds_error *err);
    /* Write the non-tensor files a release copies unchanged (tokenizer files, the Engram token
     * map named by the config) into dst_dir. */
    int (*write_aux)(ds_fsrc *s, const char *dst_dir, ds_error *err);
    void (*destroy)(ds_fsrc *s);
    void *impl;
};

/* Index of a tensor by name, or -1. */
int ds_fsrc_find(const ds_fsrc *s, const char *name);
/* Release everything (calls destroy). */
void ds_fsrc_free(ds_fsrc *s);
/* Helpers for implementations: fill rows/cols/nbytes from dtype+shape; sort by name. */
void ds_fsrc_tensor_init(ds_fsrc_tensor *t, const char *name, ds_dtype dt, int ndim, const int64_t *shape);
void ds_fsrc_sort(ds_fsrc *s);

/* Widen `n` stored values of dtype dt (BF16/F16/F32) to fp32. */
void ds_widen_to_f32(ds_dtype dt, const void *src, int64_t n, float *out);
/* Store fp32 values as dtype dt (BF16 round-to-nearest-even, F32 copy). */
void ds_narrow_from_f32(ds_dtype dt, const float *src, int64_t n, void *out);

/* The float-checkpoint directory reader of `dsflash quantize --src DIR`.  Tensors are found
 * through `model.safetensors.index.json` when present, else in every top-level *.safetensors
 * file (a float checkpoint has no Engram subdirectory).  A name in two files is
 * E_DUPLICATE_TENSOR.  `optional/quarot.safetensors`, if present, is validated (MODEL.md §3
 * checks) and kept.  Files are mmap'd; nothing is copied.
 * fp8 = false: only BF16/F16/F32 tensors are accepted (anything else is E_SRC_FORMAT).
 * fp8 = true (the official release, CHECKPOINT.md §14): `X.weight` F8_E4M3 with `X.scale` F8_E8M0
 * tiles, MXFP4 experts (I8/U8 [out, in/2] with [out, in/32] scales) and FP8 Engram rows are
 * presented as BF16 [out, in] tensors holding their exact decoded values; the `.scale` tensors
 * are consumed. */
int ds_fsrc_open_dir(const char *dir, const char *label, bool fp8, ds_fsrc **out, ds_error *err);

#define DS_FLOAT_INDEX_FILE "model.safetensors.index.json"
#define DS_ROTATION_FILE "optional/quarot.safetensors"

#endif
