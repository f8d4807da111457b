/* PARTS.sha256: the one source of hashes for split files (TOOLS.md §1.1, CHECKPOINT.md §10).
 *
 * The file is sha256sum-compatible text: one block per target, a comment `# <target> [key=value…]`,
 * the whole-file line, then the part lines in index order.  The reader groups lines by the names
 * they carry (a part name `T.part-NN-of-MM` belongs to target `T`), not by comment position, so a
 * hand-edited file with extra comments still parses; what it does enforce are the rules whose
 * violation would make reassembly ambiguous: 64 lowercase hex digits, plain file names (no '/'),
 * no duplicate names, parts listed in order 00..MM-1 with one MM and one digit width, and a
 * whole-file line for every target.  Errors name the file, the line and the offending text.
 * The writer emits the canonical form (two spaces, no '*', targets sorted by name) so that
 * `split` can replace one block and keep the others byte-stable. */
#ifndef DS_TOOLS_PARTS_MANIFEST_H
#define DS_TOOLS_PARTS_MANIFEST_H
#include "base/common.h"
#include "base/sha256.h"

#define DS_PARTS_FILE "PARTS.sha256"

typedef struct ds_parts_part {
    char *name;                       /* e.g. "x.safetensors.part-03-of-06" */
    char sha256[DS_SHA256_HEX_LEN + 1];
} ds_parts_part;

typedef struct ds_parts_target {
    char *name;                       /* reassembled file name, relative to the directory */
    char sha256[DS_SHA256_HEX_LEN + 1];   /* whole-file hash ("" until its line is seen) */
    int64_t size;                     /* from the comment's size=, or -1 */
    int64_t part_size;                /* from part_size=, or -1 */
    int declared_parts;               /* from parts=, or -1 */
    int n_parts;
    ds_parts_part *parts;             /* in index order */
} ds_parts_target;

typedef struct ds_parts_manifest {
    int n_targets;
    ds_parts_target *targets;         /* sorted by name after parse */
} ds_parts_manifest;

/* Split `name` = "<base>.part-NN-of-MM".  Returns 1 and fills the outputs (base newly allocated,
 * may be NULL to skip) when it matches with NN and MM of the same width >= 2, NN < MM; else 0. */
int ds_parts_parse_name(const char *name, char **base, int *index, int *count, int *width);
/* Build "<base>.part-NN-of-MM" with width max(2, digits(count)); caller frees. */
char *ds_parts_make_name(const char *base, int index, int count);
int ds_parts_index_width(int count);

/* Parse text; `path` is used in messages.  Errors: E_PARTS_SYNTAX (code) with line numbers. */
int ds_parts_parse(const char *text, const char *path, ds_parts_manifest *m, ds_error *err);
/* Read and parse DIR/PARTS.sha256.  A missing file is E_MISSING_FILE. */
int ds_parts_load(const char *dir, ds_parts_manifest *m, ds_error *err);
/* Canonical text (caller frees). */
char *ds_parts_format(const ds_parts_manifest *m);
/* Write DIR/PARTS.sha256 atomically (temporary file, fsync, rename). */
int ds_parts_save(const char *dir, const ds_parts_manifest *m, ds_error *err);

ds_parts_target *ds_parts_find(ds_parts_manifest *m, const char *target);
/* Insert or replace the block of t->name; the manifest takes a deep copy. */
void ds_parts_set_target(ds_parts_manifest *m, const ds_parts_target *t);
void ds_parts_target_free(ds_parts_target *t);
void ds_parts_free(ds_parts_manifest *m);

#endif
