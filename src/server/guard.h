/*
 * guard.h — the server's connection guard (guard.c): connection caps
 * (total and per client address) that close the oldest idle connection
 * to make room, idle and request-read deadlines enforced by a watchdog
 * thread (slowloris), and the replacement of libmicrohttpd's own HTML
 * error pages by lowbit's JSON errors. Used by http.c only. Not installed.
 *
 * Connection states, as the guard sees them:
 *   IDLE     connected, or between two keep-alive requests: no request line
 *            yet. Closed after idle_timeout_s.
 *   READING  request line seen (MHD's URI log callback), headers and body
 *            arriving. Closed after read_timeout_s from the request line.
 *   BUSY     the whole request is here and is being answered (a generation
 *            in flight, a stream): never closed by the guard.
 * A new connection beyond max_conn (or beyond max_conn_per_ip from the same
 * address) shuts down the oldest IDLE connection — never-served ones first,
 * then keep-alive ones; an IDLE one with bytes waiting in its socket counts
 * as READING —, else the oldest READING one (never-served first),
 * or, when every other connection is BUSY, the new connection itself.
 * "Closing" is shutdown(fd, SHUT_RDWR) under the guard's lock: the
 * connection's own MHD thread then sees EOF and closes it; MHD reports the
 * close (NOTIFY_CLOSED, which takes the lock) before it closes the fd, so
 * the guard never touches a reused descriptor.
 */
#ifndef LB_SERVER_GUARD_H
#define LB_SERVER_GUARD_H

#include "lowbit/core.h"

#include <microhttpd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct srv_guard srv_guard;

typedef struct srv_guard_config {
    int max_conn;            /* live connections (> 0)                  */
    int max_conn_per_ip;     /* live connections per client address      */
    unsigned idle_timeout_s; /* IDLE deadline (> 0)                      */
    unsigned read_timeout_s; /* READING deadline (> 0)                   */
} srv_guard_config;

typedef struct srv_guard_stats {
    uint64_t open;       /* live connections now                        */
    uint64_t evicted;    /* idle ones closed to make room               */
    uint64_t timed_out;  /* closed at the idle / read deadline          */
    uint64_t refused;    /* new ones closed: every other one was busy   */
    uint64_t http_errors;/* MHD error pages replaced by JSON errors     */
} srv_guard_stats;

/* Starts the watchdog thread. Errors: LB_ERR_NOMEM, LB_ERR_IO (thread). */
lb_status srv_guard_create(const srv_guard_config *cfg, srv_guard **out);
/* Stops the watchdog (no more deadline closes; idempotent): call before
 * MHD_stop_daemon, which closes every connection itself. */
void srv_guard_stop(srv_guard *g);
/* Stops the watchdog and frees what is left; call after MHD_stop_daemon. */
void srv_guard_free(srv_guard *g);
void srv_guard_stats_get(srv_guard *g, srv_guard_stats *out);

/* MHD_OPTION_NOTIFY_CONNECTION and MHD_OPTION_URI_LOG_CALLBACK (cls: the
 * guard). The URI callback returns NULL (so the access handler's first
 * call still sees *con_cls == NULL). */
void srv_guard_on_connection(void *cls, struct MHD_Connection *c,
                             void **socket_context,
                             enum MHD_ConnectionNotificationCode code);
void *srv_guard_on_uri(void *cls, const char *uri, struct MHD_Connection *c);

/* The request on c is complete and being answered (BUSY). */
void srv_guard_busy(struct MHD_Connection *c);
/* The request on c has been answered (MHD_OPTION_NOTIFY_COMPLETED): IDLE. */
void srv_guard_done(struct MHD_Connection *c);

/* Restart c's libmicrohttpd inactivity timer: a handler that blocked
 * longer than MHD_OPTION_CONNECTION_TIMEOUT (a long generation, a queued
 * stream) must not have its answer dropped as "timed out" by MHD. Call on
 * c's own thread, from a handler or content-reader callback. */
void srv_guard_touch(struct MHD_Connection *c, unsigned timeout_s);

/* From the MHD error logger: when (fmt, ap) is libmicrohttpd 0.9.x's
 * "Error processing request (HTTP response code is %u ...)" on a
 * connection thread whose request line was seen, write lowbit's JSON error
 * for that status on the socket (one complete "Connection: close"
 * response), shut the socket's write side (so MHD's own HTML page, which
 * 0.9.75 sends with its header block twice, never leaves) and drain what
 * the client still sends for up to 200 ms (no RST over the answer).
 * Returns true when it did so. json_error builds the body (malloc'd) for
 * a status. */
bool srv_guard_take_error(srv_guard *g, const char *fmt, va_list ap,
                          char *(*json_error)(unsigned status));

/* True on a connection thread after srv_guard_take_error answered its
 * current request or after the guard closed the connection: MHD's
 * messages about it (the page it could not send, "closed by remote side")
 * are noise then, and a client could flood the log with them. */
bool srv_guard_quiet(void);

#endif
