/* Shared CLI helpers: errors, option parsing, logger, progress line. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cli_global g_cli;

int cli_fail(const char *cmd, lb_status st) {
    const char *msg = lb_last_error();
    fprintf(stderr, "lowbit %s: error: %s%s(%s)\n", cmd, msg, msg[0] ? " " : "",
            lb_status_name(st));
    return 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "lowbit %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see `lowbit %s --help`)\n", cmd);
    return 2;
}

bool cli_parse_int(const char *cmd, const char *opt, const char *s, long lo,
                   long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "%s: expected an integer in [%ld, %ld], got '%s'",
                        opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *cmd, const char *opt, const char *s,
                     double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        cli_usage_error(cmd, "%s: expected a number in [%g, %g], got '%s'", opt,
                        lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

static void log_to_stderr(lb_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == LB_LOG_DEBUG && g_cli.verbose == 0) return;
    if (level == LB_LOG_INFO && g_cli.quiet) return;
    static const char *names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "lowbit: %s: %s\n", names[level], msg);
}

void cli_install_logger(void) { lb_log_set_callback(log_to_stderr, NULL); }

static void fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 360000) {
        snprintf(buf, n, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
    else
        snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
}

/* stderr is not a TTY: one line per step, at most one a second (p->active
 * here means: the final line of the current step was printed) */
static bool progress_lines(cli_progress *p, const char *stage, uint64_t done, uint64_t total) {
    const double now = lb_time_s();
    char key[sizeof p->line_key];
    size_t k = strcspn(stage, ":");
    if (k >= sizeof key) k = sizeof key - 1;
    memcpy(key, stage, k);
    key[k] = '\0';
    const bool final = total && done >= total;
    const bool new_step = strcmp(key, p->line_key) != 0;
    /* same step: its final line, or a heartbeat every 10 intervals */
    if (!new_step && !(final && !p->active) && now - p->t_line < 10 * p->line_interval)
        return true;
    if (now - p->t_line < p->line_interval) return true;
    snprintf(p->line_key, sizeof p->line_key, "%s", key);
    p->active = final;
    p->t_line = now;
    p->n_lines++;
    char elapsed[32];
    fmt_duration(elapsed, sizeof elapsed, now - p->t0);
    if (total)
        fprintf(stderr, "lowbit: [elapsed %s] %s (%llu/%llu, %.0f%%)\n", elapsed, stage,
                (unsigned long long)done, (unsigned long long)total,
                100.0 * (double)done / (double)total);
    else
        fprintf(stderr, "lowbit: [elapsed %s] %s (%llu)\n", elapsed, stage,
                (unsigned long long)done);
    fflush(stderr);
    return true;
}

static bool progress_cb(void *user, const char *stage, uint64_t done,
                        uint64_t total) {
    cli_progress *p = user;
    if (g_cli.quiet) return true;
    if (!isatty(STDERR_FILENO)) return progress_lines(p, stage, done, total);
    double now = lb_time_s();
    bool stage_changed = strncmp(p->stage, stage, sizeof p->stage - 1) != 0;
    if (stage_changed) {
        bool new_phase = total != p->last_total || done < p->last_done;
        snprintf(p->stage, sizeof p->stage, "%s", stage);
        if (new_phase) p->t_start = now;
    }
    p->last_done = done;
    p->last_total = total;
    bool final = total && done >= total;
    if (!stage_changed && !final && now - p->t_last < 0.1) return true;
    p->t_last = now;
    double el = now - p->t_start;
    char eta[32] = "--:--", elapsed[32];
    fmt_duration(elapsed, sizeof elapsed, el);
    if (total && done > 0) fmt_duration(eta, sizeof eta, el * (double)(total - done) / (double)done);
    if (total)
        fprintf(stderr, "\r\033[K%s %llu/%llu (%.0f%%) elapsed %s ETA %s", stage,
                (unsigned long long)done, (unsigned long long)total,
                100.0 * (double)done / (double)total, elapsed, eta);
    else
        fprintf(stderr, "\r\033[K%s %llu elapsed %s", stage,
                (unsigned long long)done, elapsed);
    p->active = true;
    return true;
}

lb_progress cli_progress_make(cli_progress *p) {
    memset(p, 0, sizeof *p);
    p->t_start = p->t_last = p->t0 = p->t_line = lb_time_s();
    /* LOWBIT_PROGRESS_INTERVAL=S: seconds between non-TTY lines (default 1) */
    const char *iv = getenv("LOWBIT_PROGRESS_INTERVAL");
    char *end = NULL;
    double v = iv ? strtod(iv, &end) : 1.0;
    p->line_interval = iv && end != iv && v >= 0 && v < 1e6 ? v : 1.0;
    lb_progress pr = {progress_cb, p};
    return pr;
}

void cli_progress_done(cli_progress *p) {
    if (p->active && isatty(STDERR_FILENO)) fputc('\n', stderr);
    p->active = false;
}

void cli_json_string(FILE *fp, const char *s) {
    fputc('"', fp);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': fputs("\\\"", fp); break;
        case '\\': fputs("\\\\", fp); break;
        case '\n': fputs("\\n", fp); break;
        case '\r': fputs("\\r", fp); break;
        case '\t': fputs("\\t", fp); break;
        default:
            if (*c < 0x20)
                fprintf(fp, "\\u%04x", *c);
            else
                fputc(*c, fp);
        }
    }
    fputc('"', fp);
}

lb_status cli_read_stdin(size_t max, char **out, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    *out = NULL;
    if (!buf) return lb_set_error(LB_ERR_NOMEM, "stdin: out of memory");
    for (;;) {
        if (n == cap) {
            if (cap >= max) {
                free(buf);
                return lb_set_error(LB_ERR_RANGE, "stdin: larger than %zu bytes", max);
            }
            size_t nc = cap * 2 > max ? max : cap * 2;
            char *nb = realloc(buf, nc + 1);
            if (!nb) {
                free(buf);
                return lb_set_error(LB_ERR_NOMEM, "stdin: out of memory");
            }
            buf = nb;
            cap = nc;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        n += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) {
        free(buf);
        return lb_set_error(LB_ERR_IO, "stdin: read error");
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = n;
    return LB_OK;
}
