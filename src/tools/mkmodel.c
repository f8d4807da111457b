/* mkmodel driver: config → synthetic float source → release (and/or float checkpoint) → self-check.
 * See mkmodel.h for the design.  Per-preset defaults exist so that the plain command produces the
 * fixture the test suites expect: tiny gets 1 MiB shards (several trunk shards, so the index is
 * exercised) and its Engram code tables also in split form with 64 KiB parts plus PARTS.sha256
 * (CHECKPOINT.md §10); larger models get 2 GiB shards and no split unless asked. */
#include "tools/mkmodel.h"
#include "base/fsutil.h"
#include "tools/mkmodel_official.h"
#include "tools/quantize.h"
#include "tools/reassemble.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_mk_verify(const char *dir, const ds_config *cfg, uint64_t seed, bool smooth, bool quiet, ds_error *err);

void ds_mkmodel_opts_default(ds_mkmodel_opts *o) {
    memset(o, 0, sizeof *o);
    o->seed = 1;
}

static int load_config(const char *spec, ds_config *cfg, bool *is_tiny, ds_error *err) {
    *is_tiny = false;
    if (!strcmp(spec, "tiny") || !strcmp(spec, "mini")) {
        if (ds_config_preset(spec, cfg)) return ds_fail(err, "E_CONFIG", "preset %s: the built-in configuration failed validation", spec);
        *is_tiny = !strcmp(spec, "tiny");
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    if (!ds_file_exists(spec))
        return ds_fail(err, "E_MISSING_FILE", "--config %s: expected tiny, mini or an existing config.json file, found none", spec);
    if (ds_read_file(spec, &text, &len, err)) return -1;
    int rc = ds_config_parse(text, spec, cfg, err);
    free(text);
    if (!rc) rc = ds_config_validate(cfg, spec, err);
    return rc;
}

/* --format official: the float export (unrotated) into a temporary sibling directory, encoded
 * into the official layout (mkmodel_official.c), then removed. */
static int run_official(const ds_mkmodel_opts *o, const ds_config *cfg, ds_fsrc *src, ds_release_job *job, ds_error *err) {
    char *tmp = ds_xmalloc(strlen(o->out) + 32);
    sprintf(tmp, "%s.float-tmp", o->out);
    ds_mk_remove_tree(tmp);
    ds_release_job fj = *job;
    fj.rw.float_export = true;
    fj.rw.split_engram = 0;
    fj.rw.split_only = false;
    fj.rw.quiet = true;
    fj.rw.out_label = tmp;
    double t0 = ds_now();
    int rc = ds_release_run(src, tmp, &fj, err);
    ds_fsrc_free(src);
    if (!rc && ds_mk_officialize(tmp, o->out, cfg->n_mtp_layers, job->rw.shard_bytes, err)) rc = ds_exit_for_error(err);
    ds_mk_remove_tree(tmp);
    free(tmp);
    if (!rc && !o->quiet) printf("mkmodel: wrote official FP8/MXFP4 layout %s (%s, seed %llu%s) in %.1f s\n", o->out, o->config,
                                 (unsigned long long)o->seed, o->smooth ? ", smooth" : "", ds_now() - t0);
    return rc;
}

int ds_mkmodel_run(const ds_mkmodel_opts *o, ds_error *err) {
    ds_config cfg;
    bool tiny = false;
    if (!o->out && !o->float_out) { ds_fail(err, "E_USAGE", "mkmodel: expected --out DIR and/or --float-out DIR"); return DS_EXIT_USAGE; }
    if (load_config(o->config, &cfg, &tiny, err)) return ds_exit_for_error(err);
    cfg.dspark_draft_random = cfg.n_mtp_layers > 0;   /* random weights: no acceptance probe (docs/DECISIONS.md) */
    ds_fsrc *src = NULL;
    double t0 = ds_now();
    if (ds_mk_source_new(&cfg, o->seed, o->smooth, o->identity_rotation || o->official, &src, err)) return ds_exit_for_error(err);
    ds_release_job job;
    memset(&job, 0, sizeof job);
    ds_rw_opts_default(&job.rw);
    job.resume = false; /* a generator never resumes into an existing directory */
    job.rw.shard_bytes = o->shard_bytes ? o->shard_bytes : tiny ? ((uint64_t)1 << 20) : ((uint64_t)2 << 30);
    job.rw.split_engram = o->no_split ? 0 : o->split_engram ? o->split_engram : tiny ? ((uint64_t)64 << 10) : 0;
    job.rw.split_only = o->split_only;
    job.rw.threads = o->threads;
    job.rw.quiet = o->quiet;
    job.rw.src_label = o->float_out ? o->float_out : src->label;
    job.rw.out_label = o->out;
    int rc = 0;
    if (o->official) return run_official(o, &cfg, src, &job, err);
    if (o->out) {
        rc = ds_release_run(src, o->out, &job, err);
        if (!rc && !o->quiet) printf("mkmodel: wrote release %s (%s, seed %llu%s) in %.1f s\n", o->out, o->config,
                                     (unsigned long long)o->seed, o->smooth ? ", smooth" : "", ds_now() - t0);
    }
    if (!rc && o->float_out) {
        ds_release_job fj = job;
        fj.rw.float_export = true;
        fj.rw.split_engram = 0;
        fj.rw.split_only = false;
        fj.rw.out_label = o->float_out;
        double t1 = ds_now();
        rc = ds_release_run(src, o->float_out, &fj, err);
        if (!rc && !o->quiet) printf("mkmodel: wrote float checkpoint %s in %.1f s\n", o->float_out, ds_now() - t1);
    }
    ds_fsrc_free(src);
    if (!rc && o->out && !o->no_verify && !o->split_only) {
        if (ds_mk_verify(o->out, &cfg, o->seed, o->smooth, o->quiet, err)) rc = DS_EXIT_CHECK;
    }
    return rc;
}
