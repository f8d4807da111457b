/* The official FP8/MXFP4 release (CHECKPOINT.md §14): which tensors are encoded how, and the
 * loader checks of that layout.
 *
 * Why one classifier shared by the loader and by mkmodel's writer: the layout is defined by tensor
 * names (the dense FP8 linears, the MXFP4 routed experts, the FP8 Engram rows, everything else
 * float), so deciding it in one function keeps the writer, the loader checks and `verify` from
 * disagreeing about what a directory contains. */
#ifndef DS_IO_OFFICIAL_LAYOUT_H
#define DS_IO_OFFICIAL_LAYOUT_H
#include "base/common.h"

#define DS_OFFICIAL_INDEX "model.safetensors.index.json"

typedef enum {
    DS_OFF_FLOAT = 0,   /* float: BF16, except the F32 set of ds_official_float_is_f32 */
    DS_OFF_DROP,        /* the draft's own vocabulary copies: absent (the draft shares embed/head) */
    DS_OFF_FP8,         /* F8_E4M3 [out, in] + F8_E8M0 [ceil(out/32), ceil(in/32)] */
    DS_OFF_MXFP4,       /* U8/I8 [out, in/2] (two E2M1 codes per byte along the input) + F8_E8M0 [out, in/32] */
    DS_OFF_ROWS,        /* Engram rows: F8_E4M3 [rows, w] + F8_E8M0 [rows, w/32] */
} ds_official_kind;

/* Kind of the tensor `name` ("...X.weight") in a model with n_mtp draft stages. */
ds_official_kind ds_official_kind_of(const char *name, int n_mtp);

/* A float tensor the official layout stores as F32 (CHECKPOINT.md §14: the mHC parameters,
 * attention sinks and gate biases); every other float tensor (embed, head, norms, gate,
 * compressor, indexer, draft heads) is BF16 there. */
bool ds_official_float_is_f32(const char *name);

#endif
