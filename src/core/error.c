/* Thread-local error messages and the log callback. */
#include "internal.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define LB_ERR_MAX 1024

static _Thread_local char tl_error[LB_ERR_MAX];

static const char *const status_names[] = {
    "LB_OK",          "LB_ERR_INVALID_ARG", "LB_ERR_IO",
    "LB_ERR_FORMAT",  "LB_ERR_UNSUPPORTED", "LB_ERR_NOT_FOUND",
    "LB_ERR_NOMEM",   "LB_ERR_OVERFLOW",    "LB_ERR_RANGE",
    "LB_ERR_CANCELLED", "LB_ERR_INTERNAL"};

const char *lb_status_name(lb_status st) {
    if ((unsigned)st < LB_ARRAY_LEN(status_names)) return status_names[st];
    return "LB_ERR_UNKNOWN";
}

const char *lb_last_error(void) { return tl_error; }

void lb_clear_error(void) { tl_error[0] = '\0'; }

lb_status lb_set_error(lb_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_error, sizeof tl_error, fmt, ap);
    va_end(ap);
    return st;
}

lb_status lb_error_context(lb_status st, const char *fmt, ...) {
    char prefix[LB_ERR_MAX], old[LB_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_error, sizeof old);
    if (old[0])
        snprintf(tl_error, sizeof tl_error, "%s: %s", prefix, old);
    else
        snprintf(tl_error, sizeof tl_error, "%s", prefix);
    return st;
}

/* The callback and its user pointer are published together through one
 * atomic pointer to an immutable pair, so readers never see a torn update. */
typedef struct log_sink {
    lb_log_fn fn;
    void *user;
} log_sink;

static log_sink sinks[2];
static _Atomic(log_sink *) current_sink = NULL;
static atomic_int sink_slot = 0;

void lb_log_set_callback(lb_log_fn fn, void *user) {
    if (!fn) {
        atomic_store(&current_sink, NULL);
        return;
    }
    int slot = atomic_fetch_add(&sink_slot, 1) & 1;
    sinks[slot].fn = fn;
    sinks[slot].user = user;
    atomic_store(&current_sink, &sinks[slot]);
}

void lb_log(lb_log_level level, const char *fmt, ...) {
    log_sink *s = atomic_load(&current_sink);
    if (!s) return;
    char msg[LB_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->fn(level, msg, s->user);
}

bool lb_progress_report(const lb_progress *p, const char *stage, uint64_t done,
                        uint64_t total) {
    if (!p || !p->fn) return true;
    return p->fn(p->user, stage, done, total);
}

char *lb_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}
