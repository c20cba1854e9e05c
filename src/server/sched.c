/*
 * The scheduler: one thread owns the model and the slots' KV caches
 * (lb_multi_ctx) and runs continuous batching, as llama.cpp's server
 * (update_slots) does:
 *
 *   loop:
 *     move queued tasks into free slots (the slot whose cached tokens share
 *       the longest prefix with the prompt; that prefix is kept);
 *     drop cancelled tasks (client gone) and free their slots;
 *     batch = the pending token of every decoding slot
 *           + prompt chunks of prefilling slots, oldest first, until the
 *             batch holds n_batch tokens (logits only for a prompt's last
 *             token);
 *     lb_model_forward_multi(batch)            — one pass over the weights
 *     for each row of logits: lb_gen_step -> next token, text to the task.
 *
 * Connection threads only touch a task's (out) fields under its mutex and
 * the queue under the scheduler's mutex.
 */
#include "server/server_internal.h"
#include "lowbit/batch.h"
#include "core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Tasks                                                                     */
/* ------------------------------------------------------------------------ */

srv_task *srv_task_new(int32_t *prompt, int32_t n_prompt) {
    srv_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        pthread_mutex_destroy(&t->mu);
        free(t);
        return NULL;
    }
    t->prompt = prompt;
    t->n_prompt = n_prompt;
    t->max_tokens = -1;
    atomic_init(&t->cancel, false);
    atomic_init(&t->refs, 1);
    return t;
}

void srv_task_release(srv_task *t) {
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
    free(t->prompt);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    free(t->text);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static void deadline_in(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

char *srv_task_take(srv_task *t, int timeout_ms, size_t *len, bool *done) {
    struct timespec dl;
    deadline_in(&dl, timeout_ms);
    pthread_mutex_lock(&t->mu);
    while (!t->done && t->text_len == 0 && timeout_ms > 0)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT) break;
    char *out = NULL;
    *len = 0;
    if (t->text_len > 0) {
        out = t->text;
        *len = t->text_len;
        t->text = NULL;
        t->text_len = t->text_cap = 0;
    }
    *done = t->done && out == NULL;
    /* when text and done arrive together, hand out the text first */
    pthread_mutex_unlock(&t->mu);
    return out;
}

bool srv_task_wait_done(srv_task *t, int timeout_ms) {
    struct timespec dl;
    deadline_in(&dl, timeout_ms);
    pthread_mutex_lock(&t->mu);
    while (!t->done)
        if (pthread_cond_timedwait(&t->cv, &t->mu, &dl) == ETIMEDOUT) break;
    bool done = t->done;
    pthread_mutex_unlock(&t->mu);
    return done;
}

/* (scheduler) append produced text; false on allocation failure */
static bool task_put_text(srv_task *t, const char *s, size_t n) {
    bool ok = true;
    pthread_mutex_lock(&t->mu);
    if (n > 0) {
        if (t->text_len + n + 1 > t->text_cap) {
            size_t nc = (t->text_len + n + 1) * 2;
            char *q = realloc(t->text, nc);
            if (!q)
                ok = false;
            else {
                t->text = q;
                t->text_cap = nc;
            }
        }
        if (ok) {
            memcpy(t->text + t->text_len, s, n);
            t->text_len += n;
            t->text[t->text_len] = '\0';
        }
    }
    if (t->stream) pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return ok;
}

static void task_finish(srv_task *t, lb_stop_reason r, int32_t n_gen,
                        int err_status, const char *msg) {
    pthread_mutex_lock(&t->mu);
    t->done = true;
    t->stop_reason = r;
    t->n_gen = n_gen;
    t->err_status = err_status;
    if (msg) snprintf(t->err_msg, sizeof t->err_msg, "%s", msg);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* ------------------------------------------------------------------------ */
/* Scheduler                                                                 */
/* ------------------------------------------------------------------------ */

typedef enum slot_state { SLOT_FREE = 0, SLOT_PREFILL, SLOT_DECODE } slot_state;

typedef struct srv_slot {
    int id;
    slot_state state;
    srv_task *task;
    lb_gen *gen;
    int32_t n_done;    /* prompt tokens in the cache */
    int32_t next;      /* token to feed (decode) */
    uint64_t order;    /* assignment order (prefill fairness) */
    lb_lora_set lora;  /* adapters the cached positions were computed with */
} srv_slot;

/* Same adapters with the same scales, in the same order. */
static bool same_loras(const lb_lora_set *a, const lb_lora_set *b) {
    if (a->n != b->n) return false;
    for (int k = 0; k < a->n; k++)
        if (a->a[k] != b->a[k] || a->scale[k] != b->scale[k]) return false;
    return true;
}

struct srv_sched {
    const lb_model *m;
    const lb_tokenizer *tok;
    lb_multi_ctx *mc;
    int n_slots;
    int32_t n_batch;
    srv_slot *slots;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_task **queue; /* ring of max_queue + n_slots entries */
    int q_cap, q_head, q_len, max_queue;
    bool accepting, stop_now;
    pthread_t thread;
    bool thread_started;
    uint64_t order;

    /* batch buffers [n_batch + n_slots] */
    int32_t *b_tok, *b_seq, *b_pos;
    uint8_t *b_want;
    int *b_slot;
    float *logits; /* [n_slots, V] */

    /* stats (atomics: read by any thread) */
    atomic_uint_fast64_t completed, cancelled, rejected, gen_tokens,
        prompt_tokens, steps;
    atomic_int active, queued;
};

static lb_status detok(void *user, const int32_t *ids, size_t n, char **text,
                       size_t *len) {
    return lb_tokenizer_decode(user, ids, n, true, text, len);
}

/* on_token: forward text to the task; stop when the client is gone */
static bool slot_on_token(void *user, int32_t token, const char *text,
                          size_t len) {
    srv_slot *sl = user;
    (void)token;
    if (len && !task_put_text(sl->task, text, len)) return false;
    return !atomic_load(&sl->task->cancel);
}

static void slot_release(srv_sched *s, srv_slot *sl, lb_stop_reason r,
                         int err_status, const char *msg) {
    int32_t n_gen = sl->gen ? lb_gen_n_tokens(sl->gen) : 0;
    atomic_fetch_add(&s->gen_tokens, (uint64_t)n_gen);
    if (sl->gen) {
        lb_generate_result res;
        if (err_status == 0 && lb_gen_finish(sl->gen, &res) == LB_OK)
            lb_generate_result_free(&res);
        lb_gen_free(sl->gen);
        sl->gen = NULL;
    }
    if (err_status == 0 && atomic_load(&sl->task->cancel)) {
        atomic_fetch_add(&s->cancelled, 1);
    } else if (err_status == 0) {
        atomic_fetch_add(&s->completed, 1);
    }
    /* the slot is free before the client can see the answer: a client
     * that sends its next request on receiving this one must find the
     * slot free (with --queue 0 it got a spurious 503 otherwise) */
    srv_task *t = sl->task;
    sl->task = NULL;
    sl->state = SLOT_FREE;
    atomic_fetch_sub(&s->active, 1);
    task_finish(t, r, n_gen, err_status, msg);
    srv_task_release(t);
}

/* Put a task into a free slot (reusing the longest cached prefix). */
static void slot_assign(srv_sched *s, srv_task *t) {
    srv_slot *best = NULL;
    int32_t best_keep = -1;
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->state != SLOT_FREE) continue;
        const int32_t *cached;
        int32_t n = lb_multi_cached_tokens(s->mc, sl->id, &cached), k = 0;
        /* positions computed with other adapters cannot be reused */
        if (!same_loras(&sl->lora, &t->lora)) n = 0;
        while (k < n && k < t->n_prompt - 1 && cached[k] == t->prompt[k]) k++;
        if (k > best_keep) {
            best_keep = k;
            best = sl;
        }
    }
    /* the caller checked that a slot is free */
    lb_multi_truncate(s->mc, best->id, best_keep);
    best->lora = t->lora;
    lb_status lst = lb_multi_set_loras(s->mc, best->id, &t->lora);
    if (lst != LB_OK) { /* nothing cached is trusted then */
        lb_multi_truncate(s->mc, best->id, 0);
        best->lora.n = -1;
    }
    best->task = t;
    best->n_done = best_keep;
    best->order = s->order++;
    best->state = SLOT_PREFILL; /* (active was counted when dequeued) */
    t->n_reused = best_keep;
    lb_generate_params gp = lb_generate_default_params();
    gp.n_predict = t->max_tokens;
    gp.ignore_eos = t->ignore_eos;
    gp.sampling = t->sampling;
    gp.stop = (const char *const *)t->stop;
    gp.n_stop = t->n_stop;
    gp.detok = (lb_detok){detok, (void *)s->tok};
    gp.on_token = slot_on_token;
    gp.user = best;
    lb_status st = lst != LB_OK ? lst
                   : lb_gen_create(s->m, t->prompt, t->n_prompt,
                                   lb_multi_n_ctx(s->mc), &gp, &best->gen);
    if (st != LB_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", lb_last_error());
        slot_release(s, best, LB_STOP_LENGTH, 500, msg);
    }
}

static bool has_free_slot(const srv_sched *s) {
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].state == SLOT_FREE) return true;
    return false;
}

static int n_active_slots(const srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) n += s->slots[i].state != SLOT_FREE;
    return n;
}

/* One scheduler step over the active slots. */
static void step(srv_sched *s) {
    int n = 0;
    /* decoding slots: one token each */
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->state != SLOT_DECODE) continue;
        s->b_tok[n] = sl->next;
        s->b_seq[n] = sl->id;
        s->b_pos[n] = lb_gen_pos(sl->gen) - 1;
        s->b_want[n] = 1;
        s->b_slot[n] = i;
        n++;
    }
    /* prefilling slots, oldest first, while the batch has room */
    int32_t budget = s->n_batch - n;
    for (;;) {
        srv_slot *sl = NULL;
        for (int i = 0; i < s->n_slots; i++) {
            srv_slot *c = &s->slots[i];
            if (c->state != SLOT_PREFILL || c->n_done >= c->task->n_prompt)
                continue;
            bool in_batch = false;
            for (int k = 0; k < n && !in_batch; k++)
                in_batch = s->b_slot[k] == i;
            if (!in_batch && (!sl || c->order < sl->order)) sl = c;
        }
        if (!sl || budget <= 0) break;
        int32_t left = sl->task->n_prompt - sl->n_done;
        int32_t k = left < budget ? left : budget;
        for (int32_t j = 0; j < k; j++) {
            int32_t p = sl->n_done + j;
            s->b_tok[n] = sl->task->prompt[p];
            s->b_seq[n] = sl->id;
            s->b_pos[n] = p;
            s->b_want[n] = p == sl->task->n_prompt - 1;
            s->b_slot[n] = sl->id;
            n++;
        }
        budget -= k;
    }
    if (n == 0) return;
    lb_status st = lb_model_forward_multi(s->mc, s->b_tok, s->b_seq, s->b_pos,
                                          n, s->b_want, s->logits);
    atomic_fetch_add(&s->steps, 1);
    if (st != LB_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, "inference failed: %s", lb_last_error());
        bool seen[4096] = {false};
        for (int k = 0; k < n; k++) {
            int i = s->b_slot[k];
            if (seen[i]) continue;
            seen[i] = true;
            lb_multi_truncate(s->mc, s->slots[i].id, 0);
            slot_release(s, &s->slots[i], LB_STOP_LENGTH, 500, msg);
        }
        return;
    }
    const int32_t V = s->m->config.vocab_size;
    int r = 0;
    for (int k = 0; k < n; k++) {
        srv_slot *sl = &s->slots[s->b_slot[k]];
        if (sl->state == SLOT_PREFILL) {
            sl->n_done++;
            atomic_fetch_add(&s->prompt_tokens, 1);
        }
        if (!s->b_want[k]) continue;
        const float *lg = s->logits + (size_t)r++ * V;
        if (atomic_load(&sl->task->cancel)) {
            slot_release(s, sl, LB_STOP_CALLBACK, 0, NULL);
            continue;
        }
        int32_t next = -1;
        st = lb_gen_step(sl->gen, lg, &next);
        if (st != LB_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "generation failed: %s",
                     lb_last_error());
            slot_release(s, sl, LB_STOP_LENGTH, 500, msg);
            continue;
        }
        if (next < 0) {
            slot_release(s, sl, lb_gen_stop_reason(sl->gen), 0, NULL);
        } else {
            sl->next = next;
            sl->state = SLOT_DECODE;
        }
    }
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop_now && s->q_len == 0 && n_active_slots(s) == 0)
            pthread_cond_wait(&s->cv, &s->mu);
        bool stop = s->stop_now;
        /* queued tasks into free slots (cancelled ones are dropped) */
        while (!stop && s->q_len > 0 && has_free_slot(s)) {
            srv_task *t = s->queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->q_cap;
            s->q_len--;
            atomic_fetch_sub(&s->queued, 1);
            if (atomic_load(&t->cancel)) {
                atomic_fetch_add(&s->cancelled, 1);
                task_finish(t, LB_STOP_CALLBACK, 0, 0, NULL);
                srv_task_release(t);
                continue;
            }
            /* counted busy before the lock is dropped: a submit in between
             * must not see the slot free (with --queue 0 it accepted a
             * second request into the queue) */
            atomic_fetch_add(&s->active, 1);
            pthread_mutex_unlock(&s->mu);
            slot_assign(s, t);
            pthread_mutex_lock(&s->mu);
        }
        if (stop) {
            while (s->q_len > 0) {
                srv_task *t = s->queue[s->q_head];
                s->q_head = (s->q_head + 1) % s->q_cap;
                s->q_len--;
                atomic_fetch_sub(&s->queued, 1);
                task_finish(t, LB_STOP_CALLBACK, 0, 503,
                            "the server is shutting down");
                srv_task_release(t);
            }
        }
        pthread_mutex_unlock(&s->mu);
        if (stop) {
            for (int i = 0; i < s->n_slots; i++)
                if (s->slots[i].state != SLOT_FREE)
                    slot_release(s, &s->slots[i], LB_STOP_CALLBACK, 503,
                                 "the server is shutting down");
            return NULL;
        }
        /* client gone: free the slot now, even mid-prompt */
        for (int i = 0; i < s->n_slots; i++)
            if (s->slots[i].state != SLOT_FREE &&
                atomic_load(&s->slots[i].task->cancel))
                slot_release(s, &s->slots[i], LB_STOP_CALLBACK, 0, NULL);
        step(s);
    }
}

/* Free s and what srv_sched_create allocated for it (any part may be
 * missing after a failed create). */
static void sched_release(srv_sched *s) {
    for (int i = 0; s->slots && i < s->n_slots; i++) lb_gen_free(s->slots[i].gen);
    lb_multi_free(s->mc);
    free(s->slots);
    free(s->queue);
    free(s->b_tok);
    free(s->b_seq);
    free(s->b_pos);
    free(s->b_want);
    free(s->b_slot);
    lb_free(s->logits);
    free(s);
}

lb_status srv_sched_create(const lb_model *m, const lb_tokenizer *tok,
                           const lb_server_config *cfg, srv_sched **out) {
    *out = NULL;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return lb_set_error(LB_ERR_NOMEM, "server: out of memory");
    s->m = m;
    s->tok = tok;
    s->n_slots = cfg->n_parallel > 0 ? cfg->n_parallel : 1;
    if (s->n_slots > 4096) s->n_slots = 4096;
    s->n_batch = cfg->n_batch > 0 ? cfg->n_batch : 256;
    if (s->n_batch > 65536) s->n_batch = 65536;
    int max_queue = cfg->max_queue < 0 ? 0 : cfg->max_queue;
    s->max_queue = max_queue;
    s->q_cap = max_queue + s->n_slots;
    lb_status st = LB_OK;
    lb_multi_params mp = lb_multi_default_params();
    mp.n_seq = s->n_slots;
    mp.n_ctx = cfg->n_ctx;
    mp.n_batch = s->n_batch + s->n_slots;
    mp.n_threads = cfg->n_threads;
    if ((st = lb_multi_create(m, &mp, &s->mc)) != LB_OK) {
        free(s);
        return st;
    }
    size_t nb = (size_t)s->n_batch + (size_t)s->n_slots;
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->queue = calloc((size_t)s->q_cap, sizeof *s->queue);
    s->b_tok = malloc(nb * sizeof *s->b_tok);
    s->b_seq = malloc(nb * sizeof *s->b_seq);
    s->b_pos = malloc(nb * sizeof *s->b_pos);
    s->b_want = malloc(nb);
    s->b_slot = malloc(nb * sizeof *s->b_slot);
    s->logits = lb_alloc((size_t)s->n_slots * (size_t)m->config.vocab_size *
                         sizeof(float));
    if (!s->slots || !s->queue || !s->b_tok || !s->b_seq || !s->b_pos ||
        !s->b_want || !s->b_slot || !s->logits) {
        st = lb_set_error(LB_ERR_NOMEM, "server: out of memory");
        goto fail;
    }
    for (int i = 0; i < s->n_slots; i++) s->slots[i].id = i;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->accepting = true;
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        st = lb_set_error(LB_ERR_NOMEM, "server: cannot start the scheduler "
                          "thread");
        goto fail;
    }
    s->thread_started = true;
    *out = s;
    return LB_OK;
fail:
    sched_release(s);
    return st;
}

int32_t srv_sched_n_ctx(const srv_sched *s) { return lb_multi_n_ctx(s->mc); }
int srv_sched_n_slots(const srv_sched *s) { return s->n_slots; }

int srv_sched_submit(srv_sched *s, srv_task *t, bool *shutting_down) {
    *shutting_down = false;
    pthread_mutex_lock(&s->mu);
    if (!s->accepting) {
        pthread_mutex_unlock(&s->mu);
        *shutting_down = true;
        return 503;
    }
    /* room: free slots absorb queued tasks at once, so the waiting line is
     * q_len minus the free slots */
    int free_slots = s->n_slots - atomic_load(&s->active);
    if (free_slots < 0) free_slots = 0;
    if (s->q_len >= s->max_queue + free_slots || s->q_len >= s->q_cap) {
        pthread_mutex_unlock(&s->mu);
        atomic_fetch_add(&s->rejected, 1);
        return 503;
    }
    atomic_fetch_add(&t->refs, 1);
    s->queue[(s->q_head + s->q_len) % s->q_cap] = t;
    s->q_len++;
    atomic_fetch_add(&s->queued, 1);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void srv_sched_stop(srv_sched *s, unsigned drain_ms) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->accepting = false;
    pthread_mutex_unlock(&s->mu);
    double end = lb_time_s() + drain_ms / 1000.0;
    while (lb_time_s() < end &&
           (atomic_load(&s->active) > 0 || atomic_load(&s->queued) > 0)) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&s->mu);
    s->stop_now = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    s->thread_started = false;
}

void srv_sched_free(srv_sched *s) {
    if (!s) return;
    if (s->thread_started) srv_sched_stop(s, 0);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    sched_release(s);
}

void srv_sched_stats(srv_sched *s, lb_server_stats *o) {
    o->completed = atomic_load(&s->completed);
    o->cancelled = atomic_load(&s->cancelled);
    o->rejected_busy = atomic_load(&s->rejected);
    o->tokens_generated = atomic_load(&s->gen_tokens);
    o->tokens_prompt = atomic_load(&s->prompt_tokens);
    o->steps = atomic_load(&s->steps);
    o->active_slots = atomic_load(&s->active);
    o->queued = atomic_load(&s->queued);
}
