/* The bench prompt set and its exact calibration (TOOLS.md §4.2).
 *
 * Why natural language calibrated through the server's own /tokenize: prompt content alone swung
 * a configuration between 45 and 145 tok/s, and a prompt "of 1024 tokens" measured by a different
 * tokenizer is not 1024 tokens on the server.  Each prompt is a marker that makes its first KV
 * block unique, a slice of the corpus and a question suffix; the slice length (in code points) is
 * binary-searched until the server counts exactly the target.
 *
 * The corpus is treated as circular (a slice that runs past the end continues at the start), so
 * the count grows monotonically with the slice length from any start, which the binary search
 * needs; the overlap between neighbouring slices is reported.  Calibration issues many /tokenize
 * calls, so prompts are calibrated on a few threads at once. */
#define _GNU_SOURCE
#include "io/io_util.h"
#include "tools/bench_client.h"
#include "base/common.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_default_suffixes[] = {
    "\n\nQuote the first sentence of the text above exactly.",
    "\n\nWho is mentioned first in the text above?",
    "\n\nContinue the text above.",
    "\n\nHow many sentences does the text above contain?",
};
/* The line that ends a Project Gutenberg header: the default front matter to skip. */
#define DEFAULT_MARK_PREFIX "*** START OF"

typedef struct {
    char *text;          /* corpus after the front matter */
    size_t *cp;          /* byte offset of each code point, cp[n_cp] = bytes */
    size_t n_cp;
    char **suffix;
    int n_suffix;
} corpus;

static char *read_file(const char *path, size_t *len, char *why, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(why, n, "%s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, used = 0;
    char *b = ds_xmalloc(cap);
    size_t got;
    while ((got = fread(b + used, 1, cap - used - 1, f)) > 0) {
        used += got;
        if (cap - used < 2) b = ds_xrealloc(b, cap *= 2);
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(b); snprintf(why, n, "%s: read error", path); return NULL; }
    b[used] = 0;
    *len = used;
    return b;
}

/* Code-point offsets of valid UTF-8; -1 with the byte offset of the first bad sequence. */
static long utf8_index(const char *s, size_t n, size_t **cp, size_t *n_cp) {
    size_t *o = ds_xmalloc(sizeof(size_t) * (n + 1)), k = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || c == 0 || i + len > n) { free(o); return (long)i; }
        for (int j = 1; j < len; j++)
            if (((unsigned char)s[i + j] >> 6) != 2) { free(o); return (long)i; }
        o[k++] = i;
        i += len;
    }
    o[k] = n;
    *cp = o;
    *n_cp = k;
    return -1;
}

/* Skip the front matter: through the first line equal to `mark`, or (no mark, not keep) through a
 * line starting with the Gutenberg header end.  Returns the byte offset where the corpus starts, or
 * -1 when a given mark is absent. */
static long front_matter_end(const char *s, const char *mark, bool keep) {
    if (keep) return 0;
    for (const char *line = s; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        size_t cmp = len && line[len - 1] == '\r' ? len - 1 : len;
        bool hit = mark ? (cmp == strlen(mark) && !memcmp(line, mark, cmp))
                        : !strncmp(line, DEFAULT_MARK_PREFIX, strlen(DEFAULT_MARK_PREFIX));
        if (hit) return nl ? (long)(nl + 1 - s) : (long)strlen(s);
        if (!nl) break;
        line = nl + 1;
    }
    return mark ? -1 : 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int load_suffixes(const char *dir, corpus *c) {
    if (!dir) {
        c->n_suffix = (int)DS_ARRAY_LEN(k_default_suffixes);
        c->suffix = ds_xmalloc(sizeof(char *) * c->n_suffix);
        for (int i = 0; i < c->n_suffix; i++) c->suffix[i] = ds_xstrdup(k_default_suffixes[i]);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) { fprintf(stderr, "dsflash bench: --suffix-dir %s: %s\n", dir, strerror(errno)); return errno == ENOENT ? 5 : 3; }
    char **names = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = ds_xrealloc(names, sizeof(char *) * (n + 1));
        names[n++] = ds_xstrdup(e->d_name);
    }
    closedir(d);
    if (!n) { fprintf(stderr, "dsflash bench: --suffix-dir %s: no suffix files\n", dir); free(names); return 5; }
    qsort(names, (size_t)n, sizeof(char *), cmp_str);
    c->suffix = ds_xmalloc(sizeof(char *) * n);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096], why[512];
        size_t len;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        c->suffix[c->n_suffix] = rc ? NULL : read_file(path, &len, why, sizeof why);
        if (!rc && !c->suffix[c->n_suffix]) { fprintf(stderr, "dsflash bench: --suffix-dir: %s\n", why); rc = 3; }
        if (!rc) c->n_suffix++;
        free(names[i]);
    }
    free(names);
    return rc;
}

static int load_corpus(const bench_opts *o, corpus *c) {
    char why[512];
    size_t len;
    char *raw = read_file(o->corpus_file, &len, why, sizeof why);
    if (!raw) { fprintf(stderr, "dsflash bench: --corpus-file %s\n", why); return errno == ENOENT ? 5 : 3; }
    long start = front_matter_end(raw, o->corpus_mark, o->keep_preamble);
    if (start < 0) {
        fprintf(stderr, "dsflash bench: --corpus-mark: no line equal to '%s' in %s\n", o->corpus_mark, o->corpus_file);
        free(raw);
        return 2;
    }
    c->text = ds_xstrdup(raw + start);
    free(raw);
    long bad = utf8_index(c->text, strlen(c->text), &c->cp, &c->n_cp);
    if (bad >= 0 || strlen(c->text) != len - (size_t)start) {
        fprintf(stderr, "dsflash bench: --corpus-file %s: not UTF-8 text (bad or NUL byte at offset %ld)\n",
                o->corpus_file, bad >= 0 ? bad + start : (long)(strlen(c->text) + start));
        return 1;
    }
    if (c->n_cp < 16) { fprintf(stderr, "dsflash bench: --corpus-file %s: %zu characters after the front matter\n",
                                o->corpus_file, c->n_cp); return 1; }
    return load_suffixes(o->suffix_dir, c);
}

static void corpus_free(corpus *c) {
    free(c->text);
    free(c->cp);
    for (int i = 0; i < c->n_suffix; i++) free(c->suffix[i]);
    free(c->suffix);
}

/* "[req-%05d] " + circular slice [start, start+len) + suffix. */
static char *make_prompt(const corpus *c, int rid, size_t start, size_t len, const char *suffix) {
    char head[32];
    int hn = snprintf(head, sizeof head, "[req-%05d] ", rid);
    size_t s = start % c->n_cp, e = s + len, bytes = 0;
    size_t first_end = DS_MIN(e, c->n_cp);
    bytes += c->cp[first_end] - c->cp[s];
    if (e > c->n_cp) bytes += c->cp[e - c->n_cp];
    size_t sl = strlen(suffix);
    char *p = ds_xmalloc((size_t)hn + bytes + sl + 1), *w = p;
    memcpy(w, head, (size_t)hn), w += hn;
    memcpy(w, c->text + c->cp[s], c->cp[first_end] - c->cp[s]), w += c->cp[first_end] - c->cp[s];
    if (e > c->n_cp) memcpy(w, c->text, c->cp[e - c->n_cp]), w += c->cp[e - c->n_cp];
    memcpy(w, suffix, sl + 1);
    return p;
}

int bench_tokenize(const bench_run *r, const char *text, bool add_special, int **ids, int *n_ids, char *why,
                   size_t why_len) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", r->model);
    cJSON_AddStringToObject(b, "prompt", text);
    if (!add_special) cJSON_AddBoolToObject(b, "add_special_tokens", 0);
    char *body = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    ds_http_response resp;
    int rc = ds_http_post_json(&r->tok_http, "/tokenize", body, r->o->timeout_s, &resp);
    free(body);
    int count = -1;
    cJSON *j = rc ? NULL : cJSON_Parse(resp.body);
    const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(j, "count");
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (rc) snprintf(why, why_len, "%s", resp.error);
    else if (resp.status != 200) snprintf(why, why_len, "/tokenize answered HTTP %ld: %.200s", resp.status, resp.body);
    else if (cJSON_IsNumber(cnt)) count = (int)ds_io_json_int_or(cnt, 0, INT32_MAX, -1);
    else if (cJSON_IsArray(toks)) count = cJSON_GetArraySize(toks);
    else snprintf(why, why_len, "/tokenize answer has neither 'count' nor 'tokens': %.200s", resp.body);
    if (count >= 0 && ids && cJSON_IsArray(toks)) {
        *n_ids = cJSON_GetArraySize(toks);
        *ids = ds_xmalloc(sizeof(int) * (size_t)(*n_ids + 1));
        int k = 0;
        for (const cJSON *t = toks->child; t; t = t->next) (*ids)[k++] = (int)ds_io_json_int_or(t, 0, INT32_MAX, -1);
    }
    cJSON_Delete(j);
    ds_http_response_free(&resp);
    return count;
}

/* ---- calibration ---- */

typedef struct {
    bench_run *r;
    const corpus *c;
    size_t stride;
    int next, failed;
    char why[512];
    pthread_mutex_t mu;
} calib_job;

/* Count of the prompt built from (start, len); -1 on a tokenize failure (recorded in the job). */
static int count_at(calib_job *j, int rid, size_t start, size_t len) {
    const corpus *c = j->c;
    char *p = make_prompt(c, rid, start, len, c->suffix[rid % c->n_suffix]);
    char why[512];
    int n = bench_tokenize(j->r, p, true, NULL, NULL, why, sizeof why);
    free(p);
    if (n < 0) {
        pthread_mutex_lock(&j->mu);
        if (!j->failed) snprintf(j->why, sizeof j->why, "%s", why);
        j->failed = 1;
        pthread_mutex_unlock(&j->mu);
    }
    return n;
}

/* Binary search, local scan, then start shifts (TOOLS.md §4.2); keeps the closest. */
static int calibrate_one(calib_job *j, int rid, bench_prompt *out) {
    const int target = j->r->o->prompt_tokens;
    const size_t hi_len = DS_MIN((size_t)4 * (size_t)target, j->c->n_cp);
    int best_dev = 1 << 30;
    for (int shift = 0; shift <= 8; shift++) {
        size_t start = ((size_t)rid * j->stride + 37u * (size_t)shift) % j->c->n_cp;
        size_t lo = 1, hi = hi_len;
        int c_hi = count_at(j, rid, start, hi);
        if (c_hi < 0) return -1;
        if (c_hi < target) {   /* even the longest slice is short: keep it as the closest */
            if (target - c_hi < best_dev) *out = (bench_prompt){.tokens = c_hi, .dev = c_hi - target, .start = start, .len = hi};
            best_dev = DS_MIN(best_dev, target - c_hi);
            continue;
        }
        while (lo < hi) {   /* smallest len with count >= target */
            size_t mid = lo + (hi - lo) / 2;
            int cm = count_at(j, rid, start, mid);
            if (cm < 0) return -1;
            if (cm >= target) hi = mid; else lo = mid + 1;
        }
        for (long d = 0; d <= 6; d++) {   /* lo first, then lo-3 .. lo+3 */
            long len = d == 0 ? (long)lo : (long)lo - 3 + (d - 1) + (d > 3);
            if (len < 1 || (size_t)len > hi_len) continue;
            int cn = count_at(j, rid, start, (size_t)len);
            if (cn < 0) return -1;
            if (abs(cn - target) < best_dev) {
                best_dev = abs(cn - target);
                *out = (bench_prompt){.tokens = cn, .dev = cn - target, .start = start, .len = (size_t)len};
            }
            if (cn == target) return 0;
        }
    }
    return 0;
}

static void *calib_worker(void *arg) {
    calib_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int rid = j->failed ? j->r->prompts.n : j->next++;
        pthread_mutex_unlock(&j->mu);
        if (rid >= j->r->prompts.n) return NULL;
        bench_prompt *p = &j->r->prompts.p[rid];
        if (calibrate_one(j, rid, p)) return NULL;
        p->text = make_prompt(j->c, rid, p->start, p->len, j->c->suffix[rid % j->c->n_suffix]);
    }
}

/* Largest overlap (code points) between any two slices on the circular corpus. */
static size_t max_overlap(const bench_prompt_set *s, size_t n_cp) {
    size_t worst = 0;
    for (int a = 0; a < s->n; a++)
        for (int b = a + 1; b < s->n; b++) {
            size_t sa = s->p[a].start, la = s->p[a].len, sb = s->p[b].start, lb = s->p[b].len;
            for (int wrap = -1; wrap <= 1; wrap++) {   /* b shifted by one corpus length either way */
                long bs = (long)sb + wrap * (long)n_cp, lo = DS_MAX((long)sa, bs);
                long hi = DS_MIN((long)(sa + la), bs + (long)lb);
                if (hi > lo) worst = DS_MAX(worst, (size_t)(hi - lo));
            }
        }
    return worst;
}

int bench_build_prompts(bench_run *r) {
    corpus c = {0};
    int rc = load_corpus(r->o, &c);
    if (rc) { corpus_free(&c); return rc; }
    int n = 0;
    for (int i = 0; i < r->o->n_levels; i++) n = DS_MAX(n, r->o->levels[i]);
    bench_prompt_set *s = &r->prompts;
    s->n = n;
    s->p = ds_xcalloc((size_t)n, sizeof(bench_prompt));
    calib_job j = {.r = r, .c = &c, .stride = DS_MAX((size_t)1, c.n_cp / (size_t)n)};
    pthread_mutex_init(&j.mu, NULL);
    pthread_t th[8];
    int nt = DS_MIN(n, 8);
    for (int t = 0; t < nt; t++) pthread_create(&th[t], NULL, calib_worker, &j);
    for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.mu);
    if (j.failed) {
        fprintf(stderr, "dsflash bench: calibration through /tokenize failed: %s\n", j.why);
        corpus_free(&c);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        s->exact += s->p[i].dev == 0;
        s->max_dev = DS_MAX(s->max_dev, abs(s->p[i].dev));
    }
    s->overlap_chars = max_overlap(s, c.n_cp);
    printf("calibration: %d/%d prompts exactly %d tokens, max deviation %d, max slice overlap %zu characters\n",
           s->exact, n, r->o->prompt_tokens, s->max_dev, s->overlap_chars);
    corpus_free(&c);
    return 0;
}

void bench_prompts_free(bench_prompt_set *s) {
    for (int i = 0; i < s->n; i++) free(s->p[i].text);
    free(s->p);
    s->p = NULL;
}
