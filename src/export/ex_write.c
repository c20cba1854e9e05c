/*
 * GGUF output of an export plan: the metadata keys in convert_hf_to_gguf.py's
 * order (TextModel.set_gguf_parameters, LlamaModel.set_gguf_parameters,
 * ModelBase.prepare_metadata), then every tensor streamed in plan order.
 */
#include "export/ex_ctx.h"
#include "lowbit/file.h"
#include "lowbit/quants.h"
#include "core/internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* gguf-py utility.model_weight_count_rounded_notation(min_digits=2) */
static void size_label(uint64_t n, char *out, size_t sz) {
    double v;
    const char *suf;
    if ((double)n > 1e12) v = (double)n * 1e-12, suf = "T";
    else if ((double)n > 1e9) v = (double)n * 1e-9, suf = "B";
    else if ((double)n > 1e6) v = (double)n * 1e-6, suf = "M";
    else v = (double)n * 1e-3, suf = "K";
    /* fix = max(2 - len(str(round(v)).lstrip('0')), 0); round = half-even */
    double r = nearbyint(v);
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", r);
    const char *d = digits;
    while (*d == '0') d++;
    int fix = 2 - (int)strlen(d);
    if (fix < 0) fix = 0;
    snprintf(out, sz, "%.*f%s", fix, v, suf);
}

static lb_status set_arch_u32(lb_gguf_writer *w, const char *arch, const char *k,
                              uint32_t v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    return lb_gguf_writer_set_u32(w, key, v);
}

static lb_status set_arch_f32(lb_gguf_writer *w, const char *arch, const char *k,
                              float v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, k);
    return lb_gguf_writer_set_f32(w, key, v);
}

static lb_status write_kv(ex_ctx *c, lb_gguf_writer *w, bool vocab_only) {
    const lb_model_config *cfg = &c->cfg;
    const char *a = c->arch;
    LB_TRY(lb_gguf_writer_set_architecture(w, a));
    LB_TRY(lb_gguf_writer_set_str(w, "general.type", "model"));
    LB_TRY(lb_gguf_writer_set_name(w, c->name));
    if (!vocab_only) {
        char lab[32];
        size_label(c->plan->n_params, lab, sizeof lab);
        LB_TRY(lb_gguf_writer_set_str(w, "general.size_label", lab));
    }
    LB_TRY(set_arch_u32(w, a, "block_count", (uint32_t)cfg->n_layers));
    LB_TRY(set_arch_u32(w, a, "context_length", (uint32_t)cfg->max_position_embeddings));
    LB_TRY(set_arch_u32(w, a, "embedding_length", (uint32_t)cfg->hidden_size));
    LB_TRY(set_arch_u32(w, a, "feed_forward_length", (uint32_t)cfg->intermediate_size));
    LB_TRY(set_arch_u32(w, a, "attention.head_count", (uint32_t)cfg->n_heads));
    LB_TRY(set_arch_u32(w, a, "attention.head_count_kv", (uint32_t)cfg->n_kv_heads));
    if (cfg->rope_scaling == LB_ROPE_SCALING_LINEAR) {
        char key[96];
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        LB_TRY(lb_gguf_writer_set_str(w, key, "linear"));
        LB_TRY(set_arch_f32(w, a, "rope.scaling.factor", (float)cfg->rope_factor));
    }
    LB_TRY(set_arch_f32(w, a, "rope.freq_base", (float)cfg->rope_theta));
    LB_TRY(set_arch_f32(w, a, "attention.layer_norm_rms_epsilon", cfg->rms_norm_eps));
    /* transformers 5's Llama/Mistral/Qwen3 configs always carry head_dim,
     * Qwen2's never: the converter writes key/value_length from it */
    /* (the issue-13 converters: Gemma and Qwen3-MoE write them, Phi-3,
     * Qwen2-MoE and Mixtral do not) */
    const bool ext = ex_arch_is_ext(c);
    if (ext ? cfg->arch == LB_ARCH_GEMMA2 || cfg->arch == LB_ARCH_GEMMA3 ||
                  cfg->arch == LB_ARCH_QWEN3_MOE
            : strcmp(a, "qwen2") != 0) {
        LB_TRY(set_arch_u32(w, a, "attention.key_length", (uint32_t)cfg->head_dim));
        LB_TRY(set_arch_u32(w, a, "attention.value_length", (uint32_t)cfg->head_dim));
    }
    if (ex_arch_is_ext(c)) LB_TRY(ex_arch_write_kv(c, w));
    LB_TRY(lb_gguf_writer_set_file_type(w, (uint32_t)c->plan->file_type));
    if (!strcmp(a, "llama")) {
        LB_TRY(set_arch_u32(w, a, "vocab_size", (uint32_t)cfg->vocab_size));
        LB_TRY(set_arch_u32(w, a, "rope.dimension_count", (uint32_t)cfg->head_dim));
    } else if (!strcmp(c->vocab.model, "none")) {
        /* not written by the converter for qwen2/qwen3; without a token
         * list llama.cpp takes n_vocab from it (else 0: unloadable) */
        LB_TRY(set_arch_u32(w, a, "vocab_size", (uint32_t)cfg->vocab_size));
    }
    LB_TRY(lb_gguf_writer_set_quantization_version(w, LB_GGUF_QNT_VERSION));
    LB_TRY(ex_vocab_write(&c->vocab, w));
    for (int i = 0; i < c->n_meta_kv; i++)
        LB_TRY(lb_gguf_writer_set_str(w, c->meta_kv[2 * i], c->meta_kv[2 * i + 1]));
    return LB_OK;
}

lb_status ex_build_writer(ex_ctx *c, bool vocab_only, lb_gguf_writer **out) {
    *out = NULL;
    lb_gguf_writer *w;
    LB_TRY(lb_gguf_writer_create(&w));
    lb_status s = write_kv(c, w, vocab_only);
    for (size_t i = 0; s == LB_OK && !vocab_only && i < c->n; i++) {
        const lb_export_tensor *e = &c->t[i].info;
        s = lb_gguf_writer_add_tensor(w, e->name, e->type, e->n_dims, e->shape);
    }
    if (s == LB_OK) s = lb_gguf_writer_file_size(w, &c->plan->file_bytes);
    if (s != LB_OK) {
        lb_gguf_writer_free(w);
        return lb_error_context(s, "export %s", c->dir);
    }
    *out = w;
    return LB_OK;
}

lb_status ex_plan_layout(ex_ctx *c, bool vocab_only) {
    lb_gguf_writer *w;
    LB_TRY(ex_build_writer(c, vocab_only, &w));
    lb_gguf_writer_free(w);
    return LB_OK;
}

/* ---- tensor data ---------------------------------------------------------- */

typedef struct ex_run {
    ex_ctx *c;
    lb_gguf_writer *w;
    lb_pool *pool;
    lb_progress progress;
    uint64_t done, total;
    lb_export_stats *st;
    size_t held; /* bytes of work buffers held now */
} ex_run;

static void *run_alloc(ex_run *r, size_t n) {
    void *p = lb_alloc(n);
    if (p) {
        r->held += n;
        if (r->held > r->st->peak_buffer_bytes) r->st->peak_buffer_bytes = r->held;
    }
    return p;
}

static void run_free(ex_run *r, void *p, size_t n) {
    if (!p) return;
    lb_free(p);
    r->held -= n;
}

/* Give the pages of a finished source tensor back to the kernel (the
 * mapping is private and never written, so they are re-read on demand). */
static void drop_pages(const void *p, size_t n) {
    if (!p || !n) return;
    const uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + ps - 1) & ~(ps - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~(ps - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

static lb_status emit(ex_run *r, const void *data, size_t n) {
    LB_TRY(lb_gguf_writer_write_data(r->w, data, n));
    r->done += n;
    r->st->bytes_out += n;
    if (!lb_progress_report(&r->progress, "export", r->done, r->total))
        return lb_set_error(LB_ERR_CANCELLED, "export cancelled");
    return LB_OK;
}

static int64_t rows_of(const lb_export_tensor *e) {
    int64_t rows = 1;
    for (int d = 0; d + 1 < e->n_dims; d++) rows *= e->shape[d];
    return rows;
}

/* Rows [r0, r0+nr) of a dense source, in GGUF order, as f32. */
static lb_status dense_rows_f32(const ex_tensor *t, const int64_t *perm, int64_t r0,
                                int64_t nr, int64_t cols, float *dst, void *scratch) {
    const lb_tensor *src = t->dense;
    if (t->fp8_scale) return ex_fp8_rows(t, perm, r0, nr, dst);
    const size_t es = src->type == LB_TYPE_F32 ? 4 : 2, rb = (size_t)cols * es;
    for (int64_t i = 0; i < nr; i++) {
        int64_t sr = perm ? perm[r0 + i] : r0 + i;
        /* copy first: safetensors data is only as aligned as the file */
        memcpy(scratch, (const uint8_t *)src->data + (size_t)sr * rb, rb);
        LB_TRY(lb_dequantize_row(src->type, scratch, dst + i * cols, cols));
        if (t->add_one) /* Gemma norms: 1 + w, in f32 as torch adds */
            for (int64_t j = 0; j < cols; j++) dst[i * cols + j] += 1.0f;
    }
    return LB_OK;
}

/* convert_hf_to_gguf LlamaModel.generate_extra_tensors (llama3 rope
 * factors), evaluated in float32 as torch does. */
static void rope_freqs(const lb_model_config *cfg, float *out, int64_t n) {
    const float base = (float)cfg->rope_theta;
    const int64_t dim = cfg->head_dim;
    const float factor = (float)cfg->rope_factor, lo = (float)cfg->rope_low_freq_factor,
                hi = (float)cfg->rope_high_freq_factor;
    const float old = (float)cfg->rope_original_max_position_embeddings;
    const double lo_wave = (double)cfg->rope_original_max_position_embeddings /
                           cfg->rope_low_freq_factor;
    const double hi_wave = (double)cfg->rope_original_max_position_embeddings /
                           cfg->rope_high_freq_factor;
    for (int64_t i = 0; i < n; i++) {
        float e = (float)(2 * i) / (float)dim;
        float freq = 1.0f / powf(base, e);
        float wavelen = (float)(2 * M_PI) / freq;
        if (wavelen < (float)hi_wave)
            out[i] = 1.0f;
        else if (wavelen > (float)lo_wave)
            out[i] = factor;
        else {
            float smooth = (old / wavelen - lo) / (hi - lo);
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

#define EX_CHUNK_BYTES ((size_t)8 << 20)

static lb_status write_dense(ex_run *r, const ex_tensor *t) {
    const lb_export_tensor *e = &t->info;
    const lb_tensor *src = t->dense;
    /* a permuted 1-D tensor (q/k bias) permutes its elements: rows of 1 */
    const bool vec = e->n_dims == 1 && e->permuted;
    const int64_t rows = vec ? e->shape[0] : rows_of(e),
                  cols = vec ? 1 : e->shape[e->n_dims - 1];
    r->st->bytes_in += src->nbytes;
    if ((int)e->type == e->src_type && !e->permuted && !t->add_one) {
        /* as stored: straight from the mapping */
        const uint8_t *p = src->data;
        for (size_t o = 0; o < src->nbytes;) {
            size_t n = LB_MIN(EX_CHUNK_BYTES, src->nbytes - o);
            LB_TRY(emit(r, p + o, n));
            drop_pages(p + o, n); /* RSS stays near one chunk */
            o += n;
        }
        return LB_OK;
    }
    size_t out_rb;
    if (!lb_row_size(e->type, cols, &out_rb))
        return lb_set_error(LB_ERR_INTERNAL, "export: %s: bad row size", e->name);
    int64_t chunk = (int64_t)(EX_CHUNK_BYTES / ((size_t)cols * 4));
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    const size_t f32b = (size_t)chunk * (size_t)cols * 4, outb = (size_t)chunk * out_rb,
                 scrb = (size_t)cols * 4, permb = e->permuted ? (size_t)rows * 8 : 0;
    float *f = run_alloc(r, f32b);
    void *q = run_alloc(r, outb);
    void *scratch = run_alloc(r, scrb);
    int64_t *perm = permb ? run_alloc(r, permb) : NULL;
    lb_status s = LB_OK;
    if (!f || !q || !scratch || (permb && !perm))
        s = lb_set_error(LB_ERR_NOMEM, "export: out of memory (%s)", e->name);
    if (s == LB_OK && perm) s = lb_export_qk_permutation(rows, t->perm_heads, perm);
    for (int64_t r0 = 0; s == LB_OK && r0 < rows; r0 += chunk) {
        int64_t nr = LB_MIN(chunk, rows - r0);
        s = dense_rows_f32(t, perm, r0, nr, cols, f, scratch);
        if (s == LB_OK) s = lb_quantize_rows(r->pool, e->type, f, q, nr, cols);
        if (s == LB_OK) s = emit(r, q, (size_t)nr * out_rb);
        if (!perm) { /* rows read in order: release them as we go */
            const size_t in_rb = (size_t)cols * (size_t)lb_type_get_traits((int)src->type)->type_size;
            drop_pages((const uint8_t *)src->data + (size_t)r0 * in_rb, (size_t)nr * in_rb);
        }
    }
    run_free(r, f, f32b);
    run_free(r, q, outb);
    run_free(r, scratch, scrb);
    run_free(r, perm, permb);
    drop_pages(src->data, src->nbytes);
    return s;
}

static lb_status write_gptq(ex_run *r, const ex_tensor *t) {
    const lb_export_tensor *e = &t->info;
    const int64_t rows = rows_of(e), cols = e->shape[e->n_dims - 1];
    const lb_tensor *parts[4] = {t->qweight, t->qzeros, t->scales, t->g_idx};
    for (int i = 0; i < 4; i++)
        if (parts[i]) r->st->bytes_in += parts[i]->nbytes;
    lb_status s = LB_OK;
    if (e->route == LB_EXPORT_ROUTE_DIRECT) {
        void *q = run_alloc(r, e->nbytes);
        if (!q) return lb_set_error(LB_ERR_NOMEM, "export: out of memory (%s)", e->name);
        s = ex_gptq_direct(r->c, t, q);
        if (s == LB_OK) s = emit(r, q, e->nbytes);
        run_free(r, q, e->nbytes);
    } else {
        size_t wb;
        if (!lb_mul_ok((size_t)rows, (size_t)cols * 4, &wb))
            return lb_set_error(LB_ERR_OVERFLOW, "export: %s too large", e->name);
        float *W = run_alloc(r, wb);
        void *q = W ? run_alloc(r, e->nbytes) : NULL;
        if (!W || !q) s = lb_set_error(LB_ERR_NOMEM, "export: out of memory (%s)", e->name);
        if (s == LB_OK) s = ex_gptq_dequantize(r->c, t, W);
        if (s == LB_OK) s = lb_quantize_rows(r->pool, e->type, W, q, rows, cols);
        if (s == LB_OK) s = emit(r, q, e->nbytes);
        run_free(r, q, e->nbytes);
        run_free(r, W, wb);
    }
    for (int i = 0; i < 4; i++)
        if (parts[i]) drop_pages(parts[i]->data, parts[i]->nbytes);
    return s;
}

/* MoE experts: each part as a dense [rows, cols] tensor, one after the
 * other (row-wise types: the stacked bytes are the 3-D tensor's). */
static lb_status write_stack(ex_run *r, const ex_tensor *t) {
    for (int p = 0; p < t->n_parts; p++) {
        ex_tensor one = *t;
        one.kind = EX_SRC_DENSE;
        one.dense = t->parts[p];
        one.info.n_dims = 2;
        one.info.shape[0] = t->info.shape[1];
        one.info.shape[1] = t->info.shape[2];
        one.info.shape[2] = 0;
        LB_TRY(write_dense(r, &one));
    }
    return LB_OK;
}

static lb_status write_tensor(ex_run *r, const ex_tensor *t) {
    const lb_export_tensor *e = &t->info;
    lb_status s;
    switch (t->kind) {
    case EX_SRC_DENSE: s = write_dense(r, t); break;
    case EX_SRC_STACK: s = write_stack(r, t); break;
    case EX_SRC_ROPE_FACTORS: {
        size_t n = (size_t)e->shape[0] * 4;
        float *f = run_alloc(r, n);
        if (!f) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        ex_arch_rope_factors(r->c, t->rope_kind, f, e->shape[0]);
        s = emit(r, f, n);
        run_free(r, f, n);
        break;
    }
    case EX_SRC_GPTQ:
        if (!t->gparts) {
            s = write_gptq(r, t);
            break;
        }
        /* stacked GPTQ experts: each with the stack's type and route */
        s = LB_OK;
        for (int p = 0; p < t->n_parts && s == LB_OK; p++) {
            ex_tensor one = t->gparts[p];
            one.info.type = e->type;
            one.info.route = e->route;
            one.info.nbytes = e->nbytes / (size_t)t->n_parts;
            s = write_gptq(r, &one);
        }
        break;
    case EX_SRC_ROPE_FREQS: {
        size_t n = (size_t)e->shape[0] * 4;
        float *f = run_alloc(r, n);
        if (!f) return lb_set_error(LB_ERR_NOMEM, "export: out of memory");
        rope_freqs(&r->c->cfg, f, e->shape[0]);
        s = emit(r, f, n);
        run_free(r, f, n);
        break;
    }
    default: s = lb_set_error(LB_ERR_INTERNAL, "export: unknown source kind");
    }
    return s == LB_OK ? LB_OK : lb_error_context(s, "export: %s (%s)", e->name, e->source);
}

/* Before any work: the output must not be a directory, must have an
 * existing parent directory, and must not be one of the input's files (the
 * atomic rename would replace a checkpoint file the export reads; *.gguf
 * files beside a checkpoint are not read, so re-exporting over one is
 * fine). */
static lb_status check_out_path(const char *in_path, const char *out_path) {
    char parent[PATH_MAX];
    const char *slash = strrchr(out_path, '/');
    if (slash) {
        size_t n = slash == out_path ? 1 : (size_t)(slash - out_path);
        if (n >= sizeof parent)
            return lb_set_error(LB_ERR_INVALID_ARG, "%s: path too long", out_path);
        memcpy(parent, out_path, n);
        parent[n] = 0;
        if (!lb_is_dir(parent))
            return lb_set_error(LB_ERR_IO,
                                "%s: the directory %s does not exist", out_path,
                                parent);
    }
    struct stat so;
    if (stat(out_path, &so) != 0) return LB_OK; /* a new file */
    if (S_ISDIR(so.st_mode))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "%s is a directory (give the output .gguf file)",
                            out_path);
    if (!S_ISREG(so.st_mode)) return lb_check_output_file(out_path); /* device, FIFO */
    struct stat si;
    if (stat(in_path, &si) != 0) return LB_OK; /* the export reports it */
    if (!S_ISDIR(si.st_mode))
        return si.st_dev == so.st_dev && si.st_ino == so.st_ino
                   ? lb_set_error(LB_ERR_INVALID_ARG,
                                  "%s: the output would overwrite the input",
                                  out_path)
                   : LB_OK;
    DIR *d = opendir(in_path);
    if (!d) return LB_OK;
    lb_status s = LB_OK;
    struct dirent *e;
    while (s == LB_OK && (e = readdir(d))) {
        char *f = lb_path_join(in_path, e->d_name);
        struct stat sf;
        const size_t nl = strlen(e->d_name);
        const bool gguf = nl >= 5 && !strcmp(e->d_name + nl - 5, ".gguf");
        if (f && !gguf && stat(f, &sf) == 0 && S_ISREG(sf.st_mode) &&
            sf.st_dev == so.st_dev && sf.st_ino == so.st_ino)
            s = lb_set_error(LB_ERR_INVALID_ARG,
                             "%s: the output would overwrite the input file "
                             "%s", out_path, f);
        free(f);
    }
    closedir(d);
    return s;
}

lb_status lb_export_gguf(const char *in_path, const char *out_path,
                         const lb_export_opts *opts, lb_export_plan **plan_out,
                         lb_export_stats *stats) {
    if (plan_out) *plan_out = NULL;
    if (!out_path) return lb_set_error(LB_ERR_INVALID_ARG, "export: NULL output path");
    if (in_path) LB_TRY(check_out_path(in_path, out_path));
    else LB_TRY(lb_check_output_file(out_path));
    (void)lb_atomic_remove_stale(out_path); /* temp files of killed exports (logged) */
    const double t0 = lb_time_s();
    lb_export_opts def;
    lb_export_opts_default(&def);
    const lb_export_opts *o = opts ? opts : &def;
    ex_ctx *c;
    LB_TRY(ex_ctx_open(in_path, o, &c));
    lb_export_stats st;
    memset(&st, 0, sizeof st);
    ex_run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.st = &st;
    r.progress = o->progress;
    r.total = c->plan->data_bytes;
    lb_pool *own_pool = NULL;
    r.pool = o->pool;
    lb_status s = LB_OK;
    if (!r.pool && !o->vocab_only) {
        own_pool = lb_pool_create(o->n_threads);
        if (!own_pool) s = lb_set_error(LB_ERR_NOMEM, "export: cannot create thread pool");
        r.pool = own_pool;
    }
    if (s == LB_OK) s = ex_build_writer(c, o->vocab_only, &r.w);
    if (s == LB_OK) s = lb_gguf_writer_open(r.w, out_path);
    for (size_t i = 0; s == LB_OK && !o->vocab_only && i < c->n; i++)
        s = write_tensor(&r, &c->t[i]);
    if (s == LB_OK) s = lb_gguf_writer_finish(r.w);
    lb_gguf_writer_free(r.w); /* removes the temp file of a failed write */
    lb_pool_free(own_pool);
    if (s == LB_OK) {
        st.seconds = lb_time_s() - t0;
        st.bytes_out = c->plan->file_bytes;
        st.mb_per_s = st.seconds > 0 ? (double)st.bytes_in / st.seconds / 1e6 : 0;
        for (int k = 0; k < LB_EXPORT_ROUTE_COUNT_; k++) st.n_route[k] = c->plan->n_route[k];
        st.n_tensors = c->n;
        st.file_type = c->plan->file_type;
        if (stats) *stats = st;
        if (plan_out) {
            *plan_out = c->plan;
            c->plan = NULL;
        }
    }
    lb_export_plan_free(c->plan);
    c->plan = NULL;
    ex_ctx_free(c);
    return s;
}
