/* The official FP8/MXFP4 layout writer of `dsflash mkmodel --format official` (CHECKPOINT.md §14);
 * see mkmodel_official.c for why it converts the float export.  The encoders are exposed for the
 * tests (round trips against the decoders of quant_fp8.h). */
#ifndef DS_TOOLS_MKMODEL_OFFICIAL_H
#define DS_TOOLS_MKMODEL_OFFICIAL_H
#include "base/common.h"

uint8_t ds_mk_e4m3_encode(float v);              /* round to nearest, ties to even code, saturate ±448 */
uint8_t ds_mk_e2m1_encode(float v);              /* round to nearest, ties to even code, saturate ±6 */
uint8_t ds_mk_e8m0_for(float amax, float fmt_max); /* smallest 2^k with amax/2^k <= fmt_max, as E8M0 */

/* Encode the float checkpoint in float_dir (unrotated, official names) into dst: shards
 * model-NNNNN-of-MMMMM.safetensors of about shard_bytes, model.safetensors.index.json, config.json
 * with the fp8 quantization_config, and the tokenizer / Engram token-map files. */
int ds_mk_officialize(const char *float_dir, const char *dst, int n_mtp, uint64_t shard_bytes, ds_error *err);
/* Remove a directory tree this process created (the temporary float export). */
void ds_mk_remove_tree(const char *dir);

#endif
