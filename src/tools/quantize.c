/* Release driver shared by quantize and mkmodel (see quantize.h for the destination rules). */
#define _GNU_SOURCE
#include "tools/quantize.h"
#include "base/fsutil.h"
#include "tools/reassemble.h"
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LOCK_NAME "quantize"

int ds_exit_for_error(const ds_error *err) {
    const char *c = err->code;
    if (!strcmp(c, "E_USAGE")) return DS_EXIT_USAGE;
    if (!strcmp(c, "E_IO")) return DS_EXIT_IO;
    if (!strcmp(c, "E_LOCK")) return DS_EXIT_LOCK;
    if (!strcmp(c, "E_MISSING_FILE")) return DS_EXIT_MISSING;
    return DS_EXIT_CHECK;
}

static void print_plan(const ds_rw_plan *p) {
    uint64_t total = 0;
    printf("plan: %d tensor files, %d output tensors from %d source tensors\n", p->n_files, p->n_tensors, p->n_src_used);
    for (int fi = 0; fi < p->n_files; fi++) {
        printf("  %-60s %8d tensors %14" PRIu64 " bytes\n", p->files[fi].relpath, p->files[fi].n_tensors, p->files[fi].size);
        total += p->files[fi].size;
    }
    int by[5] = {0};
    uint64_t base = 0;
    for (int g = 0; g < p->n_groups; g++) { by[p->groups[g].kind]++; base += p->groups[g].src_bytes; }
    printf("linears: W4A8 %d, W8A8 %d; float tensors %d; Engram tables %d\n", by[DS_QK_W4A8], by[DS_QK_W8A8], by[DS_QK_FLOAT], by[DS_QK_ENGRAM]);
    printf("bytes: source %" PRIu64 ", output %" PRIu64 "\n", base, total);
}

int ds_release_run(ds_fsrc *src, const char *dst, const ds_release_job *job, ds_error *err) {
    ds_rw_plan *plan = NULL;
    if (ds_rw_plan_build(src, &job->rw, &plan, err)) return ds_exit_for_error(err);
    if (job->dry_run) {
        print_plan(plan);
        ds_rw_plan_free(plan);
        return 0;
    }
    int rc = 0, lock_fd = -1;
    char *plan_text = plan->opts.float_export ? NULL : ds_rw_plan_json(plan, src);
    struct stat st;
    if (stat(dst, &st) == 0 && !S_ISDIR(st.st_mode)) {
        ds_fail(err, "E_USAGE", "%s: expected a destination directory, found a file", dst);
        rc = DS_EXIT_USAGE;
        goto out;
    }
    if (ds_mkdir_p(dst, err)) { rc = DS_EXIT_IO; goto out; }
    lock_fd = ds_tool_lock(dst, LOCK_NAME, err);
    if (lock_fd < 0) {
        if (lock_fd == -DS_EXIT_LOCK) ds_fail(err, "E_LOCK", "%s: another quantize/mkmodel run holds %s/%s.lock", dst, dst, LOCK_NAME);
        rc = -lock_fd;
        lock_fd = -1;
        goto out;
    }
    /* destination rules: empty, or a resumable run of the same plan */
    {
        DIR *d = opendir(dst);
        int others = 0;
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, LOCK_NAME ".lock")) others++;
        if (d) closedir(d);
        if (others) {
            char *pp = ds_path_join(dst, DS_QUANT_PLAN);
            char *old = NULL;
            size_t len = 0;
            ds_error e2 = {0};
            bool same = plan_text && ds_file_exists(pp) && ds_read_file(pp, &old, &len, &e2) == 0 && !strcmp(old, plan_text);
            free(old);
            free(pp);
            if (!same || !job->resume) {
                ds_fail(err, "E_USAGE", "%s: expected an empty destination%s, found existing files; nothing was changed "
                        "(this tool never deletes: choose a new directory)",
                        dst, job->resume && plan_text ? " or one holding the same quant_plan.json (resume)" : "");
                rc = DS_EXIT_USAGE;
                goto out;
            }
            if (!job->rw.quiet) fprintf(stderr, "%s: resuming (same plan); complete files are kept\n", dst);
        }
    }
    if (plan_text) {
        char *pp = ds_path_join(dst, DS_QUANT_PLAN);
        int w = ds_write_file_atomic(pp, plan_text, strlen(plan_text), err);
        free(pp);
        if (w) { rc = DS_EXIT_IO; goto out; }
    }
    if (ds_rw_write(plan, src, dst, err)) { rc = ds_exit_for_error(err); goto out; }
out:
    if (lock_fd >= 0) ds_tool_unlock(dst, LOCK_NAME, lock_fd);
    free(plan_text);
    ds_rw_plan_free(plan);
    return rc;
}

int ds_quantize_dir(const char *src_dir, const char *dst, const ds_release_job *job, ds_error *err) {
    struct stat st;
    if (stat(src_dir, &st) || !S_ISDIR(st.st_mode)) {
        ds_fail(err, "E_MISSING_FILE", "%s: expected the float source directory, found no such directory", src_dir);
        return DS_EXIT_MISSING;
    }
    ds_fsrc *src = NULL;
    if (ds_fsrc_open_dir(src_dir, job->rw.src_label ? job->rw.src_label : src_dir, job->fp8, &src, err)) return ds_exit_for_error(err);
    int rc = ds_release_run(src, dst, job, err);
    ds_fsrc_free(src);
    return rc;
}
