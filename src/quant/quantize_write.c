/*
 * lb_quantize_model (lowbit/quantize.h): the checkpoint side of the
 * quantizer. The engine (quantize.c) hands each quantized module here;
 * after every decoder layer its results are written to
 * OUT.tmp-XXXXXX/layers/ (resumable state: packed codes, zero points as
 * gptq_v2 qzeros, float32 scales, g_idx, per-module report); at the end
 * the final checkpoint is streamed (lb_st_writer) from the source model
 * and those files, with config.json / quantize_config.json / tokenizer
 * files / reports, and the temp directory is renamed to OUT.
 * Layout and config keys: AutoGPTQ @9f7d370 save_quantized and
 * BaseQuantizeConfig, GPTQModel's quantization_config extras.
 */
#include "quant/quantize_internal.h"
#include "lowbit/file.h"
#include "lowbit/gptq_ckpt.h"
#include "lowbit/hadamard.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define STATE_FILE "lowbit-state.json"
#define LAYERS_DIR "layers"
#define QUANTIZER "lowbit:" LB_VERSION_STRING

/* ------------------------------------------------------------------------ */
/* Small file helpers                                                        */
/* ------------------------------------------------------------------------ */

static lb_status write_text(const char *path, const char *text) {
    lb_atomic_file af;
    LB_TRY(lb_atomic_open(path, &af));
    lb_status s = lb_atomic_write(&af, text, strlen(text));
    if (s == LB_OK) s = lb_atomic_commit(&af);
    lb_atomic_abort(&af);
    return s;
}

static lb_status write_json(const char *dir, const char *name, cJSON *j) {
    char *txt = cJSON_Print(j);
    if (!txt) return lb_set_error(LB_ERR_NOMEM, "quantize: out of memory");
    char *p = lb_path_join(dir, name);
    size_t n = strlen(txt);
    char *t2 = realloc(txt, n + 2);
    if (t2) {
        txt = t2;
        txt[n] = '\n';
        txt[n + 1] = '\0';
    }
    lb_status s = p ? write_text(p, txt)
                    : lb_set_error(LB_ERR_NOMEM, "out of memory");
    free(p);
    free(txt);
    return s;
}

static lb_status copy_file(const char *src, const char *dst) {
    char *data = NULL;
    size_t n = 0;
    LB_TRY(lb_read_file(src, (size_t)1 << 31, &data, &n));
    lb_atomic_file af;
    lb_status s = lb_atomic_open(dst, &af);
    if (s == LB_OK) s = lb_atomic_write(&af, data, n);
    if (s == LB_OK) s = lb_atomic_commit(&af);
    lb_atomic_abort(&af);
    free(data);
    return s;
}

/* Remove a directory tree we created (no symlinks followed). */
static void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                    continue;
                char *c = lb_path_join(path, e->d_name);
                if (c) rm_rf(c);
                free(c);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

static bool dir_empty(const char *path) {
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            empty = false;
            break;
        }
    closedir(d);
    return empty;
}

static void fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* dirname / basename copies of a path without trailing slashes. */
static void split_path(const char *path, char *dir, size_t nd, char *base,
                       size_t nb) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = '\0';
    char *sl = strrchr(tmp, '/');
    if (!sl) {
        snprintf(dir, nd, ".");
        snprintf(base, nb, "%s", tmp);
    } else if (sl == tmp) {
        snprintf(dir, nd, "/");
        snprintf(base, nb, "%s", sl + 1);
    } else {
        *sl = '\0';
        snprintf(dir, nd, "%s", tmp);
        snprintf(base, nb, "%s", sl + 1);
    }
}

/* ------------------------------------------------------------------------ */
/* Writer state                                                              */
/* ------------------------------------------------------------------------ */

typedef struct pend_mod {
    const qz_module *mod;
    int64_t ng;
    int32_t *qweight;   /* [in*bits/32, out]                 */
    int32_t *qzeros;    /* [ng, out*bits/32], v2 convention  */
    float *scales;      /* [ng, out] f32                     */
    int32_t *g_idx;     /* [in]                              */
    lb_quantize_module_report *rep;
} pend_mod;

typedef struct qwriter {
    const lb_quantize_params *p;
    const char *model_dir;
    char tmp[PATH_MAX];
    char layers[PATH_MAX];
    const qz_module *mods;
    int n_mods, n_layers;
    pend_mod *pend; /* [n_mods]: the current layer's results */
    int n_pend;
    /* rotated checkpoints (p->rotate): the rotated embeddings and lm_head
     * (F32 [V, hidden]), a row of ones for the folded norms, the order */
    float *rot_embed, *rot_head, *rot_ones;
    int64_t rot_shape[2], rot_order;
    int64_t ff; /* intermediate_size (meta.rotation.online's order) */
    /* rotated MoE layers: the routers and Qwen2-MoE's shared_expert_gate
     * (dense, not modules), F32 copies written in place of the source's */
    struct rot_dense { char name[160]; float *data; int64_t n; } *rot_dense;
    int n_rot_dense;
    bool rot_moe; /* meta.rotation names the MoE parts */
    /* dense tensors the method changed in this layer (AWQ) */
    char dense_name[5][160];
    float *dense[5];
    int64_t dense_n[5];
    int n_dense;
    lb_quantize_report *rep;
} qwriter;

static void pend_free(pend_mod *m) {
    lb_free(m->qweight);
    lb_free(m->qzeros);
    lb_free(m->scales);
    lb_free(m->g_idx);
    memset(m, 0, sizeof *m);
}

static uint64_t fnv1a(const void *data, size_t n, uint64_t h);
#define FNV_OFFSET 14695981039346656037ull

/* Checksum of a layer state file, stored in its metadata ("lowbit_checksum")
 * and verified on --resume, so a flipped byte in a finished layer cannot
 * make a wrong checkpoint silently: FNV-1a 64 of the report JSON, plus (mod
 * 2^64) per tensor FNV-1a 64 of its name, type, shape and data bytes
 * (order-independent: the writer adds tensors in module order, the reader
 * lists them by name). Detects corruption, not tampering. */
static uint64_t tensor_sum(const char *name, lb_type type, int n_dims,
                           const int64_t *shape, const void *data, size_t nbytes) {
    uint64_t h = fnv1a(name, strlen(name) + 1, FNV_OFFSET);
    int32_t t32 = (int32_t)type;
    h = fnv1a(&t32, sizeof t32, h);
    for (int d = 0; d < n_dims; d++) h = fnv1a(&shape[d], sizeof shape[d], h);
    return fnv1a(data, nbytes, h);
}

static void layer_path(const qwriter *w, int layer, char *buf, size_t n) {
    if (layer >= w->n_layers)
        snprintf(buf, n, "%s/lm_head.safetensors", w->layers);
    else
        snprintf(buf, n, "%s/layer-%05d.safetensors", w->layers, layer);
}

static lb_status w_module_done(void *user, const qz_module *q, const float *W,
                               const lb_gptq_result *res,
                               lb_quantize_module_report *rep) {
    qwriter *w = user;
    const int64_t out = q->out, in = q->in, ng = res->n_groups;
    const int bits = q->bits;
    /* v1 cannot hold a zero point of 0 (it stores zero - 1) */
    if (w->p->format == LB_GPTQ_FORMAT_V1)
        for (int64_t o = 0; o < out; o++)
            for (int64_t g = 0; g < ng; g++)
                if (res->zeros[o * ng + g] == 0)
                    return lb_set_error(
                        LB_ERR_RANGE,
                        "%s: group %lld of output row %lld has zero point 0 "
                        "(an asymmetric group without negative weights), "
                        "which checkpoint_format \"gptq\" (v1, zero - 1) "
                        "cannot store; use gptq_v2 (--checkpoint-format "
                        "gptq_v2) or a symmetric grid",
                        q->name, (long long)g, (long long)o);
    /* scales as stored (f16): must stay finite; SNR of what is stored */
    int64_t n_zero16 = 0;
    for (int64_t i = 0; i < out * ng; i++) {
        uint16_t h = lb_f32_to_f16(res->scales[i]);
        if ((h & 0x7C00) == 0x7C00)
            return lb_set_error(LB_ERR_RANGE,
                                "%s: scale %g overflows the f16 scales of "
                                "the GPTQ format",
                                q->name, (double)res->scales[i]);
        if ((h & 0x7FFF) == 0) n_zero16++;
    }
    if (n_zero16)
        lb_log(LB_LOG_WARN, "%s: %lld scales underflow to 0 in f16 (their "
               "groups dequantize to 0)", q->name, (long long)n_zero16);
    double se = 0.0, sw = 0.0;
    for (int64_t o = 0; o < out; o++)
        for (int64_t c = 0; c < in; c++) {
            int64_t g = res->g_idx[c];
            float s16 = lb_f16_to_f32(lb_f32_to_f16(res->scales[o * ng + g]));
            float v = s16 * (float)(res->codes[o * in + c] -
                                    res->zeros[o * ng + g]);
            double d = (double)W[o * in + c] - (double)v;
            se += d * d;
            sw += (double)W[o * in + c] * (double)W[o * in + c];
        }
    rep->snr_db = se == 0.0 ? INFINITY : 10.0 * log10(sw / se);

    if (w->n_pend >= w->n_mods)
        return lb_set_error(LB_ERR_INTERNAL, "quantize: too many modules in "
                            "one layer (%s)", q->name);
    pend_mod *m = &w->pend[w->n_pend];
    memset(m, 0, sizeof *m);
    m->mod = q;
    m->ng = ng;
    m->rep = rep;
    const int64_t qw_n = in / 32 * bits * out, qz_n = ng * (out / 32 * bits);
    m->qweight = lb_alloc((size_t)qw_n * 4);
    m->qzeros = lb_alloc((size_t)qz_n * 4);
    m->scales = lb_alloc((size_t)(ng * out) * 4);
    m->g_idx = lb_alloc((size_t)in * 4);
    int32_t *zg = lb_alloc((size_t)(ng * out) * 4);
    lb_status s = LB_OK;
    if (!m->qweight || !m->qzeros || !m->scales || !m->g_idx || !zg)
        s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", q->name);
    if (s == LB_OK) s = lb_gptq_pack_qweight_u8(res->codes, out, in, bits,
                                             m->qweight);
    if (s == LB_OK) s = lb_gptq_result_groups_major(res, m->scales, zg);
    if (s == LB_OK)
        s = lb_gptq_pack_qzeros(zg, ng, out, bits, LB_GPTQ_FORMAT_V2,
                                m->qzeros);
    if (s == LB_OK) memcpy(m->g_idx, res->g_idx, (size_t)in * 4);
    lb_free(zg);
    if (s != LB_OK) {
        pend_free(m);
        return lb_error_context(s, "%s", q->name);
    }
    w->n_pend++;
    return LB_OK;
}

static cJSON *report_to_json(const lb_quantize_module_report *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddNumberToObject(o, "loss", r->loss);
    cJSON_AddNumberToObject(o, "avg_loss", r->avg_loss);
    cJSON_AddNumberToObject(o, "damp_percent", r->damp_percent);
    cJSON_AddNumberToObject(o, "damp_retries", r->n_damp_retries);
    cJSON_AddNumberToObject(o, "dead_columns", (double)r->n_dead);
    cJSON_AddNumberToObject(o, "nsamples", (double)r->nsamples);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    if (isfinite(r->snr_db)) cJSON_AddNumberToObject(o, "snr_db", r->snr_db);
    return o;
}

static double jnum(const cJSON *o, const char *k, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static void dense_free(qwriter *w) {
    for (int i = 0; i < w->n_dense; i++) lb_free(w->dense[i]);
    w->n_dense = 0;
}

static lb_status w_tensor_done(void *user, int layer, const char *name,
                               const float *data, int64_t n) {
    qwriter *w = user;
    (void)layer;
    if (w->n_dense == (int)LB_ARRAY_LEN(w->dense))
        return lb_set_error(LB_ERR_INTERNAL, "quantize: too many dense "
                            "tensors in one layer (%s)", name);
    float *c = lb_alloc((size_t)n * sizeof(float));
    if (!c) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
    memcpy(c, data, (size_t)n * sizeof(float));
    snprintf(w->dense_name[w->n_dense], sizeof w->dense_name[0], "%s", name);
    w->dense[w->n_dense] = c;
    w->dense_n[w->n_dense++] = n;
    return LB_OK;
}

static lb_status w_cached_tensor(void *user, int layer, const char *name,
                                 float *dst, int64_t n, bool *found) {
    qwriter *w = user;
    *found = false;
    char path[PATH_MAX + 64];
    layer_path(w, layer, path, sizeof path);
    lb_safetensors *st = NULL;
    LB_TRY(lb_st_open(path, &st));
    const lb_tensor *t = lb_st_find(st, name);
    lb_status s = LB_OK;
    if (t && (t->type != LB_TYPE_F32 || t->n_dims != 1 || t->shape[0] != n))
        s = lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s' is not F32 [%lld]",
                         path, name, (long long)n);
    else if (t) {
        memcpy(dst, t->data, (size_t)n * sizeof(float));
        *found = true;
    }
    lb_st_close(st);
    return s;
}

static lb_status w_layer_done(void *user, int layer) {
    qwriter *w = user;
    char path[PATH_MAX + 64];
    layer_path(w, layer, path, sizeof path);
    lb_st_writer *sw = NULL;
    lb_status s = lb_st_writer_create(&sw);
    uint64_t sum = 0; /* over every tensor of the file, as verify_layer_file */
    for (int i = 0; i < w->n_dense && s == LB_OK; i++) {
        s = lb_st_writer_add(sw, w->dense_name[i], LB_TYPE_F32, 1,
                             &w->dense_n[i], w->dense[i]);
        sum += tensor_sum(w->dense_name[i], LB_TYPE_F32, 1, &w->dense_n[i], w->dense[i],
                          (size_t)w->dense_n[i] * sizeof(float));
    }
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < w->n_pend && s == LB_OK; i++) {
        pend_mod *m = &w->pend[i];
        const qz_module *q = m->mod;
        char nm[200];
        int64_t sh[2];
        sh[0] = q->in / 32 * q->bits, sh[1] = q->out;
        snprintf(nm, sizeof nm, "%s.qweight", q->name);
        s = lb_st_writer_add(sw, nm, LB_TYPE_I32, 2, sh, m->qweight);
        sum += tensor_sum(nm, LB_TYPE_I32, 2, sh, m->qweight, (size_t)(sh[0] * sh[1]) * 4);
        sh[0] = m->ng, sh[1] = q->out / 32 * q->bits;
        snprintf(nm, sizeof nm, "%s.qzeros", q->name);
        if (s == LB_OK) s = lb_st_writer_add(sw, nm, LB_TYPE_I32, 2, sh, m->qzeros);
        sum += tensor_sum(nm, LB_TYPE_I32, 2, sh, m->qzeros, (size_t)(sh[0] * sh[1]) * 4);
        sh[0] = m->ng, sh[1] = q->out;
        snprintf(nm, sizeof nm, "%s.scales", q->name);
        if (s == LB_OK) s = lb_st_writer_add(sw, nm, LB_TYPE_F32, 2, sh, m->scales);
        sum += tensor_sum(nm, LB_TYPE_F32, 2, sh, m->scales, (size_t)(sh[0] * sh[1]) * 4);
        snprintf(nm, sizeof nm, "%s.g_idx", q->name);
        if (s == LB_OK) s = lb_st_writer_add(sw, nm, LB_TYPE_I32, 1, &q->in, m->g_idx);
        sum += tensor_sum(nm, LB_TYPE_I32, 1, &q->in, m->g_idx, (size_t)q->in * 4);
        cJSON_AddItemToArray(arr, report_to_json(m->rep));
    }
    char *js = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    if (s == LB_OK && !js) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
    if (s == LB_OK) s = lb_st_writer_set_metadata(sw, "lowbit_report", js);
    if (s == LB_OK) {
        char hx[48];
        snprintf(hx, sizeof hx, "fnv1a64:%016llx",
                 (unsigned long long)(sum + fnv1a(js, strlen(js), FNV_OFFSET)));
        s = lb_st_writer_set_metadata(sw, "lowbit_checksum", hx);
    }
    if (s == LB_OK) s = lb_st_writer_set_metadata(sw, "format", "pt");
    if (s == LB_OK) s = lb_st_writer_write_file(sw, path);
    free(js);
    lb_st_writer_free(sw);
    for (int i = 0; i < w->n_pend; i++) pend_free(&w->pend[i]);
    w->n_pend = 0;
    dense_free(w);
    return s;
}

/* The file's "lowbit_checksum" against its contents (tensor_sum). */
static lb_status verify_layer_file(const lb_safetensors *st, const char *path,
                                   const char *report_json) {
    const char *want = lb_st_metadata(st, "lowbit_checksum");
    if (!want)
        return lb_set_error(LB_ERR_FORMAT, "%s: no lowbit_checksum metadata "
                            "(written by an older lowbit): it cannot be "
                            "verified", path);
    uint64_t sum = fnv1a(report_json, strlen(report_json), FNV_OFFSET);
    for (size_t i = 0; i < lb_st_count(st); i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        sum += tensor_sum(t->name, t->type, t->n_dims, t->shape, t->data, t->nbytes);
    }
    char hx[48];
    snprintf(hx, sizeof hx, "fnv1a64:%016llx", (unsigned long long)sum);
    if (strcmp(hx, want))
        return lb_set_error(LB_ERR_FORMAT, "%s: checksum mismatch (stored %s, "
                            "contents give %s): the finished layer file is "
                            "corrupted", path, want, hx);
    return LB_OK;
}

/* A finished layer of a previous run: dequantize its modules (f32 scales:
 * bit-identical to the weights the first run swapped in). */
static lb_status w_layer_cached(void *user, int layer, const qz_module *mods,
                                int n, float **W_deq,
                                lb_quantize_module_report *reps,
                                bool *found) {
    qwriter *w = user;
    *found = false;
    char path[PATH_MAX + 64];
    layer_path(w, layer, path, sizeof path);
    if (!lb_is_file(path)) return LB_OK;
    lb_safetensors *st = NULL;
    lb_status s = lb_st_open(path, &st);
    cJSON *arr = NULL;
    if (s == LB_OK) {
        const char *js = lb_st_metadata(st, "lowbit_report");
        arr = js ? cJSON_Parse(js) : NULL;
        if (!cJSON_IsArray(arr))
            s = lb_set_error(LB_ERR_FORMAT, "%s: no lowbit_report metadata",
                             path);
        if (s == LB_OK) s = verify_layer_file(st, path, js);
    }
    for (int i = 0; i < n && s == LB_OK; i++) {
        const qz_module *q = &mods[i];
        if (!q->quantize) continue;
        char nm[200];
        const lb_tensor *t[4];
        static const char *suf[4] = {"qweight", "qzeros", "scales", "g_idx"};
        for (int k = 0; k < 4 && s == LB_OK; k++) {
            snprintf(nm, sizeof nm, "%s.%s", q->name, suf[k]);
            t[k] = lb_st_find(st, nm);
            if (!t[k])
                s = lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s' missing",
                                 path, nm);
        }
        if (s != LB_OK) break;
        const int64_t ng = t[1]->shape[0];
        bool ok = t[0]->type == LB_TYPE_I32 && t[0]->n_dims == 2 &&
                  t[0]->shape[0] == q->in / 32 * q->bits &&
                  t[0]->shape[1] == q->out && t[1]->type == LB_TYPE_I32 &&
                  t[1]->n_dims == 2 && t[1]->shape[1] == q->out / 32 * q->bits &&
                  t[2]->type == LB_TYPE_F32 && t[2]->n_dims == 2 &&
                  t[2]->shape[0] == ng && t[2]->shape[1] == q->out &&
                  t[3]->type == LB_TYPE_I32 && t[3]->n_dims == 1 &&
                  t[3]->shape[0] == q->in && ng >= 1 && ng <= q->in;
        if (!ok) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: tensors of %s do not match "
                             "the run's settings", path, q->name);
            break;
        }
        lb_gptq_linear l = {.out_features = q->out, .in_features = q->in,
                            .bits = q->bits, .n_groups = ng,
                            .format = LB_GPTQ_FORMAT_V2,
                            .qweight = t[0]->data, .qzeros = t[1]->data,
                            .scales = t[2]->data, .scales_type = LB_TYPE_F32,
                            .g_idx = t[3]->data};
        s = lb_gptq_linear_check(&l, q->name);
        if (s != LB_OK) break;
        W_deq[i] = lb_alloc((size_t)q->out * (size_t)q->in * sizeof(float));
        if (!W_deq[i]) {
            s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", q->name);
            break;
        }
        s = lb_gptq_linear_dequantize(&l, W_deq[i]);
        /* the module's report from the first run */
        const cJSON *e;
        cJSON_ArrayForEach(e, arr) {
            const cJSON *nmj = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (!cJSON_IsString(nmj) || strcmp(nmj->valuestring, q->name))
                continue;
            reps[i].loss = jnum(e, "loss", 0);
            reps[i].avg_loss = jnum(e, "avg_loss", 0);
            reps[i].damp_percent = jnum(e, "damp_percent", 0);
            reps[i].n_damp_retries = (int)jnum(e, "damp_retries", 0);
            reps[i].n_dead = (int64_t)jnum(e, "dead_columns", 0);
            reps[i].nsamples = (int64_t)jnum(e, "nsamples", 0);
            reps[i].seconds = jnum(e, "seconds", 0);
            reps[i].snr_db = jnum(e, "snr_db", INFINITY);
        }
    }
    cJSON_Delete(arr);
    lb_st_close(st);
    if (s != LB_OK) {
        for (int i = 0; i < n; i++) {
            lb_free(W_deq[i]);
            W_deq[i] = NULL;
        }
        return lb_error_context(s, "resuming from %s (run without --resume, "
                                "or remove that directory, to start afresh)",
                                w->tmp);
    }
    *found = true;
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Settings, temp directory, resume                                          */
/* ------------------------------------------------------------------------ */

static uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Identity of the source checkpoint for the resume key: FNV-1a 64 over
 * config.json's bytes and, per *.safetensors / *.json file of model_dir in
 * name order, its name, size and modification time (hashing every weight
 * would cost a pass over the model; a rewritten shard changes its mtime). */
static int name_cmp(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

static void source_fingerprint(const char *model_dir, char *hx, size_t n) {
    uint64_t h = FNV_OFFSET;
    char *cp = lb_path_join(model_dir, "config.json");
    char *txt = NULL;
    size_t len = 0;
    if (cp && lb_read_file(cp, (size_t)16 << 20, &txt, &len) == LB_OK)
        h = fnv1a(txt, len, h);
    lb_clear_error();
    free(txt);
    free(cp);
    struct dirent **list = NULL;
    int k = scandir(model_dir, &list, NULL, name_cmp);
    for (int i = 0; i < k; i++) {
        const char *nm = list[i]->d_name;
        size_t l = strlen(nm);
        bool st_file = l > 12 && !strcmp(nm + l - 12, ".safetensors");
        bool js_file = l > 5 && !strcmp(nm + l - 5, ".json");
        char *f = (st_file || js_file) ? lb_path_join(model_dir, nm) : NULL;
        struct stat sb;
        if (f && stat(f, &sb) == 0 && S_ISREG(sb.st_mode)) {
            int64_t v[3] = {(int64_t)sb.st_size, (int64_t)sb.st_mtim.tv_sec,
                            (int64_t)sb.st_mtim.tv_nsec};
            h = fnv1a(nm, l + 1, h);
            h = fnv1a(v, sizeof v, h);
        }
        free(f);
        free(list[i]);
    }
    free(list);
    snprintf(hx, n, "%016llx", (unsigned long long)h);
}

/* The settings that determine the quantized tensors (resume key). */
static char *settings_json(const lb_quantize_params *p, const char *model_dir,
                           const lb_calib *cal) {
    cJSON *j = cJSON_CreateObject();
    char rp[PATH_MAX];
    cJSON_AddStringToObject(j, "model",
                            realpath(model_dir, rp) ? rp : model_dir);
    char src_hx[32];
    source_fingerprint(model_dir, src_hx, sizeof src_hx);
    cJSON_AddStringToObject(j, "source_fnv1a", src_hx);
    cJSON_AddStringToObject(j, "lowbit", LB_VERSION_STRING);
    cJSON_AddStringToObject(j, "method", qz_method_name(p->method));
    if (p->method == LB_QUANT_AWQ || p->method == LB_QUANT_AWQ_GPTQ) {
        cJSON_AddBoolToObject(j, "awq_no_clip", p->awq_no_clip);
        cJSON_AddNumberToObject(j, "awq_min_tokens", (double)p->awq_min_tokens);
    }
    cJSON_AddNumberToObject(j, "bits", p->bits);
    cJSON_AddNumberToObject(j, "group_size", p->group_size);
    cJSON_AddBoolToObject(j, "sym", p->sym);
    cJSON_AddBoolToObject(j, "desc_act", p->desc_act);
    cJSON_AddBoolToObject(j, "static_groups", p->static_groups);
    cJSON_AddNumberToObject(j, "damp_percent", p->damp_percent);
    cJSON_AddNumberToObject(j, "damp_auto_increment", p->damp_auto_increment);
    cJSON_AddBoolToObject(j, "mse", p->mse);
    cJSON_AddNumberToObject(j, "mse_norm", p->mse_norm);
    cJSON_AddBoolToObject(j, "true_sequential", p->true_sequential);
    cJSON_AddBoolToObject(j, "lm_head", p->lm_head);
    cJSON_AddBoolToObject(j, "hessian_f64", p->hessian_f64);
    cJSON_AddBoolToObject(j, "act_f16", p->act_f16);
    if (p->calib_bf16) /* only when set: older runs' fingerprints stay */
        cJSON_AddBoolToObject(j, "calib_bf16", true);
    cJSON_AddNumberToObject(j, "profile", p->profile);
    if (p->method == LB_QUANT_GPTAQ)
        cJSON_AddNumberToObject(j, "gptaq_alpha", p->gptaq_alpha);
    if (p->qep) cJSON_AddNumberToObject(j, "qep_alpha", p->qep_alpha);
    if (p->moe_coverage != LB_MOE_COVERAGE_ALL) {
        cJSON_AddStringToObject(j, "moe_coverage", "routed");
        cJSON_AddNumberToObject(j, "moe_min_tokens", (double)p->moe_min_tokens);
    }
    if (p->rotate) {
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)p->rotate_seed);
        cJSON_AddNumberToObject(j, "rotate", p->rotate);
        cJSON_AddStringToObject(j, "rotate_seed", seed);
    }
    cJSON *r = cJSON_AddArrayToObject(j, "rules");
    for (int i = 0; i < p->n_rules; i++)
        cJSON_AddItemToArray(r, cJSON_CreateString(p->rules[i]));
    if ((p->method != LB_QUANT_RTN || p->qep) && cal && cal->ids) {
        cJSON_AddNumberToObject(j, "nsamples", (double)cal->nsamples);
        cJSON_AddNumberToObject(j, "seqlen", (double)cal->seqlen);
        uint64_t h = fnv1a(cal->ids,
                           (size_t)(cal->nsamples * cal->seqlen) * 4,
                           14695981039346656037ull);
        char hx[32];
        snprintf(hx, sizeof hx, "%016llx", (unsigned long long)h);
        cJSON_AddStringToObject(j, "calib_fnv1a", hx);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static int count_layer_files(const char *tmp) {
    char *ld = lb_path_join(tmp, LAYERS_DIR);
    DIR *d = ld ? opendir(ld) : NULL;
    int n = 0;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strstr(e->d_name, ".safetensors") &&
                !strstr(e->d_name, ".tmp."))
                n++;
        closedir(d);
    }
    free(ld);
    return n;
}

/* The keys of two settings objects that differ ("source_fnv1a, bits"). */
static void settings_diff(const cJSON *a, const cJSON *b, char *out, size_t n) {
    out[0] = '\0';
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(b, e->string);
        if (f && cJSON_Compare(e, f, true)) continue;
        size_t o = strlen(out);
        snprintf(out + o, n - o, "%s%s", o ? ", " : "", e->string);
    }
    cJSON_ArrayForEach(e, b) {
        if (cJSON_GetObjectItemCaseSensitive(a, e->string)) continue;
        size_t o = strlen(out);
        snprintf(out + o, n - o, "%s%s", o ? ", " : "", e->string);
    }
}

/* Is the process that owns a work directory still running? This process
 * counts as not running: its earlier runs have ended (a cancelled or failed
 * lb_quantize_model); two concurrent runs in one process writing the same
 * output are not supported. */
static bool pid_alive(long pid) { return pid != (long)getpid() && lb_pid_alive(pid); }

/* The work directories OUT.tmp-* of earlier runs writing OUT.
 *  mode SCAN: log each (finished layers; whether its settings match, and
 *    if not which keys differ; "in use" when its process still runs); with
 *    `tmp` non-NULL pick the matching one with the most finished layers
 *    whose process is gone (true: found, its path in tmp).
 *  mode REMOVE: remove those other than `keep` whose process is gone
 *    (a directory without a readable state file only when older than a
 *    minute: it may be a run that has just created it), logging each. */
enum { WD_SCAN, WD_REMOVE };
static bool work_dirs(const char *out_dir, const char *settings, int mode,
                      const char *keep, char *tmp, size_t n) {
    char dir[PATH_MAX], base[PATH_MAX];
    split_path(out_dir, dir, sizeof dir, base, sizeof base);
    char prefix[PATH_MAX + 8];
    snprintf(prefix, sizeof prefix, "%s.tmp-", base);
    DIR *d = opendir(dir);
    if (!d) return false;
    cJSON *want = cJSON_Parse(settings);
    int best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        char cand[PATH_MAX * 2 + 8];
        snprintf(cand, sizeof cand, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(cand, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        if (keep && !strcmp(cand, keep)) continue;
        char *sp = lb_path_join(cand, STATE_FILE);
        char *js = NULL;
        size_t len = 0;
        bool readable = false, match = false;
        long pid = 0;
        char diff[256] = "";
        if (sp && lb_read_file(sp, (size_t)1 << 20, &js, &len) == LB_OK) {
            cJSON *j = cJSON_ParseWithLength(js, len);
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "settings");
            const cJSON *pj = cJSON_GetObjectItemCaseSensitive(j, "pid");
            if (cJSON_IsNumber(pj)) pid = (long)pj->valuedouble;
            readable = cJSON_IsObject(st);
            if (readable && want) {
                match = cJSON_Compare(st, want, true);
                if (!match) settings_diff(want, st, diff, sizeof diff);
            }
            cJSON_Delete(j);
        }
        lb_clear_error();
        free(js);
        free(sp);
        const bool alive = pid_alive(pid);
        const int k = count_layer_files(cand);
        if (mode == WD_REMOVE) {
            if (alive || (!readable && time(NULL) - sb.st_mtime < 60)) continue;
            rm_rf(cand);
            lb_log(LB_LOG_WARN, "removed %s: the work directory of an "
                   "interrupted run (%d finished layer file%s)", cand, k,
                   k == 1 ? "" : "s");
            continue;
        }
        if (alive) {
            lb_log(LB_LOG_WARN, "%s: in use by a running lowbit (process "
                   "%ld): left alone", cand, pid);
            continue;
        }
        if (!readable)
            lb_log(LB_LOG_WARN, "%s: an interrupted run's work directory "
                   "without a readable state file: removed when this run "
                   "completes", cand);
        else if (!match)
            lb_log(LB_LOG_WARN, "%s: an interrupted run (%d finished layer "
                   "file%s) with other settings (%s differ%s): not resumable "
                   "by this run; removed when it completes", cand, k,
                   k == 1 ? "" : "s", diff[0] ? diff : "format",
                   strchr(diff, ',') ? "" : "s");
        else if (!tmp)
            lb_log(LB_LOG_WARN, "%s: an interrupted run with these settings "
                   "(%d finished layer file%s; --resume continues it): "
                   "removed when this run completes", cand, k,
                   k == 1 ? "" : "s");
        if (tmp && match && k > best) {
            best = k;
            snprintf(tmp, n, "%s", cand);
        }
    }
    closedir(d);
    cJSON_Delete(want);
    return best >= 0;
}

/* Record this process as the directory's owner (so that a concurrent run
 * leaves it alone) in its state file. */
static lb_status write_state(const char *tmp, const char *settings) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "what", "lowbit quantize work directory "
                            "(resumable with --resume); removed when the "
                            "run completes");
    cJSON_AddNumberToObject(j, "pid", (double)getpid());
    cJSON_AddItemToObject(j, "settings", cJSON_Parse(settings));
    lb_status s = write_json(tmp, STATE_FILE, j);
    cJSON_Delete(j);
    return s;
}

/* mkdtemp, but the directory gets the mode a plain mkdir would give it
 * (0777 less the umask), not 0700: the checkpoint is renamed from it and
 * should be as readable as any other output. The name mkdtemp picked is
 * released and taken again with mkdir; a race for it is retried. */
static char *mkdtemp_umask(char *tmpl) {
    const size_t n = strlen(tmpl) + 1;
    char *orig = malloc(n);
    if (!orig) return NULL;
    memcpy(orig, tmpl, n);
    char *r = NULL;
    for (int tries = 0; tries < 16 && !r; tries++) {
        memcpy(tmpl, orig, n);
        if (!mkdtemp(tmpl)) break;
        if (rmdir(tmpl) != 0) break;
        if (mkdir(tmpl, 0777) == 0) r = tmpl;
        else if (errno != EEXIST) break;
    }
    free(orig);
    return r;
}

/* A resumed temp directory: remove what a killed assembly may have left
 * (shards of another --max-shard-size, an index, configs, "*.tmp.*" files
 * of interrupted atomic writes), keeping the state file and layers/, so
 * nothing stale ends up in OUT_DIR. */
static lb_status clean_partial_outputs(const char *tmp) {
    DIR *d = opendir(tmp);
    if (!d)
        return lb_set_error(LB_ERR_IO, "%s: %s", tmp, strerror(errno));
    struct dirent *e;
    lb_status s = LB_OK;
    while ((e = readdir(d)) && s == LB_OK) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !strcmp(e->d_name, STATE_FILE) || !strcmp(e->d_name, LAYERS_DIR))
            continue;
        char *c = lb_path_join(tmp, e->d_name);
        if (!c) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
        else rm_rf(c);
        free(c);
    }
    closedir(d);
    return s;
}

static lb_status make_tmp(const char *out_dir, const char *settings,
                          char *tmp, size_t n) {
    char dir[PATH_MAX], base[PATH_MAX];
    split_path(out_dir, dir, sizeof dir, base, sizeof base);
    if (!lb_is_dir(dir))
        return lb_set_error(LB_ERR_NOT_FOUND,
                            "%s: the parent directory %s does not exist",
                            out_dir, dir);
    snprintf(tmp, n, "%s/%s.tmp-XXXXXX", dir, base);
    if (!mkdtemp_umask(tmp))
        return lb_set_error(LB_ERR_IO, "%s: cannot create a temp directory: "
                            "%s", tmp, strerror(errno));
    lb_status s = write_state(tmp, settings);
    if (s != LB_OK) rm_rf(tmp);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Final assembly                                                            */
/* ------------------------------------------------------------------------ */

typedef enum conv_kind {
    CONV_TO_F16,   /* any float -> F16 (scales, biases)           */
    CONV_TO_BF16,  /* any float -> BF16 (embeddings, vLLM profile) */
    CONV_QZ_V1,    /* v2 qzeros -> v1 (zero - 1 per field)         */
    CONV_AWQ_QW,   /* GPTQ qweight -> AutoAWQ GEMM qweight [in, out/8] */
    CONV_AWQ_QZ    /* v2 qzeros -> AutoAWQ GEMM qzeros [G, out/8]      */
} conv_kind;

typedef struct conv {
    conv_kind kind;
    const void *src;
    lb_type src_type;
    int64_t n;             /* elements (qzeros: groups)               */
    int64_t out;           /* qzeros: out_features                    */
    int64_t in;            /* AWQ qweight: in_features                */
    int bits;
    const char *module;
} conv;

static float rd_float(const void *base, lb_type t, int64_t i) {
    const uint8_t *p = base;
    switch (t) {
    case LB_TYPE_F16: return lb_f16_to_f32_inline(lb_rd_u16(p + 2 * i));
    case LB_TYPE_BF16: return lb_bf16_to_f32_inline(lb_rd_u16(p + 2 * i));
    default: return lb_fp32_from_bits(lb_rd_u32(p + 4 * i));
    }
}

static lb_status produce(void *user, const char *name, lb_st_sink *sink,
                         size_t nbytes) {
    (void)nbytes;
    conv *c = user;
    enum { CH = 4096 };
    if (c->kind == CONV_AWQ_QW || c->kind == CONV_AWQ_QZ) {
        /* one output row at a time: row r of qweight is input column r
         * (codes of every output), row g of qzeros is group g */
        const bool qw = c->kind == CONV_AWQ_QW;
        lb_gptq_linear l = {.out_features = c->out, .in_features = c->in,
                            .bits = 4, .format = LB_GPTQ_FORMAT_V2,
                            .qweight = c->src, .qzeros = c->src};
        int32_t *v = lb_alloc((size_t)c->out * 4);
        int32_t *q = lb_alloc((size_t)c->out / 8 * 4);
        lb_status s = (!v || !q) ? lb_set_error(LB_ERR_NOMEM, "out of memory")
                                 : LB_OK;
        for (int64_t r = 0; r < c->n && s == LB_OK; r++) {
            for (int64_t o = 0; o < c->out; o++)
                v[o] = qw ? lb_gptq_linear_code(&l, o, r)
                          : lb_gptq_linear_zero(&l, r, o);
            s = lb_awq_pack(v, 1, c->out, q);
            if (s == LB_OK) s = lb_st_sink_write(sink, q, (size_t)c->out / 2);
        }
        lb_free(v);
        lb_free(q);
        return s;
    }
    if (c->kind == CONV_QZ_V1) {
        const int64_t cols = c->out / 32 * c->bits;
        lb_gptq_linear l = {.out_features = c->out, .bits = c->bits,
                            .format = LB_GPTQ_FORMAT_V2, .qzeros = c->src};
        int32_t *z = lb_alloc((size_t)c->out * 4);
        int32_t *q = lb_alloc((size_t)cols * 4);
        lb_status s = (!z || !q) ? lb_set_error(LB_ERR_NOMEM, "out of memory")
                                 : LB_OK;
        for (int64_t g = 0; g < c->n && s == LB_OK; g++) {
            for (int64_t o = 0; o < c->out; o++)
                z[o] = lb_gptq_linear_zero(&l, g, o);
            s = lb_gptq_pack_qzeros(z, 1, c->out, c->bits, LB_GPTQ_FORMAT_V1,
                                    q);
            if (s != LB_OK)
                s = lb_error_context(s, "%s (a layer quantized by an earlier "
                                     "run in gptq_v2 format)", c->module);
            if (s == LB_OK) s = lb_st_sink_write(sink, q, (size_t)cols * 4);
        }
        lb_free(z);
        lb_free(q);
        return s;
    }
    uint16_t buf[CH];
    for (int64_t i = 0; i < c->n; i += CH) {
        int64_t k = LB_MIN((int64_t)CH, c->n - i);
        for (int64_t j = 0; j < k; j++) {
            float v = rd_float(c->src, c->src_type, i + j);
            buf[j] = c->kind == CONV_TO_F16 ? lb_f32_to_f16(v)
                                            : lb_f32_to_bf16(v);
            if (c->kind == CONV_TO_F16 && isfinite(v) &&
                (buf[j] & 0x7C00) == 0x7C00)
                return lb_set_error(LB_ERR_RANGE, "%s: value %g overflows "
                                    "f16", name, (double)v);
        }
        LB_TRY(lb_st_sink_write(sink, buf, (size_t)k * 2));
    }
    return LB_OK;
}

typedef struct assembly {
    qwriter *w;
    lb_safetensors *src;
    lb_safetensors **lst; /* [n_layers + 1] state files (NULL if none) */
    lb_st_writer *sw;
    conv *convs;
    int n_conv, cap_conv;
    char (*names)[200];
    int n_names, cap_names;
} assembly;

static const char *keep_name(assembly *a, const char *fmt, const char *mod,
                             const char *suffix) {
    if (a->n_names == a->cap_names) return NULL;
    snprintf(a->names[a->n_names], sizeof a->names[0], fmt, mod, suffix);
    return a->names[a->n_names++];
}

static lb_status add_conv(assembly *a, const char *name, lb_type dst_type,
                          int n_dims, const int64_t *shape, conv c) {
    if (a->n_conv == a->cap_conv)
        return lb_set_error(LB_ERR_INTERNAL, "quantize: conversion table "
                            "full");
    a->convs[a->n_conv] = c;
    return lb_st_writer_add_fn(a->sw, name, dst_type, n_dims, shape, produce,
                               &a->convs[a->n_conv++]);
}

static const qz_module *find_quantized(const qwriter *w, const char *prefix) {
    for (int i = 0; i < w->n_mods; i++)
        if (w->mods[i].quantize && !strcmp(w->mods[i].name, prefix))
            return &w->mods[i];
    return NULL;
}

/* The quantized tensors of module q, from its layer's state file. */
static lb_status add_quantized(assembly *a, const qz_module *q) {
    const lb_safetensors *st = a->lst[q->layer];
    char nm[200];
    const lb_tensor *t[4];
    static const char *suf[4] = {"qweight", "qzeros", "scales", "g_idx"};
    for (int k = 0; k < 4; k++) {
        snprintf(nm, sizeof nm, "%s.%s", q->name, suf[k]);
        t[k] = st ? lb_st_find(st, nm) : NULL;
        if (!t[k])
            return lb_set_error(LB_ERR_INTERNAL, "quantize: %s missing from "
                                "the layer state", nm);
    }
    if (a->w->p->format == LB_GPTQ_FORMAT_AWQ) {
        /* AutoAWQ GEMM (lowbit/gptq.h): qweight I32 [in, out/8], qzeros
         * I32 [G, out/8], scales F16 [G, out], no g_idx */
        const char *m0 = keep_name(a, "%s.%s", q->name, "qweight");
        const char *m1 = keep_name(a, "%s.%s", q->name, "qzeros");
        const char *m2 = keep_name(a, "%s.%s", q->name, "scales");
        if (!m0 || !m1 || !m2)
            return lb_set_error(LB_ERR_INTERNAL, "quantize: name table full");
        if (q->bits != 4 || q->out % 8)
            return lb_set_error(LB_ERR_INTERNAL, "quantize: %s is not 4-bit",
                                q->name);
        const int64_t G = t[1]->shape[0];
        int64_t sh[2] = {q->in, q->out / 8};
        LB_TRY(add_conv(a, m0, LB_TYPE_I32, 2, sh,
                        (conv){.kind = CONV_AWQ_QW, .src = t[0]->data,
                               .n = q->in, .out = q->out, .in = q->in,
                               .bits = 4, .module = q->name}));
        sh[0] = G;
        LB_TRY(add_conv(a, m1, LB_TYPE_I32, 2, sh,
                        (conv){.kind = CONV_AWQ_QZ, .src = t[1]->data,
                               .n = G, .out = q->out, .in = q->in, .bits = 4,
                               .module = q->name}));
        return add_conv(a, m2, LB_TYPE_F16, 2, t[2]->shape,
                        (conv){.kind = CONV_TO_F16, .src = t[2]->data,
                               .src_type = LB_TYPE_F32,
                               .n = t[2]->shape[0] * t[2]->shape[1]});
    }
    const char *n0 = keep_name(a, "%s.%s", q->name, "qweight");
    const char *n1 = keep_name(a, "%s.%s", q->name, "qzeros");
    const char *n2 = keep_name(a, "%s.%s", q->name, "scales");
    const char *n3 = keep_name(a, "%s.%s", q->name, "g_idx");
    if (!n0 || !n1 || !n2 || !n3)
        return lb_set_error(LB_ERR_INTERNAL, "quantize: name table full");
    LB_TRY(lb_st_writer_add(a->sw, n0, LB_TYPE_I32, 2, t[0]->shape,
                            t[0]->data));
    if (a->w->p->format == LB_GPTQ_FORMAT_V2)
        LB_TRY(lb_st_writer_add(a->sw, n1, LB_TYPE_I32, 2, t[1]->shape,
                                t[1]->data));
    else
        LB_TRY(add_conv(a, n1, LB_TYPE_I32, 2, t[1]->shape,
                        (conv){.kind = CONV_QZ_V1, .src = t[1]->data,
                               .n = t[1]->shape[0], .out = q->out,
                               .bits = q->bits, .module = q->name}));
    LB_TRY(add_conv(a, n2, LB_TYPE_F16, 2, t[2]->shape,
                    (conv){.kind = CONV_TO_F16, .src = t[2]->data,
                           .src_type = LB_TYPE_F32,
                           .n = t[2]->shape[0] * t[2]->shape[1]}));
    LB_TRY(lb_st_writer_add(a->sw, n3, LB_TYPE_I32, 1, t[3]->shape,
                            t[3]->data));
    return LB_OK;
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static lb_status add_embedding_from(assembly *a, const lb_tensor *t,
                                    bool bf16) {
    const char *nm = "model.embed_tokens.weight";
    if (!bf16 || t->type == LB_TYPE_BF16)
        return lb_st_writer_add(a->sw, nm, t->type, t->n_dims, t->shape,
                                t->data);
    return add_conv(a, nm, LB_TYPE_BF16, t->n_dims, t->shape,
                    (conv){.kind = CONV_TO_BF16, .src = t->data,
                           .src_type = t->type,
                           .n = lb_tensor_nelements(t)});
}

static const struct rot_dense *rot_dense_find(const qwriter *w,
                                              const char *name) {
    for (int i = 0; i < w->n_rot_dense; i++)
        if (!strcmp(w->rot_dense[i].name, name)) return &w->rot_dense[i];
    return NULL;
}

/* Rotated MoE layers (issue 13): keep F32 copies of every router
 * (mlp.gate / block_sparse_moe.gate) and shared_expert_gate of m, which
 * the assembly writes in place of the source's. */
static lb_status rot_dense_keep(qwriter *w, const lb_model *m) {
    const lb_model_config *c = &m->config;
    const bool mix = c->arch == LB_ARCH_MIXTRAL;
    w->rot_dense = calloc((size_t)c->n_layers * 2 + 1, sizeof *w->rot_dense);
    if (!w->rot_dense) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    for (int l = 0; l < c->n_layers; l++) {
        const lb_layer_weights *L = &m->layers[l];
        if (!L->exp) continue;
        const lb_tensor *ts[2] = {&L->ffn_gate_inp, &L->shexp_gate_inp};
        for (int k = 0; k < 2; k++) {
            const lb_tensor *t = ts[k];
            if (!t->data) continue;
            if (t->type != LB_TYPE_F32)
                return lb_set_error(LB_ERR_INTERNAL, "rotate: layer %d %s "
                                    "is not F32", l, k ? "shared_expert_gate"
                                                       : "router");
            struct rot_dense *rd = &w->rot_dense[w->n_rot_dense];
            snprintf(rd->name, sizeof rd->name, "model.layers.%d.%s", l,
                     k ? "mlp.shared_expert_gate.weight"
                       : mix ? "block_sparse_moe.gate.weight"
                             : "mlp.gate.weight");
            rd->n = lb_tensor_nelements(t);
            rd->data = lb_alloc((size_t)rd->n * sizeof(float));
            if (!rd->data) return lb_set_error(LB_ERR_NOMEM, "out of memory");
            memcpy(rd->data, t->data, (size_t)rd->n * sizeof(float));
            w->n_rot_dense++;
        }
    }
    w->rot_moe = w->n_rot_dense > 0;
    return LB_OK;
}

static lb_status assemble_tensors(qwriter *w, const lb_model_config *cfg,
                                  int *n_shards) {
    assembly a;
    memset(&a, 0, sizeof a);
    a.w = w;
    bool *added = NULL;
    lb_status s = lb_st_open(w->model_dir, &a.src);
    if (s != LB_OK) return s;
    const size_t nt = lb_st_count(a.src);
    /* up to 3 conversions per quantized module (AWQ GEMM: qweight,
     * qzeros, scales) and one per other tensor */
    a.cap_conv = (int)nt + w->n_mods * 3 + 8;
    a.cap_names = w->n_mods * 4 + 8;
    a.convs = calloc((size_t)a.cap_conv, sizeof *a.convs);
    a.names = calloc((size_t)a.cap_names, sizeof *a.names);
    a.lst = calloc((size_t)w->n_layers + 1, sizeof *a.lst);
    if (!a.convs || !a.names || !a.lst) {
        s = lb_set_error(LB_ERR_NOMEM, "quantize: out of memory");
        goto done;
    }
    for (int l = 0; l <= w->n_layers && s == LB_OK; l++) {
        char path[PATH_MAX + 64];
        layer_path(w, l, path, sizeof path);
        if (lb_is_file(path)) s = lb_st_open(path, &a.lst[l]);
    }
    if (s == LB_OK) s = lb_st_writer_create(&a.sw);
    if (s == LB_OK) s = lb_st_writer_set_metadata(a.sw, "format", "pt");
    if (s == LB_OK) s = lb_st_writer_set_metadata(a.sw, "quantizer", QUANTIZER);
    if (s != LB_OK) goto done;
    const bool profile = w->p->profile == LB_QUANT_PROFILE_VLLM_W4A8;
    const qz_module *head = find_quantized(w, "lm_head");
    const bool has_embed = lb_st_find(a.src, "model.embed_tokens.weight");
    bool head_done = false;
    added = calloc((size_t)w->n_mods + 1, sizeof *added);
    if (!added) {
        s = lb_set_error(LB_ERR_NOMEM, "quantize: out of memory");
        goto done;
    }
    for (size_t i = 0; i < nt && s == LB_OK; i++) {
        const lb_tensor *t = lb_st_tensor_at(a.src, i);
        lb_tensor ov;
        /* transformers-5 fused experts (mlp.experts.gate_up_proj [E, 2ff,
         * dim], down_proj [E, dim, ff]): replaced by the per-expert
         * modules, which must then all be quantized */
        if (ends_with(t->name, ".experts.gate_up_proj") ||
            ends_with(t->name, ".experts.down_proj")) {
            int fl = -1;
            if (sscanf(t->name, "model.layers.%d.", &fl) == 1) {
                int nq = 0, nx = 0;
                for (int k = 0; k < w->n_mods; k++)
                    if (w->mods[k].layer == fl && w->mods[k].which >= QZ_EXP) {
                        nx++;
                        nq += w->mods[k].quantize;
                    }
                if (nq && nq != nx) {
                    s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: the source "
                                     "stores fused experts and a rule keeps "
                                     "some of layer %d's experts dense: "
                                     "quantize all of them or none", t->name,
                                     fl);
                    break;
                }
                if (nq) continue;
            }
        }
        /* a dense tensor the method changed (AWQ's scaled norms and v
         * bias): its layer state holds the float32 values to write */
        int ly = -1;
        if (sscanf(t->name, "model.layers.%d.", &ly) == 1 && ly >= 0 &&
            ly < w->n_layers && a.lst[ly]) {
            const lb_tensor *o = lb_st_find(a.lst[ly], t->name);
            if (o) {
                /* kept flat [n] in the layer state (AWQ's scaled router
                 * [n_experts, dim], shared_expert_gate [1, dim]): written
                 * in the source's shape */
                if (o->type != LB_TYPE_F32 || o->n_dims != 1 ||
                    lb_tensor_nelements(o) != lb_tensor_nelements(t)) {
                    s = lb_set_error(LB_ERR_FORMAT, "%s: layer state tensor "
                                     "'%s' does not match the source",
                                     w->tmp, t->name);
                    break;
                }
                ov = *o;
                ov.n_dims = t->n_dims;
                memcpy(ov.shape, t->shape, sizeof ov.shape);
                t = &ov;
            }
        }
        char prefix[200];
        snprintf(prefix, sizeof prefix, "%s", t->name);
        const qz_module *q = NULL;
        if (ends_with(t->name, ".weight") || ends_with(t->name, ".bias")) {
            *strrchr(prefix, '.') = '\0';
            q = find_quantized(w, prefix);
        }
        if (q && ends_with(t->name, ".weight")) {
            if (q == head && !has_embed && cfg->tie_word_embeddings)
                s = add_embedding_from(&a, t, profile);
            if (s == LB_OK && !added[q - w->mods]) s = add_quantized(&a, q);
            added[q - w->mods] = true;
            if (q == head) head_done = true;
        } else if (q) {
            /* bias of a quantized module: f16, as AutoGPTQ's QuantLinear */
            s = add_conv(&a, t->name, LB_TYPE_F16, t->n_dims, t->shape,
                         (conv){.kind = CONV_TO_F16, .src = t->data,
                                .src_type = t->type,
                                .n = lb_tensor_nelements(t)});
        } else if (w->rot_embed &&
                   !strcmp(t->name, "model.embed_tokens.weight")) {
            s = lb_st_writer_add(a.sw, t->name, LB_TYPE_F32, 2, w->rot_shape,
                                 w->rot_embed);
        } else if (w->rot_embed && !strcmp(t->name, "lm_head.weight")) {
            s = lb_st_writer_add(a.sw, t->name, LB_TYPE_F32, 2, w->rot_shape,
                                 w->rot_head);
            head_done = true;
        } else if (w->rot_embed && rot_dense_find(w, t->name)) {
            const struct rot_dense *rd = rot_dense_find(w, t->name);
            if (lb_tensor_nelements(t) != rd->n) {
                s = lb_set_error(LB_ERR_INTERNAL, "rotate: %s: %lld values, "
                                 "the rotated copy %lld", t->name,
                                 (long long)lb_tensor_nelements(t),
                                 (long long)rd->n);
                break;
            }
            s = lb_st_writer_add(a.sw, t->name, LB_TYPE_F32, t->n_dims,
                                 t->shape, rd->data);
        } else if (w->rot_embed &&
                   (ends_with(t->name, "input_layernorm.weight") ||
                    ends_with(t->name, "post_attention_layernorm.weight") ||
                    !strcmp(t->name, "model.norm.weight"))) {
            const int64_t n1 = w->rot_order;
            s = lb_st_writer_add(a.sw, t->name, LB_TYPE_F32, 1, &n1,
                                 w->rot_ones);
        } else if (profile && !strcmp(t->name, "model.embed_tokens.weight")) {
            s = add_embedding_from(&a, t, true);
        } else if (head && !strcmp(t->name, "lm_head.weight")) {
            /* (lm_head quantized) handled above; never reached */
        } else {
            s = lb_st_writer_add(a.sw, t->name, t->type, t->n_dims, t->shape,
                                 t->data);
        }
    }
    /* tied checkpoints that store only the embedding: the quantized
     * lm_head was made from it */
    if (s == LB_OK && head && !head_done) {
        s = add_quantized(&a, head);
        added[head - w->mods] = true;
    }
    /* quantized modules without a source tensor of their name (experts of
     * a fused source) */
    for (int k = 0; k < w->n_mods && s == LB_OK; k++)
        if (w->mods[k].quantize && !added[k]) s = add_quantized(&a, &w->mods[k]);
    /* rotated, tied source: the untied lm_head / embeddings it lacks */
    if (s == LB_OK && w->rot_embed && !head_done)
        s = lb_st_writer_add(a.sw, "lm_head.weight", LB_TYPE_F32, 2,
                             w->rot_shape, w->rot_head);
    if (s == LB_OK && w->rot_embed && !has_embed)
        s = lb_st_writer_add(a.sw, "model.embed_tokens.weight", LB_TYPE_F32,
                             2, w->rot_shape, w->rot_embed);
    if (s == LB_OK)
        s = lb_st_writer_write_dir(a.sw, w->tmp, w->p->max_shard_bytes,
                                   n_shards);
done:
    free(added);
    lb_st_writer_free(a.sw);
    if (a.lst)
        for (int l = 0; l <= w->n_layers; l++) lb_st_close(a.lst[l]);
    free(a.lst);
    free(a.convs);
    free(a.names);
    lb_st_close(a.src);
    return s;
}

/* Modules the rules keep dense, as AutoAWQ's modules_to_not_convert (full
 * module names). */
static cJSON *not_converted(const qwriter *w) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < w->n_mods; i++)
        if (!w->mods[i].quantize && w->mods[i].which != QZ_LM_HEAD)
            cJSON_AddItemToArray(a, cJSON_CreateString(w->mods[i].name));
    return a;
}

/* AWQ GEMM quantization_config (transformers' AwqConfig keys, as AutoAWQ's
 * to_transformers_dict) or, for_file, quant_config.json (AutoAWQ's
 * AwqConfig.to_dict: zero_point, q_group_size, w_bit, version "GEMM"). */
static cJSON *awq_config_json(const qwriter *w, const lb_calib *cal,
                              bool for_file) {
    const lb_quantize_params *p = w->p;
    cJSON *q = cJSON_CreateObject();
    if (for_file) {
        cJSON_AddBoolToObject(q, "zero_point", !p->sym);
        cJSON_AddNumberToObject(q, "q_group_size", p->group_size);
        cJSON_AddNumberToObject(q, "w_bit", p->bits);
        cJSON_AddStringToObject(q, "version", "GEMM");
        cJSON_AddItemToObject(q, "modules_to_not_convert", not_converted(w));
        return q;
    }
    cJSON_AddStringToObject(q, "quant_method", "awq");
    cJSON_AddStringToObject(q, "version", "gemm");
    cJSON_AddNumberToObject(q, "bits", p->bits);
    cJSON_AddNumberToObject(q, "group_size", p->group_size);
    cJSON_AddBoolToObject(q, "zero_point", !p->sym);
    cJSON_AddItemToObject(q, "modules_to_not_convert", not_converted(w));
    cJSON *m = cJSON_AddObjectToObject(q, "meta");
    cJSON_AddStringToObject(m, "quantizer", QUANTIZER);
    cJSON_AddStringToObject(m, "method", qz_method_name(p->method));
    cJSON_AddBoolToObject(m, "sym", p->sym);
    if (p->method == LB_QUANT_AWQ)
        cJSON_AddBoolToObject(m, "awq_clip", !p->awq_no_clip);
    else
        cJSON_AddNumberToObject(m, "damp_percent", p->damp_percent);
    if (cal) {
        cJSON *c = cJSON_AddObjectToObject(m, "calibration");
        cJSON_AddNumberToObject(c, "nsamples", (double)cal->nsamples);
        cJSON_AddNumberToObject(c, "seqlen", (double)cal->seqlen);
        cJSON_AddNumberToObject(c, "seed", (double)p->calib_seed);
    }
    return q;
}

/* quantization_config (also the body of quantize_config.json). */
static cJSON *qconfig_json(const lb_quantize_params *p, const lb_calib *cal,
                           bool for_file) {
    cJSON *q = cJSON_CreateObject();
    cJSON_AddNumberToObject(q, "bits", p->bits);
    cJSON_AddNumberToObject(q, "group_size", p->group_size);
    /* AutoGPTQ's BaseQuantizeConfig requires 0 < damp_percent < 1 even
     * for RTN checkpoints (meta.method says what was done) */
    cJSON_AddNumberToObject(q, "damp_percent", p->damp_percent);
    cJSON_AddBoolToObject(q, "desc_act", p->desc_act);
    cJSON_AddBoolToObject(q, "static_groups", p->static_groups);
    cJSON_AddBoolToObject(q, "sym", p->sym);
    cJSON_AddBoolToObject(q, "true_sequential", p->true_sequential);
    cJSON_AddBoolToObject(q, "lm_head", p->lm_head);
    if (for_file) {
        cJSON_AddNullToObject(q, "model_name_or_path");
        cJSON_AddNullToObject(q, "model_file_base_name");
    }
    cJSON_AddStringToObject(q, "quant_method", "gptq");
    cJSON_AddStringToObject(q, "checkpoint_format",
                            p->format == LB_GPTQ_FORMAT_V2 ? "gptq_v2"
                                                           : "gptq");
    if (p->n_rules > 0) {
        cJSON *d = cJSON_AddObjectToObject(q, "dynamic");
        qz_rule *rules = NULL;
        if (qz_rules_parse(p->rules, p->n_rules, &rules) == LB_OK) {
            for (int i = 0; i < p->n_rules; i++) {
                char key[400];
                snprintf(key, sizeof key, "%s:.*(?:%s)",
                         rules[i].skip ? "-" : "+", rules[i].pattern);
                cJSON *o = cJSON_CreateObject();
                if (!rules[i].skip) {
                    if (rules[i].bits)
                        cJSON_AddNumberToObject(o, "bits", rules[i].bits);
                    if (rules[i].group_size)
                        cJSON_AddNumberToObject(o, "group_size",
                                                rules[i].group_size);
                    if (rules[i].sym >= 0)
                        cJSON_AddBoolToObject(o, "sym", rules[i].sym);
                    if (rules[i].desc_act >= 0)
                        cJSON_AddBoolToObject(o, "desc_act",
                                              rules[i].desc_act);
                }
                if (!cJSON_GetObjectItemCaseSensitive(d, key))
                    cJSON_AddItemToObject(d, key, o);
                else
                    cJSON_Delete(o);
            }
            qz_rules_free(rules, p->n_rules);
        }
    }
    cJSON *m = cJSON_AddObjectToObject(q, "meta");
    cJSON_AddStringToObject(m, "quantizer", QUANTIZER);
    cJSON_AddStringToObject(m, "method", qz_method_name(p->method));
    if (p->method == LB_QUANT_AWQ)
        cJSON_AddBoolToObject(m, "awq_clip", !p->awq_no_clip);
    if (p->method == LB_QUANT_GPTAQ)
        cJSON_AddNumberToObject(m, "gptaq_alpha", p->gptaq_alpha);
    if (p->qep) {
        cJSON_AddTrueToObject(m, "qep");
        cJSON_AddNumberToObject(m, "qep_alpha", p->qep_alpha);
    }
    cJSON_AddNumberToObject(m, "damp_percent", p->damp_percent);
    cJSON_AddNumberToObject(m, "damp_auto_increment", p->damp_auto_increment);
    cJSON_AddBoolToObject(m, "static_groups", p->static_groups);
    cJSON_AddBoolToObject(m, "true_sequential", p->true_sequential);
    cJSON_AddNumberToObject(m, "mse", p->mse ? p->mse_norm : 0.0);
    if (p->profile == LB_QUANT_PROFILE_VLLM_W4A8)
        cJSON_AddStringToObject(m, "profile", "vllm-w4a8");
    if ((p->method != LB_QUANT_RTN || p->qep) && cal) {
        cJSON *c = cJSON_AddObjectToObject(m, "calibration");
        cJSON_AddNumberToObject(c, "nsamples", (double)cal->nsamples);
        cJSON_AddNumberToObject(c, "seqlen", (double)cal->seqlen);
        cJSON_AddNumberToObject(c, "seed", (double)p->calib_seed);
    }
    return q;
}

/* quantization_config.meta.rotation of a rotated checkpoint (read back by
 * lb_gptq_qconfig_parse): what was folded and rotated and how to rebuild
 * Q; "online" lists the transforms a reader must apply at run time (none:
 * R1 is folded into the weights). */
/* T of lowbit/hadamard.h, as the checkpoint states it */
static const char k_hadamard_T[] =
    "T = kron(H_m, sylvester(order / m)) / sqrt(order); H_m: paley1 = I + "
    "[[0, 1^T], [-1, Q]] (m = q + 1), paley2 = [[0, 1^T], [1, Q]] with 0 -> "
    "[[1, -1], [-1, -1]], c -> c [[1, 1], [1, -1]] (m = 2(q + 1)); Q[i][j] = "
    "chi(j - i) mod q";

static void add_rotation_meta(cJSON *qc, const qwriter *w) {
    if (!qc || !w->rot_order) return;
    cJSON *m = cJSON_GetObjectItemCaseSensitive(qc, "meta");
    if (!m) m = cJSON_AddObjectToObject(qc, "meta");
    cJSON *r = cJSON_AddObjectToObject(m, "rotation");
    if (!r) return;
    cJSON_AddStringToObject(r, "kind", "hadamard");
    cJSON_AddNumberToObject(r, "order", (double)w->rot_order);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)w->p->rotate_seed);
    cJSON_AddStringToObject(r, "seed", seed);
    if ((w->rot_order & (w->rot_order - 1)) == 0) {
        cJSON_AddStringToObject(r, "matrix", "sylvester_hadamard * diag(signs) "
                                "/ sqrt(order); signs[c] = -1 where bit 63 of "
                                "the c-th splitmix64(seed) draw is set");
    } else { /* hidden sizes such as 896 = 28 * 32 (Qwen2.5-0.5B) */
        lb_hadamard h;
        if (lb_hadamard_init(&h, w->rot_order) != LB_OK) return; /* checked */
        cJSON_AddNumberToObject(r, "m", h.m);
        cJSON_AddStringToObject(r, "construction", h.paley_kind == 1 ? "paley1"
                                                                     : "paley2");
        cJSON_AddNumberToObject(r, "paley_q", h.paley_q);
        cJSON_AddStringToObject(r, "matrix", "Q = T * diag(signs); signs[c] = "
                                "-1 where bit 63 of the c-th splitmix64(seed) "
                                "draw is set");
        cJSON_AddStringToObject(r, "transform", k_hadamard_T);
        lb_hadamard_free(&h);
    }
    cJSON_AddStringToObject(r, "residual", "x -> x Q: embed_tokens rows, "
                            "q/k/v/gate/up/lm_head W Q, o/down Q^T W");
    if (w->rot_moe)
        cJSON_AddStringToObject(r, "moe", "router (mlp.gate / "
                                "block_sparse_moe.gate), experts' and "
                                "shared_expert's gate/up, shared_expert_gate "
                                "W Q (post_attention_layernorm folded); "
                                "experts' and shared_expert's down Q^T W");
    cJSON_AddStringToObject(r, "folded", "input_layernorm, "
                            "post_attention_layernorm, model.norm (now ones)");
    cJSON *on = cJSON_AddArrayToObject(r, "online");
    if (on && w->p->rotate == LB_ROTATE_HADAMARD_R4) {
        lb_hadamard h;
        if (lb_hadamard_init(&h, w->ff) != LB_OK) return; /* checked before */
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "module", "mlp.down_proj");
        cJSON_AddStringToObject(e, "apply", "input");
        cJSON_AddStringToObject(e, "kind", "hadamard");
        cJSON_AddNumberToObject(e, "order", (double)h.n);
        cJSON_AddNumberToObject(e, "m", h.m);
        cJSON_AddStringToObject(e, "construction", h.m == 1 ? "sylvester"
                                : h.paley_kind == 1 ? "paley1" : "paley2");
        cJSON_AddNumberToObject(e, "paley_q", h.paley_q);
        cJSON_AddStringToObject(e, "matrix", k_hadamard_T);
        cJSON_AddStringToObject(e, "weight", "down_proj holds W T^T; run "
                                "down_proj(T h), h its original input");
        cJSON_AddItemToArray(on, e);
        lb_hadamard_free(&h);
    }
}

/* quantization_config.meta of a MoE checkpoint: the expert coverage. */
static void add_moe_meta(cJSON *qc, const qwriter *w) {
    bool moe = false;
    for (int i = 0; i < w->n_mods && !moe; i++) moe = w->mods[i].which >= QZ_EXP;
    if (!qc || !moe) return;
    cJSON *m = cJSON_GetObjectItemCaseSensitive(qc, "meta");
    if (!m) m = cJSON_AddObjectToObject(qc, "meta");
    if (!m) return;
    const bool routed = w->p->moe_coverage == LB_MOE_COVERAGE_ROUTED;
    cJSON_AddStringToObject(m, "moe_coverage", routed ? "routed" : "all");
    if (routed)
        cJSON_AddNumberToObject(m, "moe_min_tokens",
                                (double)(w->p->moe_min_tokens > 0 ? w->p->moe_min_tokens
                                                                  : 32));
}

static lb_status write_configs(qwriter *w, const lb_calib *cal,
                               bool untie) {
    char *src = lb_path_join(w->model_dir, "config.json");
    char *js = NULL;
    size_t n = 0;
    lb_status s = src ? lb_read_file(src, (size_t)16 << 20, &js, &n)
                      : lb_set_error(LB_ERR_NOMEM, "out of memory");
    cJSON *cfg = s == LB_OK ? cJSON_ParseWithLength(js, n) : NULL;
    if (s == LB_OK && !cJSON_IsObject(cfg))
        s = lb_set_error(LB_ERR_FORMAT, "%s: not a JSON object", src);
    if (s == LB_OK) {
        cJSON_DeleteItemFromObjectCaseSensitive(cfg, "quantization_config");
        cJSON *qc = w->p->format == LB_GPTQ_FORMAT_AWQ
                        ? awq_config_json(w, cal, false)
                        : qconfig_json(w->p, cal, false);
        add_rotation_meta(qc, w);
        add_moe_meta(qc, w);
        cJSON_AddItemToObject(cfg, "quantization_config", qc);
        if (untie) {
            cJSON_DeleteItemFromObjectCaseSensitive(cfg,
                                                    "tie_word_embeddings");
            cJSON_AddFalseToObject(cfg, "tie_word_embeddings");
        }
        s = write_json(w->tmp, "config.json", cfg);
    }
    if (s == LB_OK) {
        const bool awq = w->p->format == LB_GPTQ_FORMAT_AWQ;
        cJSON *q = awq ? awq_config_json(w, cal, true)
                       : qconfig_json(w->p, cal, true);
        add_rotation_meta(q, w);
        add_moe_meta(q, w);
        s = write_json(w->tmp, awq ? "quant_config.json"
                                   : "quantize_config.json", q);
        cJSON_Delete(q);
    }
    cJSON_Delete(cfg);
    free(js);
    free(src);
    static const char *files[] = {
        "tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json",
        "generation_config.json", "tokenizer.model",  "vocab.json",
        "merges.txt",       "added_tokens.json",     "chat_template.jinja"};
    for (size_t i = 0; i < LB_ARRAY_LEN(files) && s == LB_OK; i++) {
        char *a = lb_path_join(w->model_dir, files[i]);
        char *b = lb_path_join(w->tmp, files[i]);
        if (a && b && lb_is_file(a)) s = copy_file(a, b);
        free(a);
        free(b);
    }
    return s;
}

static lb_status write_reports(qwriter *w, const lb_quantize_report *rep) {
    lb_status s = LB_OK;
    if (w->p->write_report) {
        char *js = lb_quantize_report_json(rep, w->p);
        char *p = lb_path_join(w->tmp, "quantize_report.json");
        if (!js || !p) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
        if (s == LB_OK) {
            size_t n = strlen(js);
            char *t = realloc(js, n + 2);
            if (t) {
                js = t;
                strcat(js, "\n");
            }
            s = write_text(p, js);
        }
        free(js);
        free(p);
    }
    if (s == LB_OK && w->p->profile == LB_QUANT_PROFILE_VLLM_W4A8) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "profile", "vllm-w4a8");
        cJSON_AddStringToObject(j, "quantizer", QUANTIZER);
        cJSON_AddNumberToObject(j, "bits", 4);
        cJSON_AddNumberToObject(j, "group_size", w->p->group_size);
        cJSON_AddBoolToObject(j, "sym", true);
        cJSON_AddNumberToObject(j, "zero_point", 8);
        cJSON_AddNumberToObject(j, "bits_per_weight", rep->bits_per_weight);
        cJSON_AddNumberToObject(j, "quantized_params",
                                (double)rep->quantized_params);
        cJSON *snr = cJSON_AddObjectToObject(j, "snr_db");
        if (isfinite(rep->snr_min_db)) {
            cJSON_AddNumberToObject(snr, "min", rep->snr_min_db);
            cJSON_AddNumberToObject(snr, "max", rep->snr_max_db);
            cJSON_AddNumberToObject(snr, "mean", rep->snr_mean_db);
        }
        cJSON *arr = cJSON_AddArrayToObject(j, "tensors");
        for (int i = 0; i < rep->n_modules; i++) {
            const lb_quantize_module_report *m = &rep->modules[i];
            if (!m->quantized) continue;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", m->name);
            int shape[2] = {(int)m->out_features, (int)m->in_features};
            cJSON_AddItemToObject(o, "shape", cJSON_CreateIntArray(shape, 2));
            cJSON_AddNumberToObject(o, "bits", m->bits);
            cJSON_AddNumberToObject(o, "group_size", m->group_size);
            if (isfinite(m->snr_db))
                cJSON_AddNumberToObject(o, "snr_db", m->snr_db);
            else
                cJSON_AddNullToObject(o, "snr_db");
            cJSON_AddItemToArray(arr, o);
        }
        s = write_json(w->tmp, "quantization_report.json", j);
        cJSON_Delete(j);
    }
    return s;
}

/* Replace out_dir by tmp (an existing non-empty out_dir only with force;
 * it is removed after the new one is in place). */
static lb_status install(const char *tmp, const char *out, bool force) {
    struct stat st;
    char dir[PATH_MAX], base[PATH_MAX];
    split_path(out, dir, sizeof dir, base, sizeof base);
    fsync_dir(tmp);
    if (lstat(out, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return lb_set_error(LB_ERR_IO, "%s exists and is not a directory",
                                out);
        if (dir_empty(out)) {
            if (rmdir(out) != 0)
                return lb_set_error(LB_ERR_IO, "%s: %s", out, strerror(errno));
        } else {
            if (!force)
                return lb_set_error(LB_ERR_INVALID_ARG,
                                    "%s exists and is not empty (use --force "
                                    "to replace it)",
                                    out);
            char old[PATH_MAX * 2 + 16];
            snprintf(old, sizeof old, "%s/%s.old-XXXXXX", dir, base);
            if (!mkdtemp(old) || rmdir(old) != 0 || rename(out, old) != 0)
                return lb_set_error(LB_ERR_IO, "%s: cannot move aside: %s",
                                    out, strerror(errno));
            if (rename(tmp, out) != 0) {
                int e = errno;
                (void)rename(old, out);
                return lb_set_error(LB_ERR_IO, "rename %s -> %s: %s", tmp, out,
                                    strerror(e));
            }
            rm_rf(old);
            fsync_dir(dir);
            return LB_OK;
        }
    }
    if (rename(tmp, out) != 0)
        return lb_set_error(LB_ERR_IO, "rename %s -> %s: %s", tmp, out,
                            strerror(errno));
    fsync_dir(dir);
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* lb_quantize_model                                                         */
/* ------------------------------------------------------------------------ */

/* Every F32/F16/BF16 parameter (*.weight, *.bias) of the source checkpoint
 * must be finite: NaN/Inf cannot be quantized, and a dense tensor holding
 * them would be copied into the checkpoint as it is. Checked before any
 * work, on the mmap'ed files (integer tests of the exponent bits). */
static lb_status check_finite_weights(const char *model_dir) {
    lb_safetensors *st = NULL;
    LB_TRY(lb_st_open(model_dir, &st));
    lb_status s = LB_OK;
    for (size_t i = 0; i < lb_st_count(st) && s == LB_OK; i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        if (!ends_with(t->name, ".weight") && !ends_with(t->name, ".bias"))
            continue;
        if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 &&
            t->type != LB_TYPE_BF16)
            continue;
        const uint8_t *d = t->data;
        const int64_t n = lb_tensor_nelements(t);
        int64_t bad = -1;
        if (t->type == LB_TYPE_F32) {
            for (int64_t k = 0; k < n && bad < 0; k++)
                if ((lb_rd_u32(d + 4 * k) & 0x7F800000u) == 0x7F800000u)
                    bad = k;
        } else {
            const uint16_t m = t->type == LB_TYPE_F16 ? 0x7C00 : 0x7F80;
            for (int64_t k = 0; k < n && bad < 0; k++)
                if ((lb_rd_u16(d + 2 * k) & m) == m) bad = k;
        }
        if (bad < 0) {
            lb_st_release(st, t); /* the scan leaves no pages resident */
            continue;
        }
        /* the element's coordinates, outermost first */
        char where[160] = "";
        int64_t rem = bad;
        int64_t idx[8] = {0};
        for (int k = t->n_dims - 1; k >= 0 && k < 8; k--) {
            idx[k] = t->shape[k] > 0 ? rem % t->shape[k] : 0;
            rem = t->shape[k] > 0 ? rem / t->shape[k] : 0;
        }
        for (int k = 0; k < t->n_dims && k < 8; k++) {
            size_t o = strlen(where);
            snprintf(where + o, sizeof where - o, "%s%lld", k ? ", " : "",
                     (long long)idx[k]);
        }
        const float v = rd_float(t->data, t->type, bad);
        const char *file = lb_st_tensor_file(st, t);
        s = lb_set_error(LB_ERR_FORMAT,
                         "%s: tensor %s[%s] = %s is not finite: a checkpoint "
                         "with NaN/Inf weights cannot be quantized",
                         file ? file : model_dir, t->name, where,
                         isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    }
    lb_st_close(st);
    return s;
}

lb_status lb_quantize_model(const char *model_dir, const char *out_dir,
                            const lb_quantize_params *p_in,
                            const lb_calib *calib, lb_quantize_report *rep) {
    lb_quantize_report local;
    if (!rep) rep = &local;
    memset(rep, 0, sizeof *rep);
    if (!model_dir || !out_dir || !*out_dir)
        return lb_set_error(LB_ERR_INVALID_ARG, "quantize: NULL path");
    lb_quantize_params p;
    LB_TRY(qz_effective_params(p_in, &p));
    /* the output replaces OUT_DIR (with --force, removing it): it must be
     * neither the source checkpoint, nor inside it, nor contain it */
    const lb_path_relation rel = lb_path_relate(out_dir, model_dir);
    if (rel != LB_PATH_UNRELATED)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s: the output %s the input checkpoint %s; "
                            "choose an output directory outside it",
                            out_dir,
                            rel == LB_PATH_SAME       ? "is"
                            : rel == LB_PATH_A_INSIDE ? "would be inside"
                                                      : "would contain",
                            model_dir);
    if (p.rotate != LB_ROTATE_NONE &&
        (p.format == LB_GPTQ_FORMAT_AWQ || p.lm_head ||
         p.profile != LB_QUANT_PROFILE_NONE))
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "quantize: rotate: rotated checkpoints are "
                            "written in the GPTQ layout with a dense lm_head "
                            "(not with the AWQ layout, --lm-head or a "
                            "profile)");
    /* refuse early: do not spend hours to fail at the rename */
    struct stat st;
    if (lstat(out_dir, &st) == 0 &&
        (!S_ISDIR(st.st_mode) || (!dir_empty(out_dir) && !p.force)))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s exists and is %s (%s)", out_dir,
                            S_ISDIR(st.st_mode) ? "not empty"
                                                : "not a directory",
                            p.fp8 ? "the FP8 writer needs a new or empty "
                                    "directory"
                                  : "use --force to replace it");
    if (p.fp8) {
        lb_status s8 = qz_fp8_gptq_checkpoint(model_dir, out_dir, &p, calib, rep);
        if (s8 != LB_OK || rep == &local) lb_quantize_report_free(rep);
        return s8;
    }
    qz_rule *rules = NULL;
    LB_TRY(qz_rules_parse(p.rules, p.n_rules, &rules));
    lb_model *m = NULL;
    qz_module *mods = NULL;
    int n_mods = 0;
    char *settings = NULL;
    qwriter w;
    memset(&w, 0, sizeof w);
    bool have_tmp = false;
    lb_status s = lb_model_load_hf(model_dir, NULL, &m);
    if (s == LB_OK && m->config.has_quantization_config)
        s = lb_set_error(LB_ERR_INVALID_ARG, "%s is already quantized",
                         model_dir);
    if (s == LB_OK) s = qz_check_arch(m, &p);
    if (s == LB_OK) s = check_finite_weights(model_dir);
    const bool src_tied = s == LB_OK && m->config.tie_word_embeddings;
    if (s == LB_OK && p.rotate != LB_ROTATE_NONE) {
        s = lb_model_rotate_hadamard(m, p.rotate_seed);
        if (s == LB_OK && p.rotate == LB_ROTATE_HADAMARD_R4)
            s = lb_model_rotate_online_down(m);
        /* keep what the assembly writes in place of the source's */
        const int64_t V = m->tok_embd.shape[0], n = m->config.hidden_size;
        const size_t nb = (size_t)(V * n) * sizeof(float);
        if (s == LB_OK) {
            w.rot_embed = lb_alloc(nb);
            w.rot_head = lb_alloc(nb);
            w.rot_ones = lb_alloc((size_t)n * sizeof(float));
            if (!w.rot_embed || !w.rot_head || !w.rot_ones ||
                m->output.shape[0] != V)
                s = lb_set_error(LB_ERR_NOMEM, "rotate: out of memory");
        }
        if (s == LB_OK) {
            memcpy(w.rot_embed, m->tok_embd.data, nb);
            memcpy(w.rot_head, m->output.data, nb);
            for (int64_t i = 0; i < n; i++) w.rot_ones[i] = 1.0f;
            w.rot_shape[0] = V;
            w.rot_shape[1] = n;
            w.rot_order = n;
            w.ff = m->config.intermediate_size;
        }
        if (s == LB_OK && m->config.n_experts > 0) s = rot_dense_keep(&w, m);
    }
    if (s == LB_OK) s = qz_plan(m, &p, rules, p.n_rules, &mods, &n_mods);
    /* a rotated checkpoint takes the linears from the quantized results:
     * one kept dense would be copied unrotated from the source */
    for (int i = 0; i < n_mods && s == LB_OK && p.rotate != LB_ROTATE_NONE;
         i++)
        if (!mods[i].quantize && mods[i].which != QZ_LM_HEAD)
            s = lb_set_error(LB_ERR_UNSUPPORTED,
                             "quantize: rotate: %s stays dense (%s), and a "
                             "rotated checkpoint writes only the quantized "
                             "linears rotated; quantize every linear",
                             mods[i].name,
                             mods[i].note[0] ? mods[i].note : "a rule");
    if (s == LB_OK && p.profile == LB_QUANT_PROFILE_VLLM_W4A8) {
        for (int i = 0; i < n_mods && s == LB_OK; i++) {
            if (mods[i].quantize && (mods[i].bits != 4 || !mods[i].sym))
                s = lb_set_error(LB_ERR_INVALID_ARG,
                                 "%s: the vllm-w4a8 profile is symmetric "
                                 "4-bit only (a module rule asks for %d-bit "
                                 "%s)",
                                 mods[i].name, mods[i].bits,
                                 mods[i].sym ? "sym" : "asym");
        }
        for (int i = 0; i < n_mods && s == LB_OK; i++) {
            if (mods[i].quantize && mods[i].group_size > 0 &&
                mods[i].in % mods[i].group_size)
                s = lb_set_error(LB_ERR_INVALID_ARG,
                                 "%s: in_features %lld is not a multiple of "
                                 "group_size %d, which vLLM cannot load (the "
                                 "vllm-w4a8 profile's target); choose a group "
                                 "size that divides it, or a module rule "
                                 "such as '%s=g-1' or '=skip'",
                                 mods[i].name, (long long)mods[i].in,
                                 mods[i].group_size, mods[i].name);
        }
    }
    if (s == LB_OK && p.format == LB_GPTQ_FORMAT_AWQ) {
        /* the AWQ GEMM config has one bits/group_size/zero_point for all
         * modules, and groups must divide in_features */
        for (int i = 0; i < n_mods && s == LB_OK; i++) {
            const qz_module *q = &mods[i];
            if (!q->quantize) continue;
            if (q->bits != p.bits || q->group_size != p.group_size ||
                q->sym != p.sym)
                s = lb_set_error(LB_ERR_INVALID_ARG,
                                 "%s: the AWQ checkpoint layout has one "
                                 "bits/group_size/zero_point for every module "
                                 "(module rules may only skip); use "
                                 "--checkpoint-format gptq_v2 for mixed "
                                 "settings", q->name);
            else if (q->group_size > 0 && q->in % q->group_size)
                s = lb_set_error(LB_ERR_INVALID_ARG,
                                 "%s: in_features %lld is not a multiple of "
                                 "group_size %d, which the AWQ GEMM layout "
                                 "cannot hold", q->name, (long long)q->in,
                                 q->group_size);
            else if (q->which == QZ_LM_HEAD)
                s = lb_set_error(LB_ERR_INVALID_ARG, "lm_head: AWQ "
                                 "checkpoints keep lm_head dense");
        }
    }
    if (s == LB_OK) {
        settings = settings_json(&p, model_dir, calib);
        if (!settings) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    if (s == LB_OK) {
        if (work_dirs(out_dir, settings, WD_SCAN, NULL,
                      p.resume ? w.tmp : NULL, sizeof w.tmp)) {
            lb_log(LB_LOG_INFO, "resuming from %s (%d finished layer files)",
                   w.tmp, count_layer_files(w.tmp));
            s = clean_partial_outputs(w.tmp);
            if (s == LB_OK) s = write_state(w.tmp, settings);
        } else {
            if (p.resume)
                lb_log(LB_LOG_INFO, "no interrupted run with these settings "
                       "beside %s: starting afresh", out_dir);
            s = make_tmp(out_dir, settings, w.tmp, sizeof w.tmp);
        }
        have_tmp = s == LB_OK;
    }
    if (s == LB_OK) {
        snprintf(w.layers, sizeof w.layers, "%s/%s", w.tmp, LAYERS_DIR);
        if (mkdir(w.layers, 0755) != 0 && errno != EEXIST)
            s = lb_set_error(LB_ERR_IO, "%s: %s", w.layers, strerror(errno));
    }
    if (s == LB_OK) {
        w.p = &p;
        w.model_dir = model_dir;
        w.mods = mods;
        w.n_mods = n_mods;
        w.n_layers = m->config.n_layers;
        w.rep = rep;
        w.pend = calloc((size_t)n_mods + 1, sizeof *w.pend);
        if (!w.pend) s = lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    if (s == LB_OK) {
        qz_sink sink = {.user = &w,
                        .module_done = w_module_done,
                        .layer_cached = w_layer_cached,
                        .layer_done = w_layer_done,
                        .tensor_done = w_tensor_done,
                        .cached_tensor = w_cached_tensor,
                        .keep_in_model = false};
        s = qz_run(m, &p, calib, mods, n_mods, &sink, rep);
        for (int i = 0; i < w.n_pend; i++) pend_free(&w.pend[i]);
        dense_free(&w);
    }
    free(w.pend);
    w.pend = NULL;
    const double t_quant = rep->seconds;
    double t0 = lb_time_s();
    bool untie = false;
    lb_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    if (s == LB_OK) {
        untie = (find_quantized(&w, "lm_head") || w.rot_embed) && src_tied;
        s = lb_model_config_copy(&cfg, &m->config);
    }
    /* the source mapping is reopened by the assembly; free the model's */
    lb_model_free(m);
    m = NULL;
    if (s == LB_OK) s = assemble_tensors(&w, &cfg, &rep->n_shards);
    lb_model_config_clear(&cfg);
    if (s == LB_OK) {
        /* tensor bytes written */
        lb_safetensors *o = NULL;
        if (lb_st_open(w.tmp, &o) == LB_OK) {
            for (size_t i = 0; i < lb_st_count(o); i++)
                rep->tensor_bytes += lb_st_tensor_at(o, i)->nbytes;
            lb_st_close(o);
        }
        s = write_configs(&w, calib, untie);
    }
    if (s == LB_OK) {
        rep->seconds = t_quant + (lb_time_s() - t0);
        s = write_reports(&w, rep);
    }
    if (s == LB_OK) {
        /* drop the resumable state, then move into place */
        char *sp = lb_path_join(w.tmp, STATE_FILE);
        if (sp) unlink(sp);
        free(sp);
        rm_rf(w.layers);
        s = install(w.tmp, out_dir, p.force);
        if (s == LB_OK) have_tmp = false;
        /* work directories of interrupted runs for this output */
        if (s == LB_OK) (void)work_dirs(out_dir, settings, WD_REMOVE, NULL, NULL, 0);
    }
    if (s != LB_OK && have_tmp) {
        if (count_layer_files(w.tmp) > 0)
            s = lb_error_context(s, "finished layers are kept in %s (rerun "
                                 "with --resume to continue)", w.tmp);
        else
            rm_rf(w.tmp);
    }
    lb_model_free(m);
    lb_free(w.rot_embed);
    lb_free(w.rot_head);
    lb_free(w.rot_ones);
    for (int i = 0; i < w.n_rot_dense; i++) lb_free(w.rot_dense[i].data);
    free(w.rot_dense);
    free(settings);
    free(mods);
    qz_rules_free(rules, p.n_rules);
    if (s != LB_OK || rep == &local) lb_quantize_report_free(rep);
    return s;
}
