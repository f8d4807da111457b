/* Progress lines (modes and format explained in progress.h). */
#define _GNU_SOURCE
#include "tools/progress.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ds_format_bytes(uint64_t b, char *buf, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)b);
    else snprintf(buf, n, "%.1f %s", v, unit[u]);
}

void ds_format_duration(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 359999) { snprintf(buf, n, "--:--"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static bool detect_tty(void) {
    const char *force = getenv("DSFLASH_PROGRESS");
    if (force && !strcmp(force, "tty")) return true;
    if (force && !strcmp(force, "plain")) return false;
    return isatty(STDERR_FILENO) != 0;
}

void ds_progress_init(ds_progress *p, const char *label, uint64_t total, bool quiet) {
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    p->out = stderr;
    p->tty = detect_tty();
    p->quiet = quiet;
    ds_progress_restart(p, label, total);
}

void ds_progress_init_count(ds_progress *p, const char *label, uint64_t total, const char *unit, bool quiet) {
    ds_progress_init(p, label, total, quiet);
    snprintf(p->unit, sizeof p->unit, "%s", unit);
}

void ds_progress_restart(ds_progress *p, const char *label, uint64_t total) {
    pthread_mutex_lock(&p->mu);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->stage[0] = 0;
    p->total = total;
    p->done = 0;
    p->t0 = p->last_print = ds_now();
    p->next_pct = 5;
    pthread_mutex_unlock(&p->mu);
}

void ds_progress_stage(ds_progress *p, const char *fmt, ...) {
    pthread_mutex_lock(&p->mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->stage, sizeof p->stage, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&p->mu);
}

/* "done / total" and the rate, in bytes or in counted items. */
static void format_amounts(const ds_progress *p, double per_s, char *amounts, size_t na, char *rate, size_t nr) {
    if (p->unit[0]) {
        snprintf(amounts, na, "%llu/%llu %s", (unsigned long long)p->done, (unsigned long long)p->total, p->unit);
        snprintf(rate, nr, "%.2f %s/s", per_s, p->unit);
        return;
    }
    char done[32], total[32], r[32];
    ds_format_bytes(p->done, done, sizeof done);
    ds_format_bytes(p->total, total, sizeof total);
    ds_format_bytes((uint64_t)per_s, r, sizeof r);
    snprintf(amounts, na, "%s / %s", done, total);
    snprintf(rate, nr, "%s/s", r);
}

/* Caller holds the mutex. */
static void print_line(ds_progress *p, double now) {
    char amounts[96], rate[48], eta[32];
    double dt = now - p->t0;
    double bps = dt > 0 ? (double)p->done / dt : 0;
    format_amounts(p, bps, amounts, sizeof amounts, rate, sizeof rate);
    if (bps > 0 && p->total >= p->done) ds_format_duration((double)(p->total - p->done) / bps, eta, sizeof eta);
    else snprintf(eta, sizeof eta, "--:--");
    double pct = p->total ? 100.0 * (double)p->done / (double)p->total : 100.0;
    char line[384];
    snprintf(line, sizeof line, "[%s]%s%s  %s  %.1f%%  %s  ETA %s", p->label, p->stage[0] ? " " : "", p->stage,
             amounts, pct, rate, eta);
    if (p->tty) {
        fprintf(p->out, "\r%s\033[K", line);   /* \033[K erases what a longer previous line left */
        p->line_open = true;
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
    p->last_print = now;
}

void ds_progress_add(ds_progress *p, uint64_t bytes) {
    if (p->quiet) { __atomic_add_fetch(&p->done, bytes, __ATOMIC_RELAXED); return; }
    pthread_mutex_lock(&p->mu);
    p->done += bytes;
    double now = ds_now();
    if (p->tty) {
        if (now - p->last_print >= 0.25) print_line(p, now);
    } else {
        double pct = p->total ? 100.0 * (double)p->done / (double)p->total : 100.0;
        if (pct >= p->next_pct || now - p->last_print >= 30.0) {
            print_line(p, now);
            while (p->next_pct <= pct) p->next_pct += 5;
        }
    }
    pthread_mutex_unlock(&p->mu);
}

void ds_progress_finish(ds_progress *p) {
    if (p->quiet) return;
    pthread_mutex_lock(&p->mu);
    if (p->tty) {
        if (p->line_open) fprintf(p->out, "\r\033[K");
        p->line_open = false;
    } else if (p->next_pct <= 100) {
        print_line(p, ds_now());   /* the closing 100% line if the last step did not print it */
        p->next_pct = 105;
    }
    fflush(p->out);
    pthread_mutex_unlock(&p->mu);
}

void ds_progress_destroy(ds_progress *p) { pthread_mutex_destroy(&p->mu); }
