/* Backtracking regex engine over code points (see uregex.h for the supported syntax).
 *
 * Design: the pattern is parsed into a node array (SET, SEQ, ALT, REP, LOOK, BOL, EOL).  Matching
 * is recursive with explicit continuations, which gives Perl/Oniguruma leftmost-first semantics
 * directly: an alternative or a repetition count is abandoned only when everything after it
 * fails.  Two things keep it fast on tokenizer patterns: every character class is precomputed as
 * a bitmap over the whole BMP (so a class test is one bit test), and a repetition of a single class
 * first counts its maximal run and then backs off, instead of recursing once per character. */
#define _GNU_SOURCE
#include "tokenizer/uregex.h"
#include "tokenizer/utf8.h"
#include "base/common.h"
#include <utf8proc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Unicode properties --------------------------------------------------------------------- */

static uint8_t g_cat_bmp[65536];
static pthread_once_t g_cat_once = PTHREAD_ONCE_INIT;
static void init_cat(void) {
    for (uint32_t c = 0; c < 65536; c++) g_cat_bmp[c] = (uint8_t)utf8proc_category((utf8proc_int32_t)c);
}
int ds_ucat(uint32_t cp) {
    if (cp < 65536) {
        pthread_once(&g_cat_once, init_cat);
        return g_cat_bmp[cp];
    }
    if (cp > 0x10FFFF) return UTF8PROC_CATEGORY_CN;
    return utf8proc_category((utf8proc_int32_t)cp);
}
bool ds_uwhite(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* ---- character sets ------------------------------------------------------------------------- */

enum { IT_RANGE, IT_CATS, IT_WHITE };
typedef struct item {
    int kind;
    bool neg;
    uint32_t lo, hi;      /* IT_RANGE */
    uint32_t cats;        /* IT_CATS: bit per utf8proc category */
} item;

typedef struct cset {
    bool neg;
    item *items;
    int n, cap;
    uint64_t *bmp;        /* 65536 bits, filled at compile time */
} cset;

static bool item_has(const item *it, uint32_t cp) {
    bool r;
    switch (it->kind) {
    case IT_RANGE: r = cp >= it->lo && cp <= it->hi; break;
    case IT_CATS: r = (it->cats >> ds_ucat(cp)) & 1; break;
    default: r = ds_uwhite(cp); break;
    }
    return r != it->neg;
}
static bool cset_eval(const cset *s, uint32_t cp) {
    bool r = false;
    for (int i = 0; i < s->n && !r; i++) r = item_has(&s->items[i], cp);
    return r != s->neg;
}
static inline bool cset_has(const cset *s, uint32_t cp) {
    if (cp < 65536) return (s->bmp[cp >> 6] >> (cp & 63)) & 1;
    return cset_eval(s, cp);
}
static void cset_add(cset *s, item it) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        s->items = ds_xrealloc(s->items, (size_t)s->cap * sizeof *s->items);
    }
    s->items[s->n++] = it;
}

/* ---- nodes ---------------------------------------------------------------------------------- */

enum { N_SET, N_SEQ, N_ALT, N_REP, N_LOOK, N_BOL, N_EOL };
typedef struct rnode {
    int type;
    int set;                 /* N_SET */
    int *kids, nkids, capk;  /* N_SEQ, N_ALT */
    int kid;                 /* N_REP, N_LOOK */
    int min, max;            /* N_REP; max < 0 = unbounded */
    bool greedy;             /* N_REP */
    bool neg;                /* N_LOOK */
} rnode;

struct ds_uregex {
    rnode *nodes;
    int nn, capn;
    cset *sets;
    int ns, caps;
    int root;
};

typedef struct parser {
    ds_uregex *re;
    const uint32_t *p;
    int n, i;
    bool icase;
    char *err;
    size_t errlen;
    bool failed;
} parser;

static int perr(parser *ps, const char *msg) {
    if (!ps->failed) snprintf(ps->err, ps->errlen, "regex error at code point %d: %s", ps->i, msg);
    ps->failed = true;
    return -1;
}

static int new_node(ds_uregex *re, int type) {
    if (re->nn == re->capn) {
        re->capn = re->capn ? 2 * re->capn : 16;
        re->nodes = ds_xrealloc(re->nodes, (size_t)re->capn * sizeof *re->nodes);
    }
    memset(&re->nodes[re->nn], 0, sizeof(rnode));
    re->nodes[re->nn].type = type;
    return re->nn++;
}
static void add_kid(ds_uregex *re, int node, int kid) {
    rnode *r = &re->nodes[node];
    if (r->nkids == r->capk) {
        r->capk = r->capk ? 2 * r->capk : 4;
        r->kids = ds_xrealloc(r->kids, (size_t)r->capk * sizeof(int));
    }
    r->kids[r->nkids++] = kid;
}
static int new_set(ds_uregex *re) {
    if (re->ns == re->caps) {
        re->caps = re->caps ? 2 * re->caps : 8;
        re->sets = ds_xrealloc(re->sets, (size_t)re->caps * sizeof *re->sets);
    }
    memset(&re->sets[re->ns], 0, sizeof(cset));
    return re->ns++;
}

/* Category names of \p{..}: one letter = a major class, two letters = a subcategory. */
static uint32_t cat_mask(const char *name) {
    static const struct { const char *n; int c; } sub[] = {
        {"Cn", UTF8PROC_CATEGORY_CN}, {"Lu", UTF8PROC_CATEGORY_LU}, {"Ll", UTF8PROC_CATEGORY_LL},
        {"Lt", UTF8PROC_CATEGORY_LT}, {"Lm", UTF8PROC_CATEGORY_LM}, {"Lo", UTF8PROC_CATEGORY_LO},
        {"Mn", UTF8PROC_CATEGORY_MN}, {"Mc", UTF8PROC_CATEGORY_MC}, {"Me", UTF8PROC_CATEGORY_ME},
        {"Nd", UTF8PROC_CATEGORY_ND}, {"Nl", UTF8PROC_CATEGORY_NL}, {"No", UTF8PROC_CATEGORY_NO},
        {"Pc", UTF8PROC_CATEGORY_PC}, {"Pd", UTF8PROC_CATEGORY_PD}, {"Ps", UTF8PROC_CATEGORY_PS},
        {"Pe", UTF8PROC_CATEGORY_PE}, {"Pi", UTF8PROC_CATEGORY_PI}, {"Pf", UTF8PROC_CATEGORY_PF},
        {"Po", UTF8PROC_CATEGORY_PO}, {"Sm", UTF8PROC_CATEGORY_SM}, {"Sc", UTF8PROC_CATEGORY_SC},
        {"Sk", UTF8PROC_CATEGORY_SK}, {"So", UTF8PROC_CATEGORY_SO}, {"Zs", UTF8PROC_CATEGORY_ZS},
        {"Zl", UTF8PROC_CATEGORY_ZL}, {"Zp", UTF8PROC_CATEGORY_ZP}, {"Cc", UTF8PROC_CATEGORY_CC},
        {"Cf", UTF8PROC_CATEGORY_CF}, {"Cs", UTF8PROC_CATEGORY_CS}, {"Co", UTF8PROC_CATEGORY_CO},
    };
    static const struct { const char *n; const char *alias; } major[] = {
        {"L", "Letter"}, {"M", "Mark"}, {"N", "Number"}, {"P", "Punctuation"},
        {"S", "Symbol"}, {"Z", "Separator"}, {"C", "Other"},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(sub); i++)
        if (!strcmp(name, sub[i].n)) return 1u << sub[i].c;
    for (size_t i = 0; i < DS_ARRAY_LEN(major); i++) {
        if (strcmp(name, major[i].n) && strcmp(name, major[i].alias)) continue;
        uint32_t m = 0;
        for (size_t j = 0; j < DS_ARRAY_LEN(sub); j++)
            if (sub[j].n[0] == major[i].n[0]) m |= 1u << sub[j].c;
        return m;
    }
    return 0;
}


/* Parse an escape after '\' into a set item (class escapes) or a literal code point.
 * Returns 1 for an item, 0 for a literal (in *lit), -1 on error. */
static int parse_escape(parser *ps, item *it, uint32_t *lit) {
    if (ps->i >= ps->n) return perr(ps, "pattern ends with '\\'");
    uint32_t c = ps->p[ps->i++];
    memset(it, 0, sizeof *it);
    switch (c) {
    case 's': case 'S': it->kind = IT_WHITE; it->neg = c == 'S'; return 1;
    case 'd': case 'D': it->kind = IT_CATS; it->cats = cat_mask("Nd"); it->neg = c == 'D'; return 1;
    case 'w': case 'W':
        it->kind = IT_CATS;
        it->cats = cat_mask("L") | cat_mask("M") | cat_mask("Nd") | cat_mask("Pc");
        it->neg = c == 'W';
        return 1;
    case 'p': case 'P': {
        char name[32];
        int k = 0;
        if (ps->i < ps->n && ps->p[ps->i] == '{') {
            ps->i++;
            bool neg = false;
            if (ps->i < ps->n && ps->p[ps->i] == '^') { neg = true; ps->i++; }
            while (ps->i < ps->n && ps->p[ps->i] != '}' && k < 31) name[k++] = (char)ps->p[ps->i++];
            if (ps->i >= ps->n || ps->p[ps->i] != '}') return perr(ps, "unterminated \\p{...}");
            ps->i++;
            name[k] = 0;
            it->neg = (c == 'P') != neg;
        } else {
            if (ps->i >= ps->n) return perr(ps, "incomplete \\p");
            name[0] = (char)ps->p[ps->i++];
            name[1] = 0;
            it->neg = c == 'P';
        }
        it->kind = IT_CATS;
        it->cats = cat_mask(name);
        if (!it->cats) {
            char m[96];
            snprintf(m, sizeof m, "unsupported Unicode property \\p{%s}", name);
            return perr(ps, m);
        }
        return 1;
    }
    case 'n': *lit = '\n'; return 0;
    case 'r': *lit = '\r'; return 0;
    case 't': *lit = '\t'; return 0;
    case 'f': *lit = '\f'; return 0;
    case 'v': *lit = '\v'; return 0;
    case 'a': *lit = 7; return 0;
    case 'e': *lit = 27; return 0;
    case '0': *lit = 0; return 0;
    case 'x': case 'u': {
        uint32_t v = 0;
        int digits = 0, maxd = c == 'x' ? 2 : 4;
        bool brace = ps->i < ps->n && ps->p[ps->i] == '{';
        if (brace) { ps->i++; maxd = 8; }
        while (ps->i < ps->n && digits < maxd) {
            uint32_t d = ps->p[ps->i];
            int h = d >= '0' && d <= '9' ? (int)(d - '0') : d >= 'a' && d <= 'f' ? (int)(d - 'a' + 10)
                  : d >= 'A' && d <= 'F' ? (int)(d - 'A' + 10) : -1;
            if (h < 0) break;
            v = v * 16 + (uint32_t)h;
            digits++;
            ps->i++;
        }
        if (brace) {
            if (ps->i >= ps->n || ps->p[ps->i] != '}') return perr(ps, "unterminated \\x{...}");
            ps->i++;
        }
        if (!digits || v > 0x10FFFF) return perr(ps, "bad hexadecimal escape");
        *lit = v;
        return 0;
    }
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
            char m[64];
            snprintf(m, sizeof m, "unsupported escape \\%c", (char)c);
            return perr(ps, m);
        }
        *lit = c;   /* escaped punctuation stands for itself */
        return 0;
    }
}

/* Case folding for (?i): add the other ASCII/simple case of a code point or range. */
static void add_range_icase(cset *s, uint32_t lo, uint32_t hi, bool icase) {
    cset_add(s, (item){.kind = IT_RANGE, .lo = lo, .hi = hi});
    if (!icase) return;
    for (uint32_t c = lo; c <= hi && c < 0x10000; c++) {
        uint32_t u = (uint32_t)utf8proc_toupper((utf8proc_int32_t)c);
        uint32_t l = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        if (u != c) cset_add(s, (item){.kind = IT_RANGE, .lo = u, .hi = u});
        if (l != c) cset_add(s, (item){.kind = IT_RANGE, .lo = l, .hi = l});
    }
}

static int literal_node(parser *ps, uint32_t c) {
    int si = new_set(ps->re);
    add_range_icase(&ps->re->sets[si], c, c, ps->icase);
    int nd = new_node(ps->re, N_SET);
    ps->re->nodes[nd].set = si;
    return nd;
}

static int parse_class(parser *ps) {
    int si = new_set(ps->re);
    if (ps->i < ps->n && ps->p[ps->i] == '^') { ps->re->sets[si].neg = true; ps->i++; }
    bool first = true;
    while (1) {
        if (ps->i >= ps->n) return perr(ps, "unterminated character class");
        uint32_t c = ps->p[ps->i];
        if (c == ']' && !first) { ps->i++; break; }
        first = false;
        if (c == '[') return perr(ps, "nested character classes are not supported");
        ps->i++;
        uint32_t lo;
        if (c == '\\') {
            item it;
            int r = parse_escape(ps, &it, &lo);
            if (r < 0) return -1;
            if (r == 1) { cset_add(&ps->re->sets[si], it); continue; }
        } else {
            lo = c;
        }
        uint32_t hi = lo;
        if (ps->i + 1 < ps->n && ps->p[ps->i] == '-' && ps->p[ps->i + 1] != ']') {
            ps->i++;
            uint32_t d = ps->p[ps->i++];
            if (d == '\\') {
                item it;
                int r = parse_escape(ps, &it, &hi);
                if (r < 0) return -1;
                if (r == 1) return perr(ps, "a class escape cannot end a range");
            } else {
                hi = d;
            }
            if (hi < lo) return perr(ps, "range out of order in character class");
        }
        add_range_icase(&ps->re->sets[si], lo, hi, ps->icase);
    }
    int nd = new_node(ps->re, N_SET);
    ps->re->nodes[nd].set = si;
    return nd;
}

static int parse_alt(parser *ps);

static int parse_atom(parser *ps) {
    uint32_t c = ps->p[ps->i++];
    switch (c) {
    case '(': {
        bool saved_icase = ps->icase;
        int look = 0;   /* 0 group, 1 positive, 2 negative */
        if (ps->i < ps->n && ps->p[ps->i] == '?') {
            ps->i++;
            if (ps->i >= ps->n) return perr(ps, "incomplete group");
            uint32_t k = ps->p[ps->i++];
            if (k == ':') {
            } else if (k == '=') {
                look = 1;
            } else if (k == '!') {
                look = 2;
            } else if (k == 'i' && ps->i < ps->n && ps->p[ps->i] == ':') {
                ps->i++;
                ps->icase = true;
            } else {
                return perr(ps, "unsupported group kind (lookbehind, flags, named groups)");
            }
        }
        int inner = parse_alt(ps);
        ps->icase = saved_icase;
        if (inner < 0) return -1;
        if (ps->i >= ps->n || ps->p[ps->i] != ')') return perr(ps, "missing ')'");
        ps->i++;
        if (!look) return inner;
        int nd = new_node(ps->re, N_LOOK);
        ps->re->nodes[nd].kid = inner;
        ps->re->nodes[nd].neg = look == 2;
        return nd;
    }
    case '[': return parse_class(ps);
    case '.': {
        int si = new_set(ps->re);
        ps->re->sets[si].neg = true;
        cset_add(&ps->re->sets[si], (item){.kind = IT_RANGE, .lo = '\n', .hi = '\n'});
        int nd = new_node(ps->re, N_SET);
        ps->re->nodes[nd].set = si;
        return nd;
    }
    case '^': return new_node(ps->re, N_BOL);
    case '$': return new_node(ps->re, N_EOL);
    case '\\': {
        item it;
        uint32_t lit;
        int r = parse_escape(ps, &it, &lit);
        if (r < 0) return -1;
        if (r == 0) return literal_node(ps, lit);
        int si = new_set(ps->re);
        cset_add(&ps->re->sets[si], it);
        int nd = new_node(ps->re, N_SET);
        ps->re->nodes[nd].set = si;
        return nd;
    }
    case '*': case '+': case '?': case '{':
        if (c != '{') return perr(ps, "quantifier without an operand");
        return literal_node(ps, c);
    default: return literal_node(ps, c);
    }
}

static bool parse_int(parser *ps, int *v) {
    int k = 0;
    long x = 0;
    while (ps->i < ps->n && ps->p[ps->i] >= '0' && ps->p[ps->i] <= '9' && k < 9) {
        x = x * 10 + (long)(ps->p[ps->i++] - '0');
        k++;
    }
    *v = (int)x;
    return k > 0;
}

static int parse_seq(parser *ps) {
    int seq = new_node(ps->re, N_SEQ);
    while (ps->i < ps->n && ps->p[ps->i] != '|' && ps->p[ps->i] != ')') {
        int atom = parse_atom(ps);
        if (atom < 0) return -1;
        /* quantifiers */
        while (ps->i < ps->n) {
            uint32_t q = ps->p[ps->i];
            int mn, mx;
            if (q == '*') { mn = 0; mx = -1; ps->i++; }
            else if (q == '+') { mn = 1; mx = -1; ps->i++; }
            else if (q == '?') { mn = 0; mx = 1; ps->i++; }
            else if (q == '{') {
                int save = ps->i;
                ps->i++;
                if (!parse_int(ps, &mn)) { ps->i = save; break; }
                mx = mn;
                if (ps->i < ps->n && ps->p[ps->i] == ',') {
                    ps->i++;
                    if (!parse_int(ps, &mx)) mx = -1;
                }
                if (ps->i >= ps->n || ps->p[ps->i] != '}') { ps->i = save; break; }
                ps->i++;
                if (mx >= 0 && mx < mn) return perr(ps, "bad repetition bounds");
            } else {
                break;
            }
            /* Repeating a multi-character atom recurses once per iteration; bounding it keeps
             * the stack bounded whatever the text (tokenizer patterns only use `?` on groups). */
            if (ps->re->nodes[atom].type != N_SET && (mx < 0 || mx > 16))
                return perr(ps, "repetition of a group or lookahead is limited to at most 16 iterations");
            bool greedy = true;
            if (ps->i < ps->n && ps->p[ps->i] == '?') { greedy = false; ps->i++; }
            else if (ps->i < ps->n && ps->p[ps->i] == '+') return perr(ps, "possessive quantifiers are not supported");
            int rep = new_node(ps->re, N_REP);
            rnode *r = &ps->re->nodes[rep];
            r->kid = atom; r->min = mn; r->max = mx; r->greedy = greedy;
            atom = rep;
        }
        add_kid(ps->re, seq, atom);
    }
    return seq;
}

static int parse_alt(parser *ps) {
    int first = parse_seq(ps);
    if (first < 0) return -1;
    if (ps->i >= ps->n || ps->p[ps->i] != '|') return first;
    int alt = new_node(ps->re, N_ALT);
    add_kid(ps->re, alt, first);
    while (ps->i < ps->n && ps->p[ps->i] == '|') {
        ps->i++;
        int s = parse_seq(ps);
        if (s < 0) return -1;
        add_kid(ps->re, alt, s);
    }
    return alt;
}

void ds_uregex_free(ds_uregex *re) {
    if (!re) return;
    for (int i = 0; i < re->nn; i++) free(re->nodes[i].kids);
    for (int i = 0; i < re->ns; i++) { free(re->sets[i].items); free(re->sets[i].bmp); }
    free(re->nodes);
    free(re->sets);
    free(re);
}

ds_uregex *ds_uregex_compile(const char *pattern, char *errbuf, size_t errlen) {
    size_t bl = strlen(pattern);
    uint32_t *cps = ds_xmalloc((bl + 1) * sizeof *cps);
    int n = 0;
    for (size_t i = 0; i < bl;) {
        uint32_t cp;
        int k = ds_utf8_decode((const uint8_t *)pattern + i, bl - i, &cp);
        if (!k) {
            snprintf(errbuf, errlen, "regex error: invalid UTF-8 at byte %zu", i);
            free(cps);
            return NULL;
        }
        cps[n++] = cp;
        i += (size_t)k;
    }
    ds_uregex *re = ds_xcalloc(1, sizeof *re);
    parser ps = {.re = re, .p = cps, .n = n, .err = errbuf, .errlen = errlen};
    re->root = parse_alt(&ps);
    if (re->root >= 0 && ps.i < n) perr(&ps, "unbalanced ')'");
    free(cps);
    if (ps.failed || re->root < 0) {
        ds_uregex_free(re);
        return NULL;
    }
    for (int i = 0; i < re->ns; i++) {
        cset *s = &re->sets[i];
        s->bmp = ds_xcalloc(65536 / 64, sizeof(uint64_t));
        for (uint32_t c = 0; c < 65536; c++)
            if (cset_eval(s, c)) s->bmp[c >> 6] |= (uint64_t)1 << (c & 63);
    }
    return re;
}

/* ---- matching ------------------------------------------------------------------------------- */

enum { K_SEQ, K_REP };
typedef struct cont {
    int kind, node, idx, start;
    const struct cont *next;
} cont;

typedef struct matcher {
    const ds_uregex *re;
    const uint32_t *s;
    int n;
    int end;
} matcher;

static bool m_node(matcher *m, int node, int pos, const cont *k);

static bool m_rep(matcher *m, int node, int count, int pos, const cont *k) {
    const rnode *r = &m->re->nodes[node];
    bool can_more = r->max < 0 || count < r->max;
    cont c = {K_REP, node, count + 1, pos, k};
    if (r->greedy) {
        if (can_more && m_node(m, r->kid, pos, &c)) return true;
        return count >= r->min && m_node(m, -1, pos, k);
    }
    if (count >= r->min && m_node(m, -1, pos, k)) return true;
    return can_more && m_node(m, r->kid, pos, &c);
}

/* node == -1 means "run the continuation k at pos". */
static bool m_node(matcher *m, int node, int pos, const cont *k) {
    if (node < 0) {
        if (!k) { m->end = pos; return true; }
        if (k->kind == K_SEQ) {
            const rnode *sq = &m->re->nodes[k->node];
            if (k->idx >= sq->nkids) return m_node(m, -1, pos, k->next);
            cont c = {K_SEQ, k->node, k->idx + 1, 0, k->next};
            return m_node(m, sq->kids[k->idx], pos, &c);
        }
        /* K_REP: one more iteration of a repetition finished at pos. */
        const rnode *r = &m->re->nodes[k->node];
        if (pos == k->start && k->idx > r->min) return false;   /* empty iteration: stop looping */
        return m_rep(m, k->node, k->idx, pos, k->next);
    }
    const rnode *r = &m->re->nodes[node];
    switch (r->type) {
    case N_SET:
        if (pos < m->n && cset_has(&m->re->sets[r->set], m->s[pos])) return m_node(m, -1, pos + 1, k);
        return false;
    case N_SEQ: {
        if (r->nkids == 0) return m_node(m, -1, pos, k);
        cont c = {K_SEQ, node, 1, 0, k};
        return m_node(m, r->kids[0], pos, &c);
    }
    case N_ALT:
        for (int i = 0; i < r->nkids; i++)
            if (m_node(m, r->kids[i], pos, k)) return true;
        return false;
    case N_REP: {
        const rnode *kid = &m->re->nodes[r->kid];
        if (kid->type != N_SET) return m_rep(m, node, 0, pos, k);
        const cset *s = &m->re->sets[kid->set];
        int lim = r->max < 0 ? m->n - pos : DS_MIN(r->max, m->n - pos);
        int run = 0;
        while (run < lim && cset_has(s, m->s[pos + run])) run++;
        if (run < r->min) return false;
        if (r->greedy) {
            for (int c = run; c >= r->min; c--)
                if (m_node(m, -1, pos + c, k)) return true;
        } else {
            for (int c = r->min; c <= run; c++)
                if (m_node(m, -1, pos + c, k)) return true;
        }
        return false;
    }
    case N_LOOK: {
        int saved = m->end;
        bool hit = m_node(m, r->kid, pos, NULL);
        m->end = saved;
        if (hit == r->neg) return false;
        return m_node(m, -1, pos, k);
    }
    case N_BOL: return pos == 0 && m_node(m, -1, pos, k);
    case N_EOL: return pos == m->n && m_node(m, -1, pos, k);
    }
    return false;
}

bool ds_uregex_find(const ds_uregex *re, const uint32_t *cps, int n, int from, int *ms, int *me) {
    matcher m = {re, cps, n, 0};
    for (int s = from; s <= n; s++) {
        if (m_node(&m, re->root, s, NULL)) {
            *ms = s;
            *me = m.end;
            return true;
        }
    }
    return false;
}
