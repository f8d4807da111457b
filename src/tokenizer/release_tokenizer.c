/* Writing a V4.1-style tokenizer (see release_tokenizer.h for why it exists).
 *
 * Full layout (vocab_size >= 129280): the base tokenizer.json unchanged except for added tokens:
 * the V4.1 control tokens at documented ids from 128815 on, `<｜deepseek_image｜>` at image_id
 * (129264), and placeholders `<｜place▁holder▁no▁N｜>` for every other id up to vocab_size, so the
 * id space has no holes.  Cut-down layout (vocab_size <= 4096): the base model entries and merges
 * whose ids are all below a cutoff (vocab_size - 32; the 256 byte symbols are ids 3..258 in the
 * DeepSeek BPE, checked below), BOS/EOS/PAD at 0/1/2, and the top 32 ids holding the control
 * tokens, the noise token at noise_id and the image token at image_id.  In both layouts the noise
 * token's literal is `<｜place▁holder▁no▁799｜>` (what the base holds at 128799) so it can be
 * found by string. */
#define _GNU_SOURCE
#include "tokenizer/release_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "base/fsutil.h"
#include <cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FULL_VOCAB 129280
#define TOP_REGION 32
#define NOISE_LITERAL "<｜place▁holder▁no▁799｜>"
#define IMAGE_LITERAL "<｜deepseek_image｜>"

/* V4.1 control tokens not in the base, in the order they receive ids (docs/TOKENIZER.md). */
static const char *const V41_TOKENS[] = {
    "<｜System｜>", "<｜latest_reminder｜>", "<think>", "</think>", "｜DSML｜",
    "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>",
};
/* Base control tokens the cut-down layout keeps (the full layout keeps all of them). */
static const char *const KEEP_SMALL[] = {"<｜User｜>", "<｜Assistant｜>"};

static cJSON *added_entry(int id, const char *content, bool special) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddStringToObject(o, "content", content);
    cJSON_AddBoolToObject(o, "single_word", false);
    cJSON_AddBoolToObject(o, "lstrip", false);
    cJSON_AddBoolToObject(o, "rstrip", false);
    cJSON_AddBoolToObject(o, "normalized", !special);
    cJSON_AddBoolToObject(o, "special", special);
    return o;
}

static int write_json(const char *dir, const char *name, cJSON *root, ds_error *err) {
    char *text = cJSON_PrintUnformatted(root);
    char *path = ds_path_join(dir, name);
    int rc = ds_write_file_atomic(path, text, strlen(text), err);
    free(path);
    cJSON_free(text);
    return rc;
}

static int write_config(const char *dir, const char *pad, ds_error *err) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddBoolToObject(c, "add_bos_token", true);
    cJSON_AddBoolToObject(c, "add_eos_token", false);
    cJSON_AddStringToObject(c, "bos_token", "<｜begin▁of▁sentence｜>");
    cJSON_AddStringToObject(c, "eos_token", "<｜end▁of▁sentence｜>");
    cJSON_AddStringToObject(c, "pad_token", pad);
    cJSON_AddNullToObject(c, "unk_token");
    cJSON_AddBoolToObject(c, "clean_up_tokenization_spaces", false);
    cJSON_AddBoolToObject(c, "legacy", true);
    cJSON_AddNumberToObject(c, "model_max_length", 1048576);
    cJSON_AddStringToObject(c, "tokenizer_class", "LlamaTokenizerFast");
    int rc = write_json(dir, "tokenizer_config.json", c, err);
    cJSON_Delete(c);
    return rc;
}

static bool content_present(const cJSON *added, const char *content, int *id) {
    const cJSON *it;
    cJSON_ArrayForEach(it, added) {
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "content")), content)) {
            if (id) *id = cJSON_GetObjectItem(it, "id")->valueint;
            return true;
        }
    }
    return false;
}

static int build_full(cJSON *root, int vocab_size, int noise_id, int image_id, const char *base, ds_error *err) {
    cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
    int max_id = -1, nid;
    const cJSON *it;
    cJSON_ArrayForEach(it, added) max_id = DS_MAX(max_id, cJSON_GetObjectItem(it, "id")->valueint);
    if (!content_present(added, NOISE_LITERAL, &nid) || nid != noise_id)
        return ds_fail(err, "E_TOKENIZER_RELEASE", "%s: noise id %d: the base must hold %s there (the full layout keeps the base ids)", base, noise_id, NOISE_LITERAL);
    if (!content_present(added, "<｜Assistant｜>", &nid) || nid != 128804)
        return ds_fail(err, "E_TOKENIZER_RELEASE", "%s: <｜Assistant｜> is not at id 128804 (the V4.1 chat layout needs it there)", base);
    if (image_id <= max_id + (int)DS_ARRAY_LEN(V41_TOKENS) || image_id >= vocab_size)
        return ds_fail(err, "E_TOKENIZER_RELEASE", "image id %d must lie in (%d, %d)", image_id, max_id + (int)DS_ARRAY_LEN(V41_TOKENS), vocab_size);
    int id = max_id + 1;
    for (size_t i = 0; i < DS_ARRAY_LEN(V41_TOKENS); i++) {
        if (content_present(added, V41_TOKENS[i], NULL))
            return ds_fail(err, "E_TOKENIZER_RELEASE", "%s already defines %s", base, V41_TOKENS[i]);
        cJSON_AddItemToArray(added, added_entry(id++, V41_TOKENS[i], false));
    }
    for (; id < vocab_size; id++) {
        if (id == image_id) { cJSON_AddItemToArray(added, added_entry(id, IMAGE_LITERAL, false)); continue; }
        char lit[64];
        snprintf(lit, sizeof lit, "<｜place▁holder▁no▁%d｜>", id - 128000);   /* the base numbering */
        cJSON_AddItemToArray(added, added_entry(id, lit, true));
    }
    return 0;
}

static int build_small(cJSON *root, int vocab_size, int noise_id, int image_id, const char *base, ds_error *err) {
    int cutoff = vocab_size - TOP_REGION;
    if (noise_id < cutoff || noise_id >= vocab_size || image_id < cutoff || image_id >= vocab_size || noise_id == image_id)
        return ds_fail(err, "E_TOKENIZER_RELEASE", "noise id %d and image id %d must be distinct ids in the top region [%d, %d)", noise_id, image_id, cutoff, vocab_size);
    cJSON *model = cJSON_GetObjectItem(root, "model");
    cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    cJSON *merges = cJSON_GetObjectItem(model, "merges");
    /* keep vocabulary entries below the cutoff */
    cJSON *nv = cJSON_CreateObject();
    cJSON *it;
    cJSON_ArrayForEach(it, vocab) if (it->valueint < cutoff) cJSON_AddNumberToObject(nv, it->string, it->valueint);
    cJSON_ReplaceItemInObject(model, "vocab", nv);
    if (cJSON_GetArraySize(nv) != cutoff)
        return ds_fail(err, "E_TOKENIZER_RELEASE", "%s: ids below %d are not all defined by the base vocabulary", base, cutoff);
    /* keep merges whose parts and result survive (ranks keep their relative order) */
    cJSON *nm = cJSON_CreateArray();
    char *buf = NULL;
    size_t cap = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *s = cJSON_GetStringValue(it), *sp = s ? strchr(s, ' ') : NULL;
        if (!sp) { free(buf); return ds_fail(err, "E_TOKENIZER_RELEASE", "%s: merges must be \"a b\" strings", base); }
        size_t la = (size_t)(sp - s), lb = strlen(sp + 1);
        if (la + lb + 1 > cap) { cap = 2 * (la + lb + 1); buf = ds_xrealloc(buf, cap); }
        memcpy(buf, s, la); buf[la] = 0;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(nv, buf);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(nv, sp + 1);
        memcpy(buf + la, sp + 1, lb + 1);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(nv, buf);
        if (a && b && m) cJSON_AddItemToArray(nm, cJSON_CreateString(s));
    }
    free(buf);
    cJSON_ReplaceItemInObject(model, "merges", nm);
    /* added tokens: BOS/EOS/PAD from the base, then the top region */
    cJSON *old = cJSON_GetObjectItem(root, "added_tokens");
    cJSON *na = cJSON_CreateArray();
    cJSON_ArrayForEach(it, old) if (cJSON_GetObjectItem(it, "id")->valueint < 3) cJSON_AddItemToArray(na, cJSON_Duplicate(it, true));
    if (cJSON_GetArraySize(na) != 3) return ds_fail(err, "E_TOKENIZER_RELEASE", "%s: BOS/EOS/PAD are not ids 0, 1, 2", base);
    const char *named[DS_ARRAY_LEN(KEEP_SMALL) + DS_ARRAY_LEN(V41_TOKENS)];
    size_t nn = 0;
    for (size_t i = 0; i < DS_ARRAY_LEN(KEEP_SMALL); i++) named[nn++] = KEEP_SMALL[i];
    for (size_t i = 0; i < DS_ARRAY_LEN(V41_TOKENS); i++) named[nn++] = V41_TOKENS[i];
    size_t k = 0;
    int ph = 0;
    for (int id = cutoff; id < vocab_size; id++) {
        if (id == noise_id) cJSON_AddItemToArray(na, added_entry(id, NOISE_LITERAL, true));
        else if (id == image_id) cJSON_AddItemToArray(na, added_entry(id, IMAGE_LITERAL, false));
        else if (k < nn) cJSON_AddItemToArray(na, added_entry(id, named[k++], false));
        else {
            char lit[64];
            snprintf(lit, sizeof lit, "<｜place▁holder▁no▁%d｜>", ph++);   /* few: never reaches 799 */
            cJSON_AddItemToArray(na, added_entry(id, lit, true));
        }
    }
    cJSON_ReplaceItemInObject(root, "added_tokens", na);
    return 0;
}

int ds_tokenizer_write_release(const char *base, int vocab_size, int noise_id, int image_id,
                               const char *out_dir, ds_error *err) {
    if (!base) return ds_fail(err, "E_MISSING_FILE", "no base tokenizer.json (run scripts/install-deps.sh or set DSFLASH_TOKENIZER_BASE)");
    if (!(vocab_size >= FULL_VOCAB || (vocab_size >= 512 && vocab_size <= 4096)))
        return ds_fail(err, "E_TOKENIZER_RELEASE", "vocab_size %d: supported are >= %d (real layout) or 512..4096 (cut-down)", vocab_size, FULL_VOCAB);
    char *data;
    size_t len;
    if (ds_read_file(base, &data, &len, err) < 0) return -1;
    cJSON *root = cJSON_ParseWithLength(data, len);
    free(data);
    if (!root || !cJSON_IsArray(cJSON_GetObjectItem(root, "added_tokens")) || !cJSON_IsObject(cJSON_GetObjectItem(root, "model"))) {
        cJSON_Delete(root);
        return ds_fail(err, "E_TOKENIZER_RELEASE", "%s: not a tokenizer.json with model and added_tokens", base);
    }
    int rc = vocab_size >= FULL_VOCAB ? build_full(root, vocab_size, noise_id, image_id, base, err)
                                      : build_small(root, vocab_size, noise_id, image_id, base, err);
    if (rc == 0 && ds_mkdir_p(out_dir, err) < 0) rc = -1;
    if (rc == 0) rc = write_json(out_dir, "tokenizer.json", root, err);
    cJSON_Delete(root);
    if (rc == 0) rc = write_config(out_dir, "<｜▁pad▁｜>", err);
    if (rc < 0) return -1;
    /* the result must load, cover every id below vocab_size and put the fixed ids where they belong */
    char *path = ds_path_join(out_dir, "tokenizer.json");
    ds_tokenizer *tok;
    rc = ds_tokenizer_load(path, &tok, err);
    free(path);
    if (rc < 0) return -1;
    int got = ds_tokenizer_vocab_size(tok);
    for (int id = 0; id < got && rc == 0; id++)
        if (!ds_tokenizer_id_to_token(tok, id)) rc = ds_fail(err, "E_TOKENIZER_RELEASE", "written tokenizer leaves id %d undefined", id);
    if (rc == 0 && got != vocab_size) rc = ds_fail(err, "E_TOKENIZER_RELEASE", "written tokenizer defines %d ids, expected %d", got, vocab_size);
    if (rc == 0 && (ds_tokenizer_token_id(tok, IMAGE_LITERAL) != image_id || ds_tokenizer_token_id(tok, NOISE_LITERAL) != noise_id))
        rc = ds_fail(err, "E_TOKENIZER_RELEASE", "written tokenizer misplaces the image or noise token");
    ds_tokenizer_free(tok);
    return rc;
}

/* ---- locating the fetched base -------------------------------------------------------------- */

#define BASE_REL ".cache/tokenizer-data/deepseek_v3/tokenizer.json"
static char g_base[4096];
static pthread_once_t g_base_once = PTHREAD_ONCE_INIT;

static bool try_dir(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, BASE_REL);
    if (!ds_file_exists(p)) return false;
    char *r = realpath(p, NULL);
    snprintf(g_base, sizeof g_base, "%s", r ? r : p);
    free(r);
    return true;
}

static void find_base(void) {
    const char *env = getenv("DSFLASH_TOKENIZER_BASE");
    if (env && *env) {
        if (ds_file_exists(env)) snprintf(g_base, sizeof g_base, "%s", env);
        return;   /* an explicit setting is never second-guessed */
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        for (int up = 0; up < 6; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash || slash == exe) break;
            *slash = 0;
            if (try_dir(exe)) return;
        }
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) try_dir(cwd);
}

const char *ds_tokenizer_default_base(void) {
    pthread_once(&g_base_once, find_base);
    return g_base[0] ? g_base : NULL;
}
