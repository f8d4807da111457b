/* `dsflash mkmodel --format official`: the synthetic model in DeepSeek's official FP8/MXFP4 layout
 * (CHECKPOINT.md §14).
 *
 * Why a conversion of the float export rather than a second generator: the float checkpoint that
 * `--float-out` writes (unrotated here: the official release has no rotation) holds exactly the
 * synthetic weights the W4A8 fixture is made of, under the official tensor names.  Encoding it to
 * the official formats therefore gives a fixture that tests can compare with the W4A8 one and
 * with `quantize --src-format fp8` of itself, and mkmodel keeps a single source of weights.
 *
 * Encoding (the inverse of the decode table of §14): dense FP8 linears get one E8M0 exponent per
 * 32x32 tile, the smallest power of two with amax/2^k <= 448, and E4M3 codes rounded to nearest,
 * ties to the even code; routed experts get one exponent per 32 inputs of a row (amax/2^k <= 6) and
 * E2M1 codes, two per byte along the input, low nibble = even input; Engram rows get one exponent
 * per 32 values and E4M3 codes.  The draft's own vocabulary copies (mtp.0.embed, last-stage head)
 * are dropped: in this layout the draft shares the trunk's.  Float tensors keep F32 only where the
 * official release has it (mHC parameters, sinks, gate biases); the rest (head, norms, compressor)
 * is rounded to BF16 as that release stores it. */
#define _GNU_SOURCE
#include "tools/mkmodel_official.h"
#include "base/bf16.h"
#include "base/fsutil.h"
#include "io/official_layout.h"
#include "io/safetensors.h"
#include "tools/quant_fp8.h"
#include <cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- number formats ---- */

/* Code with the value nearest to |v| among codes 0..n-1 (values ascending), ties to the even code;
 * v beyond the largest value saturates.  The sign bit is added by the caller. */
static uint8_t nearest_code(const float *vals, int n, float v) {
    if (v >= vals[n - 1]) return (uint8_t)(n - 1);
    int lo = 0;
    while (lo + 1 < n && vals[lo + 1] <= v) lo++;
    if (vals[lo] == v || lo == n - 1) return (uint8_t)lo;
    float dl = v - vals[lo], dh = vals[lo + 1] - v;
    if (dl < dh) return (uint8_t)lo;
    if (dh < dl) return (uint8_t)(lo + 1);
    return (uint8_t)(lo % 2 ? lo + 1 : lo);
}

static float g_e4m3[127];   /* values of the non-negative finite E4M3 codes 0x00..0x7E */
static float g_e2m1[8];

static void tables_init(void) {
    for (int c = 0; c < 127; c++) g_e4m3[c] = ds_e4m3_to_f32((uint8_t)c);
    for (int c = 0; c < 8; c++) g_e2m1[c] = ds_e2m1_to_f32((uint8_t)c);
}

uint8_t ds_mk_e4m3_encode(float v) {
    if (!g_e4m3[1]) tables_init();
    uint8_t c = nearest_code(g_e4m3, 127, fabsf(v));
    return (uint8_t)(signbit(v) && c ? c | 0x80 : c);
}

uint8_t ds_mk_e2m1_encode(float v) {
    if (!g_e4m3[1]) tables_init();
    uint8_t c = nearest_code(g_e2m1, 8, fabsf(v));
    return (uint8_t)(signbit(v) && c ? c | 8 : c);
}

/* E8M0 byte of the smallest power of two p with amax / p <= fmt_max (127 for amax 0). */
uint8_t ds_mk_e8m0_for(float amax, float fmt_max) {
    if (!(amax > 0.f)) return 127;
    int e;
    double m = frexp((double)amax / fmt_max, &e);   /* ratio = m·2^e, m in [0.5, 1) */
    int k = m == 0.5 ? e - 1 : e;
    k += 127;
    return (uint8_t)(k < 0 ? 0 : k > 254 ? 254 : k);
}

/* ---- which tensors become what ---- */

/* ---- encoders of whole tensors (float rows in, codes + scales out) ---- */

static void encode_fp8_tiles(const float *w, int64_t out, int64_t in, uint8_t *q, uint8_t *s) {
    const int64_t sc = (in + 31) / 32;
    for (int64_t bo = 0; bo < out; bo += 32)
        for (int64_t bi = 0; bi < in; bi += 32) {
            float amax = 0.f;
            for (int64_t o = bo; o < DS_MIN(bo + 32, out); o++)
                for (int64_t i = bi; i < DS_MIN(bi + 32, in); i++) amax = fmaxf(amax, fabsf(w[o * in + i]));
            uint8_t e = ds_mk_e8m0_for(amax, 448.f);
            s[(bo / 32) * sc + bi / 32] = e;
            for (int64_t o = bo; o < DS_MIN(bo + 32, out); o++)
                for (int64_t i = bi; i < DS_MIN(bi + 32, in); i++) q[o * in + i] = ds_mk_e4m3_encode(ldexpf(w[o * in + i], 127 - e));
        }
}

/* Per 32 values of each row: E4M3 (Engram rows) or E2M1 packed two per byte (experts). */
static void encode_rows32(const float *w, int64_t rows, int64_t cols, bool fp4, uint8_t *q, uint8_t *s) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < cols; b += 32) {
            const float *x = w + r * cols + b;
            float amax = 0.f;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
            uint8_t e = ds_mk_e8m0_for(amax, fp4 ? 6.f : 448.f);
            s[r * (cols / 32) + b / 32] = e;
            for (int i = 0; i < 32; i++) {
                float v = ldexpf(x[i], 127 - e);
                if (!fp4) { q[r * cols + b + i] = ds_mk_e4m3_encode(v); continue; }
                uint8_t code = ds_mk_e2m1_encode(v), *byte = &q[r * (cols / 2) + (b + i) / 2];
                *byte = (uint8_t)(i % 2 ? (*byte & 0x0f) | (code << 4) : code);
            }
        }
}

/* ---- the conversion ---- */

typedef struct conv {
    const char *src, *dst;
    int n_mtp;
    uint64_t shard_bytes;
    ds_stwriter *w;          /* shard being filled */
    uint64_t w_bytes;
    int n_shards;
    char **shard_names;      /* temporary names, renamed when the count is known */
    cJSON *map;              /* tensor -> shard index (as number), rewritten to names at the end */
} conv;

static int flush_shard(conv *c, ds_error *err) {
    if (!c->w) return 0;
    char rel[64], *path;
    snprintf(rel, sizeof rel, "shard-%05d.tmp", c->n_shards + 1);
    path = ds_path_join(c->dst, rel);
    int rc = ds_stw_finish(c->w, path, err);
    c->w = NULL;
    c->shard_names = ds_xrealloc(c->shard_names, sizeof(char *) * (size_t)(c->n_shards + 1));
    c->shard_names[c->n_shards++] = path;
    c->w_bytes = 0;
    return rc;
}

static int add_out(conv *c, const char *name, ds_dtype dt, int ndim, const int64_t *shape, void *data, uint64_t nbytes, ds_error *err) {
    if (c->w && c->w_bytes + nbytes > c->shard_bytes && flush_shard(c, err)) return -1;
    if (!c->w) c->w = ds_stw_new();
    ds_stw_add(c->w, name, dt, ndim, shape, data, 0);
    c->w_bytes += nbytes;
    cJSON_AddNumberToObject(c->map, name, c->n_shards);
    return 0;
}

static float *widen(const ds_tensor *t) {
    int64_t n = ds_tensor_numel(t);
    float *f = ds_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        f[i] = t->dtype == DS_DT_F32 ? ((const float *)t->data)[i] : ds_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return f;
}

/* A float tensor as the official layout stores it: F32 where ds_official_float_is_f32 says so,
 * else BF16 (the export's F32 head, norms and compressor weights rounded to nearest even). */
static int add_float(conv *c, const ds_tensor *t, ds_error *err) {
    if (t->dtype != DS_DT_F32 || ds_official_float_is_f32(t->name))
        return add_out(c, t->name, t->dtype, t->ndim, t->shape, (void *)t->data, t->nbytes, err);
    const int64_t n = ds_tensor_numel(t);
    uint16_t *b = ds_xmalloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) b[i] = ds_f32_to_bf16(((const float *)t->data)[i]);
    int rc = add_out(c, t->name, DS_DT_BF16, t->ndim, t->shape, b, (uint64_t)n * 2, err);
    free(b);
    return rc;
}

static int convert_tensor(conv *c, const ds_tensor *t, ds_error *err) {
    ds_official_kind k = ds_official_kind_of(t->name, c->n_mtp);
    if (k == DS_OFF_DROP) return 0;
    if (k == DS_OFF_FLOAT) return add_float(c, t, err);
    if (t->ndim != 2 || (t->dtype != DS_DT_BF16 && t->dtype != DS_DT_F32))
        return ds_fail(err, "E_SRC_FORMAT", "%s: expected a 2-D float tensor to encode, found %s", t->name, ds_dtype_name(t->dtype));
    const int64_t out = t->shape[0], in = t->shape[1];
    if (k != DS_OFF_FP8 && in % 32)
        return ds_fail(err, "E_SHAPE_MISMATCH", "%s: expected a multiple of 32 inputs for per-32 scales, found %lld", t->name, (long long)in);
    float *f = widen(t);
    char sname[160];
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(strlen(t->name) - 7), t->name);   /* X.weight -> X.scale */
    int64_t qs[2] = {out, k == DS_OFF_MXFP4 ? in / 2 : in}, ss[2] = {out, in / 32};
    if (k == DS_OFF_FP8) { ss[0] = (out + 31) / 32; ss[1] = (in + 31) / 32; }
    uint8_t *q = ds_xcalloc((size_t)(qs[0] * qs[1]), 1), *s = ds_xcalloc((size_t)(ss[0] * ss[1]), 1);
    if (k == DS_OFF_FP8) encode_fp8_tiles(f, out, in, q, s);
    else encode_rows32(f, out, in, k == DS_OFF_MXFP4, q, s);
    int rc = add_out(c, t->name, k == DS_OFF_MXFP4 ? DS_DT_U8 : DS_DT_F8_E4M3, 2, qs, q, (uint64_t)(qs[0] * qs[1]), err);
    if (!rc) rc = add_out(c, sname, DS_DT_F8_E8M0, 2, ss, s, (uint64_t)(ss[0] * ss[1]), err);
    free(f); free(q); free(s);
    return rc;
}

static int convert_file(conv *c, const char *rel, ds_error *err) {
    char *path = ds_path_join(c->src, rel);
    ds_stfile *f = NULL;
    int rc = ds_st_open(path, &f, err);
    free(path);
    for (int i = 0; !rc && i < f->n_tensors; i++) rc = convert_tensor(c, &f->tensors[i], err);
    ds_st_close(f);
    return rc;
}

/* Remove `"key": {...}` (and the comma after it) from a JSON object text. */
static void drop_object_member(char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    char *k = strstr(text, pat), *p = k ? strchr(k, '{') : NULL;
    if (!p) return;
    int depth = 0;
    do { depth += *p == '{' ? 1 : *p == '}' ? -1 : 0; p++; } while (*p && depth);
    while (*p == ' ' || *p == ',' || *p == '\n') p++;
    memmove(k, p, strlen(p) + 1);
}

/* config.json of the official layout: the float config with the fp8 quantization_config, the flat
 * dtype fields and no rotation block.  Edited as text, not re-printed through cJSON: the Engram
 * hash multipliers are integers beyond 2^53 that a double would round. */
static int write_config(conv *c, ds_error *err) {
    char *p = ds_path_join(c->src, "config.json"), *text = NULL;
    size_t len = 0;
    int rc = ds_read_file(p, &text, &len, err);
    free(p);
    if (rc) return -1;
    drop_object_member(text, "quantization_config");
    drop_object_member(text, "engram_rotation_config");
    char *open = strchr(text, '{');
    if (!open) { free(text); return ds_fail(err, "E_CONFIG", "float export config.json: expected a JSON object"); }
    static const char head[] = "{\"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", "
                               "\"weight_block_size\": [32, 32], \"scale_fmt\": \"ue8m0\", \"expert_dtype\": \"fp4\"}, "
                               "\"dtype\": \"fp8\", \"expert_dtype\": \"fp4\", ";
    size_t n = strlen(head) + strlen(open + 1) + 1;
    char *out = ds_xmalloc(n), *dp = ds_path_join(c->dst, "config.json");
    snprintf(out, n, "%s%s", head, open + 1);
    rc = ds_write_file_atomic(dp, out, strlen(out), err);
    free(out); free(dp); free(text);
    return rc;
}

static int copy_aux(conv *c, const char *rel, ds_error *err) {
    char *sp = ds_path_join(c->src, rel), *dp = ds_path_join(c->dst, rel), *data = NULL;
    size_t len = 0;
    int rc = 0;
    if (ds_file_exists(sp)) {
        rc = ds_read_file(sp, &data, &len, err);
        if (!rc) rc = ds_write_file_atomic(dp, data, len, err);
    }
    free(sp); free(dp); free(data);
    return rc;
}

/* Shards get their final `model-0000N-of-0000M` names and the index maps tensors to them. */
static int finish_index(conv *c, ds_error *err) {
    cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
    cJSON_AddObjectToObject(idx, "metadata");
    char **finals = ds_xcalloc((size_t)c->n_shards + 1, sizeof(char *));
    int rc = 0;
    for (int i = 0; i < c->n_shards && !rc; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "model-%05d-of-%05d.safetensors", i + 1, c->n_shards);
        finals[i] = ds_xstrdup(rel);
        char *p = ds_path_join(c->dst, rel);
        if (rename(c->shard_names[i], p)) rc = ds_fail(err, "E_IO", "%s: rename failed", p);
        free(p);
    }
    for (cJSON *e = c->map->child; e && !rc; e = e->next) cJSON_AddStringToObject(wm, e->string, finals[(int)e->valuedouble]);
    if (!rc) {
        char *text = cJSON_Print(idx), *p = ds_path_join(c->dst, DS_OFFICIAL_INDEX);
        rc = ds_write_file_atomic(p, text, strlen(text), err);
        free(text); free(p);
    }
    for (int i = 0; i < c->n_shards; i++) free(finals[i]);
    free(finals);
    cJSON_Delete(idx);
    return rc;
}

int ds_mk_officialize(const char *float_dir, const char *dst, int n_mtp, uint64_t shard_bytes, ds_error *err) {
    conv c = {.src = float_dir, .dst = dst, .n_mtp = n_mtp, .shard_bytes = shard_bytes ? shard_bytes : ((uint64_t)2 << 30)};
    c.map = cJSON_CreateObject();
    char *ip = ds_path_join(float_dir, DS_OFFICIAL_INDEX), *text = NULL;
    size_t len = 0;
    int rc = ds_mkdir_p(dst, err);
    if (!rc) rc = ds_read_file(ip, &text, &len, err);
    free(ip);
    cJSON *idx = rc ? NULL : cJSON_Parse(text);
    free(text);
    cJSON *wm = idx ? cJSON_GetObjectItemCaseSensitive(idx, "weight_map") : NULL;
    if (!rc && !wm) rc = ds_fail(err, "E_INDEX_PARSE", "%s: float export index: expected a weight_map", float_dir);
    /* each shard once, in the order the index first names it */
    cJSON *seen = cJSON_CreateObject();
    for (cJSON *e = wm ? wm->child : NULL; e && !rc; e = e->next) {
        if (!cJSON_IsString(e) || cJSON_GetObjectItemCaseSensitive(seen, e->valuestring)) continue;
        cJSON_AddTrueToObject(seen, e->valuestring);
        rc = convert_file(&c, e->valuestring, err);
    }
    cJSON_Delete(seen);
    cJSON_Delete(idx);
    if (!rc) rc = flush_shard(&c, err);
    if (!rc) rc = finish_index(&c, err);
    if (!rc) rc = write_config(&c, err);
    static const char *const aux[] = {"tokenizer.json", "tokenizer_config.json", "engram_token_map.bin"};
    for (size_t i = 0; i < DS_ARRAY_LEN(aux) && !rc; i++) rc = copy_aux(&c, aux[i], err);
    for (int i = 0; i < c.n_shards; i++) { if (rc) remove(c.shard_names[i]); free(c.shard_names[i]); }
    free(c.shard_names);
    if (c.w) ds_stw_free(c.w);
    cJSON_Delete(c.map);
    return rc;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

void ds_mk_remove_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }
