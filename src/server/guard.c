/*
 * The connection guard of the HTTP server: caps, deadlines, eviction of
 * idle connections and JSON instead of libmicrohttpd's HTML error pages.
 * See guard.h for the contract.
 */
#include "server/guard.h"
#include "core/internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { G_IDLE = 0, G_READING, G_BUSY };

typedef struct g_conn {
    struct g_conn *prev, *next;
    srv_guard *g;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int state;
    bool served;  /* completed at least one request */
    bool closing; /* shut down by the guard */
    bool answered; /* srv_guard_take_error answered the current request */
    bool pending;  /* IDLE but bytes wait in the socket: a client whose
                      request line our (CPU-starved) thread has not read */
    double since; /* monotonic seconds of the last state change */
} g_conn;

struct srv_guard {
    srv_guard_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    g_conn *head, *tail;
    int live; /* connections not being closed by the guard */
    bool stop;
    pthread_t thread;
    srv_guard_stats st;
};

/* the connection whose MHD thread this is (set at its first request line) */
static _Thread_local g_conn *tls_conn;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool same_addr(const g_conn *a, const g_conn *b) {
    if (a->addr.ss_family != b->addr.ss_family) return false;
    if (a->addr.ss_family == AF_INET)
        return ((const struct sockaddr_in *)&a->addr)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)&b->addr)->sin_addr.s_addr;
    if (a->addr.ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)&a->addr)->sin6_addr,
                       &((const struct sockaddr_in6 *)&b->addr)->sin6_addr,
                       sizeof(struct in6_addr));
    return true; /* unknown families share one bucket */
}

/* Shut a connection down (lock held). */
static void close_conn(srv_guard *g, g_conn *c) {
    if (c->closing) return;
    c->closing = true;
    g->live--;
    shutdown(c->fd, SHUT_RDWR);
}

/* Eviction order: idle before reading (a request under way is worth
 * more), never-served before keep-alive, then the oldest. */
static int victim_rank(const g_conn *c) {
    return (c->state == G_READING || c->pending ? 2 : 0) + (c->served ? 1 : 0);
}

static bool has_pending(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* The connection to close to make room (lock held): not busy, not
 * `except`, of `like`'s address when like != NULL, lowest victim_rank,
 * then the oldest. NULL when every candidate is busy. */
static g_conn *pick_victim(srv_guard *g, const g_conn *except,
                           const g_conn *like) {
    g_conn *best = NULL;
    for (int tries = 0; tries < 8; tries++) {
        best = NULL;
        for (g_conn *c = g->head; c; c = c->next) {
            if (c == except || c->closing || c->state == G_BUSY) continue;
            if (like && !same_addr(c, like)) continue;
            int rc = victim_rank(c), rb = best ? victim_rank(best) : 0;
            if (!best || rc < rb || (rc == rb && c->since < best->since)) best = c;
        }
        /* an "idle" connection whose client has already sent bytes is a
         * request our thread has not read yet (a loaded machine), not an
         * idle client: rank it as reading and look again */
        if (!best || best->state != G_IDLE || best->pending || !has_pending(best->fd))
            return best;
        best->pending = true;
    }
    return best;
}

void srv_guard_on_connection(void *cls, struct MHD_Connection *mc,
                             void **socket_context,
                             enum MHD_ConnectionNotificationCode code) {
    srv_guard *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        g_conn *c = *socket_context;
        if (!c) return;
        pthread_mutex_lock(&g->mu);
        if (!c->closing) g->live--;
        if (c->prev) c->prev->next = c->next; else g->head = c->next;
        if (c->next) c->next->prev = c->prev; else g->tail = c->prev;
        g->st.open = (uint64_t)(g->live > 0 ? g->live : 0);
        pthread_mutex_unlock(&g->mu);
        free(c);
        *socket_context = NULL;
        return;
    }
    if (code != MHD_CONNECTION_NOTIFY_STARTED) return;
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    g_conn *c = calloc(1, sizeof *c);
    if (!c || !fi) {
        /* no bookkeeping possible: refuse rather than run unguarded */
        free(c);
        if (fi) shutdown(fi->connect_fd, SHUT_RDWR);
        return;
    }
    c->g = g;
    c->fd = fi->connect_fd;
    if (ai && ai->client_addr) {
        socklen_t n = ai->client_addr->sa_family == AF_INET6
                          ? sizeof(struct sockaddr_in6)
                          : ai->client_addr->sa_family == AF_INET
                                ? sizeof(struct sockaddr_in)
                                : 0;
        memcpy(&c->addr, ai->client_addr, n);
        c->addrlen = n;
        if (!n) c->addr.ss_family = ai->client_addr->sa_family;
    }
    c->since = now_s();
    pthread_mutex_lock(&g->mu);
    c->prev = g->tail;
    if (g->tail) g->tail->next = c; else g->head = c;
    g->tail = c;
    g->live++;
    int same = 0;
    for (g_conn *o = g->head; o; o = o->next)
        if (!o->closing && same_addr(o, c)) same++;
    if (same > g->cfg.max_conn_per_ip) {
        g_conn *v = pick_victim(g, c, c);
        if (v) {
            close_conn(g, v);
            g->st.evicted++;
        } else {
            close_conn(g, c);
            g->st.refused++;
        }
    }
    if (!c->closing && g->live > g->cfg.max_conn) {
        g_conn *v = pick_victim(g, c, NULL);
        if (v) {
            close_conn(g, v);
            g->st.evicted++;
        } else {
            close_conn(g, c);
            g->st.refused++;
        }
    }
    g->st.open = (uint64_t)(g->live > 0 ? g->live : 0);
    pthread_mutex_unlock(&g->mu);
    *socket_context = c;
}

static g_conn *conn_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void set_state(struct MHD_Connection *mc, int state) {
    g_conn *c = conn_of(mc);
    if (!c) return;
    pthread_mutex_lock(&c->g->mu);
    if (state == G_READING) c->answered = false;
    c->pending = false;
    if (state == G_IDLE && c->state != G_IDLE) c->served = true;
    c->state = state;
    c->since = now_s();
    pthread_mutex_unlock(&c->g->mu);
}

void *srv_guard_on_uri(void *cls, const char *uri, struct MHD_Connection *mc) {
    (void)cls;
    (void)uri;
    tls_conn = conn_of(mc);
    set_state(mc, G_READING);
    return NULL;
}

void srv_guard_busy(struct MHD_Connection *mc) { set_state(mc, G_BUSY); }
void srv_guard_done(struct MHD_Connection *mc) { set_state(mc, G_IDLE); }

void srv_guard_touch(struct MHD_Connection *mc, unsigned timeout_s) {
    if (!timeout_s) return;
    /* libmicrohttpd 0.9.75 restarts the timer only when the timeout goes
     * from 0 to non-zero (connection.c, MHD_CONNECTION_OPTION_TIMEOUT) */
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, timeout_s);
}

static void *watchdog(void *arg) {
    srv_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double t = now_s();
        for (g_conn *c = g->head; c; c = c->next) {
            if (c->closing || c->state == G_BUSY) continue;
            double lim = c->state == G_IDLE ? g->cfg.idle_timeout_s
                                            : g->cfg.read_timeout_s;
            if (t - c->since > lim) {
                close_conn(g, c);
                g->st.timed_out++;
            }
        }
        g->st.open = (uint64_t)(g->live > 0 ? g->live : 0);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

lb_status srv_guard_create(const srv_guard_config *cfg, srv_guard **out) {
    *out = NULL;
    srv_guard *g = calloc(1, sizeof *g);
    if (!g) return lb_set_error(LB_ERR_NOMEM, "server: out of memory");
    g->cfg = *cfg;
    if (g->cfg.max_conn < 1) g->cfg.max_conn = 1;
    if (g->cfg.max_conn_per_ip < 1) g->cfg.max_conn_per_ip = g->cfg.max_conn;
    if (!g->cfg.idle_timeout_s) g->cfg.idle_timeout_s = 1;
    if (!g->cfg.read_timeout_s) g->cfg.read_timeout_s = 1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, watchdog, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return lb_set_error(LB_ERR_IO, "server: cannot start a thread");
    }
    *out = g;
    return LB_OK;
}

void srv_guard_stop(srv_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    bool was = g->stop;
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (!was) pthread_join(g->thread, NULL);
}

void srv_guard_free(srv_guard *g) {
    if (!g) return;
    srv_guard_stop(g);
    for (g_conn *c = g->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void srv_guard_stats_get(srv_guard *g, srv_guard_stats *out) {
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    pthread_mutex_unlock(&g->mu);
}

/* Write all of s (blocking up to ~1 s in total on a non-blocking socket). */
static bool send_all(int fd, const char *s, size_t n) {
    double end = now_s() + 1.0;
    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k > 0) {
            s += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            double left = end - now_s();
            if (left <= 0) return false;
            struct pollfd p = {fd, POLLOUT, 0};
            poll(&p, 1, (int)(left * 1000) + 1);
            continue;
        }
        return false;
    }
    return true;
}

bool srv_guard_take_error(srv_guard *g, const char *fmt, va_list ap,
                          char *(*json_error)(unsigned status)) {
    static const char prefix[] =
        "Error processing request (HTTP response code is %u";
    g_conn *c = tls_conn;
    if (!g || !c || c->g != g || strncmp(fmt, prefix, sizeof prefix - 1))
        return false;
    va_list aq;
    va_copy(aq, ap);
    unsigned status = va_arg(aq, unsigned);
    va_end(aq);
    if (status < 400 || status > 599) return false;
    char *body = json_error(status);
    if (!body) return false;
    /* counted before the client can read the answer (a client that asks
     * /health on receiving it sees it counted) */
    pthread_mutex_lock(&g->mu);
    c->answered = true;
    g->st.http_errors++;
    pthread_mutex_unlock(&g->mu);
    const char *reason = MHD_get_reason_phrase_for(status);
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      status, reason && reason[0] ? reason : "Error",
                      strlen(body));
    if (hn > 0 && (size_t)hn < sizeof head &&
        send_all(c->fd, head, (size_t)hn))
        send_all(c->fd, body, strlen(body));
    free(body);
    shutdown(c->fd, SHUT_WR);
    /* lingering close: read what the client still sends so that the close
     * that follows does not reset the connection over our answer */
    double end = now_s() + 0.2;
    char sink[4096];
    size_t drained = 0;
    for (;;) {
        double left = end - now_s();
        if (left <= 0 || drained > (4u << 20)) break;
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) break;
        ssize_t k = recv(c->fd, sink, sizeof sink, 0);
        if (k <= 0) {
            if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            break;
        }
        drained += (size_t)k;
    }
    return true; /* MHD's page cannot leave any more: nothing to log */
}

bool srv_guard_quiet(void) {
    g_conn *c = tls_conn;
    if (!c) return false;
    pthread_mutex_lock(&c->g->mu);
    bool q = c->answered || c->closing;
    pthread_mutex_unlock(&c->g->mu);
    return q;
}
