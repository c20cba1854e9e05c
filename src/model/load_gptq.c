/*
 * GPTQ checkpoint loader (lb_model_load_gptq, lowbit/model.h): the
 * AutoGPTQ / GPTQModel layout of lowbit/gptq_ckpt.h on top of the model
 * builder (model_internal.h). Non-quantized tensors load as in the HF
 * loader; each NAME.qweight linear is validated against the config and
 * converted per lb_gptq_load_mode (exact Q4_0/Q8_0 repack, F32/F16
 * dequantization, or approximate Q4_1).
 */
#include "model/model_internal.h"
#include "lowbit/file.h"
#include "lowbit/gptq_ckpt.h"
#include "lowbit/safetensors.h"
#include "core/internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct load_ctx {
    lb_model *m;
    const lb_safetensors *st;
    const char *dir;
    const lb_gptq_qconfig *qc;
    lb_gptq_load_mode mode;
    int n_by_type[LB_TYPE_COUNT_];
    int n_dense;
} load_ctx;


/* Open the checkpoint's tensors: an index or model.safetensors as
 * lb_st_open finds them, else the directory's only *.safetensors file. */
static lb_status open_weights(const char *dir, lb_safetensors **st) {
    char *idx = lb_path_join(dir, "model.safetensors.index.json");
    char *one = lb_path_join(dir, "model.safetensors");
    bool std_name = (idx && lb_is_file(idx)) || (one && lb_is_file(one));
    free(idx);
    free(one);
    if (std_name) return lb_st_open(dir, st);
    DIR *d = opendir(dir);
    if (!d) return lb_set_error(LB_ERR_IO, "%s: cannot list the directory",
                                dir);
    char *found = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) {
            n++;
            if (!found) found = lb_strdup(e->d_name);
        }
    }
    closedir(d);
    lb_status s;
    if (n == 0)
        s = lb_set_error(LB_ERR_NOT_FOUND, "%s: no .safetensors file", dir);
    else if (n > 1)
        s = lb_set_error(LB_ERR_FORMAT,
                         "%s: %d .safetensors files and no "
                         "model.safetensors.index.json",
                         dir, n);
    else {
        char *p = lb_path_join(dir, found);
        s = p ? lb_st_open(p, st)
              : lb_set_error(LB_ERR_NOMEM, "out of memory");
        free(p);
    }
    free(found);
    return s;
}

static const char *tname(const lb_tensor *t) { return t->name ? t->name : "?"; }

/* A dense tensor by name (F32/F16/BF16), as the HF loader. */
static lb_status set_dense(load_ctx *c, const char *name, lb_tensor_role role,
                           int layer, bool optional) {
    const lb_tensor *t = lb_st_find(c->st, name);
    if (!t) {
        if (optional) return LB_OK;
        return lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                            c->dir, name);
    }
    if (t->type != LB_TYPE_F32 && t->type != LB_TYPE_F16 &&
        t->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has dtype %s (F32/F16/BF16 "
                            "expected)",
                            c->dir, name, lb_type_name(t->type));
    lb_status s = lb_model_builder_set(c->m, role, layer, t);
    if (s != LB_OK) return lb_error_context(s, "%s", c->dir);
    return LB_OK;
}

/* Find prefix.suffix with the given type set and dims; NULL + error. */
static const lb_tensor *need(load_ctx *c, const char *prefix,
                             const char *suffix, bool optional,
                             lb_status *s) {
    char name[256];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const lb_tensor *t = lb_st_find(c->st, name);
    if (!t && !optional)
        *s = lb_set_error(LB_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                          c->dir, name);
    return t;
}

static lb_status bad_shape(load_ctx *c, const lb_tensor *t, const char *want) {
    char got[96];
    int o = snprintf(got, sizeof got, "[");
    for (int i = 0; i < t->n_dims && o < (int)sizeof got; i++)
        o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", i ? ", " : "",
                      (long long)t->shape[i]);
    if (o < (int)sizeof got) snprintf(got + o, sizeof got - (size_t)o, "]");
    return lb_set_error(LB_ERR_FORMAT, "%s: tensor '%s': expected %s, got %s %s",
                        c->dir, tname(t), want, lb_type_name(t->type), got);
}

static lb_status load_view(load_ctx *c, const char *prefix,
                           const lb_tensor *qw, const lb_gptq_linear *l,
                           const lb_gptq_module_cfg *mc,
                           lb_tensor_role role, int layer, lb_tensor *res);

/* One AutoAWQ GEMM linear (lowbit/gptq.h LB_GPTQ_FORMAT_AWQ): qweight I32
 * [in, out/8], qzeros I32 [in/group, out/8], scales F16 [in/group, out];
 * every shape is checked against the config before any data is read, and
 * a mismatch names the tensor. */
static lb_status load_awq(load_ctx *c, const char *prefix,
                          const lb_tensor *qw, lb_tensor_role role, int layer,
                          int64_t out, int64_t in, lb_tensor *res) {
    char want[128];
    lb_gptq_module_cfg mc = lb_gptq_qconfig_module(c->qc, prefix);
    if (out % 32 || in % 32)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s: [%lld, %lld] is not an AWQ shape (both "
                            "dimensions must be multiples of 32)",
                            c->dir, prefix, (long long)out, (long long)in);
    if (qw->type != LB_TYPE_I32 || qw->n_dims != 2 || qw->shape[0] != in ||
        qw->shape[1] != out / 8) {
        snprintf(want, sizeof want, "I32 [%lld, %lld] (AWQ 4-bit: [in, out/8])",
                 (long long)in, (long long)(out / 8));
        return bad_shape(c, qw, want);
    }
    const int64_t gs = mc.group_size > 0 ? mc.group_size : in;
    if (in % gs)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: %s: in_features %lld is not a multiple of "
                            "the AWQ group_size %lld",
                            c->dir, prefix, (long long)in, (long long)gs);
    const int64_t G = in / gs;
    lb_status s = LB_OK;
    const lb_tensor *qz = need(c, prefix, "qzeros", false, &s);
    const lb_tensor *sc = need(c, prefix, "scales", false, &s);
    if (s != LB_OK) return s;
    if (need(c, prefix, "g_idx", true, &s))
        return lb_set_error(LB_ERR_FORMAT, "%s: %s.g_idx: the AWQ GEMM layout "
                            "has no g_idx", c->dir, prefix);
    if (qz->type != LB_TYPE_I32 || qz->n_dims != 2 || qz->shape[0] != G ||
        qz->shape[1] != out / 8) {
        snprintf(want, sizeof want, "I32 [%lld, %lld] (in/group_size, out/8)",
                 (long long)G, (long long)(out / 8));
        return bad_shape(c, qz, want);
    }
    if ((sc->type != LB_TYPE_F16 && sc->type != LB_TYPE_F32 &&
         sc->type != LB_TYPE_BF16) ||
        sc->n_dims != 2 || sc->shape[0] != G || sc->shape[1] != out) {
        snprintf(want, sizeof want, "F16 [%lld, %lld] (in/group_size, out)",
                 (long long)G, (long long)out);
        return bad_shape(c, sc, want);
    }
    lb_gptq_linear l = {
        .out_features = out, .in_features = in, .bits = 4, .n_groups = G,
        .format = LB_GPTQ_FORMAT_AWQ, .qweight = qw->data,
        .qzeros = qz->data, .scales = sc->data, .scales_type = sc->type,
        .g_idx = NULL, .group_size = (int)gs};
    return load_view(c, prefix, qw, &l, NULL, role, layer, res);
}

static lb_status quantized_tensor(load_ctx *c, const char *prefix,
                                  const lb_tensor *qw, lb_tensor_role role,
                                  int layer, int64_t out, int64_t in,
                                  lb_tensor *res);

/* One GPTQ linear `prefix` ([out, in]) -> lb_tensor set for `role`. */
static lb_status load_quantized(load_ctx *c, const char *prefix,
                                const lb_tensor *qw, lb_tensor_role role,
                                int layer) {
    int nd;
    int64_t sh[2];
    lb_role_shape(&c->m->config, role, &nd, sh);
    return quantized_tensor(c, prefix, qw, role, layer, sh[0], sh[1], NULL);
}

/* The converted tensor of GPTQ linear `prefix` [out, in]: set for `role`
 * (res NULL), or returned in *res (model-owned buffer). */
static lb_status quantized_tensor(load_ctx *c, const char *prefix,
                                  const lb_tensor *qw, lb_tensor_role role,
                                  int layer, int64_t out, int64_t in,
                                  lb_tensor *res) {
    char want[128];
    if (c->qc->format == LB_GPTQ_FORMAT_AWQ)
        return load_awq(c, prefix, qw, role, layer, out, in, res);
    /* qweight: I32 [in*bits/32, out] */
    if (qw->type != LB_TYPE_I32 || qw->n_dims != 2 || qw->shape[1] != out ||
        in % 32 || qw->shape[0] < 1 || (qw->shape[0] * 32) % in) {
        snprintf(want, sizeof want, "I32 [%lld*bits/32, %lld]", (long long)in,
                 (long long)out);
        return bad_shape(c, qw, want);
    }
    const int bits = (int)(qw->shape[0] * 32 / in);
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: tensor '%s': [%lld, %lld] means %d-bit "
                            "codes (lowbit reads 2, 3, 4, 8)",
                            c->dir, tname(qw), (long long)qw->shape[0],
                            (long long)qw->shape[1], bits);
    lb_gptq_module_cfg mc = lb_gptq_qconfig_module(c->qc, prefix);
    if (mc.quantized && mc.bits != bits)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s' holds %d-bit codes but the "
                            "quantization config says %d bits",
                            c->dir, tname(qw), bits, mc.bits);
    lb_status s = LB_OK;
    const lb_tensor *qz = need(c, prefix, "qzeros", false, &s);
    const lb_tensor *sc = need(c, prefix, "scales", false, &s);
    const lb_tensor *gi = need(c, prefix, "g_idx", true, &s);
    if (s != LB_OK) return s;
    /* qzeros words per row: out*bits/32; for an out_features that is not a
     * multiple of 32 (GPTQModel) ceil(out*bits/32), or the padded
     * ceil(out/32)*bits */
    const int64_t qz_tight = (out * bits + 31) / 32, qz_padded = (out + 31) / 32 * bits;
    if (qz->type != LB_TYPE_I32 || qz->n_dims != 2 ||
        (qz->shape[1] != qz_tight && qz->shape[1] != qz_padded) || qz->shape[0] < 1 ||
        qz->shape[0] > in) {
        snprintf(want, sizeof want, "I32 [groups, %lld]", (long long)qz_tight);
        return bad_shape(c, qz, want);
    }
    const int64_t G = qz->shape[0];
    if ((sc->type != LB_TYPE_F16 && sc->type != LB_TYPE_F32 &&
         sc->type != LB_TYPE_BF16) ||
        sc->n_dims != 2 || sc->shape[0] != G || sc->shape[1] != out) {
        snprintf(want, sizeof want, "F16 [%lld, %lld]", (long long)G,
                 (long long)out);
        return bad_shape(c, sc, want);
    }
    if (gi && (gi->type != LB_TYPE_I32 || gi->n_dims != 1 ||
               gi->shape[0] != in)) {
        snprintf(want, sizeof want, "I32 [%lld]", (long long)in);
        return bad_shape(c, gi, want);
    }
    lb_gptq_linear l = {
        .out_features = out, .in_features = in, .bits = bits,
        .n_groups = G, .format = c->qc->format, .qweight = qw->data,
        .qzeros = qz->data, .scales = sc->data, .scales_type = sc->type,
        .g_idx = gi ? gi->data : NULL, .group_size = mc.group_size,
        .qzeros_cols = qz->shape[1]};
    return load_view(c, prefix, qw, &l, &mc, role, layer, res);
}

/* A checked-shape view -> the model's tensor for `role`. mc: the GPTQ
 * module's config, whose stored zeros and g_idx are sanity-checked (NULL
 * for AWQ, which has neither quirk). */
static lb_status load_view(load_ctx *c, const char *prefix,
                           const lb_tensor *qw, const lb_gptq_linear *lp,
                           const lb_gptq_module_cfg *mc,
                           lb_tensor_role role, int layer, lb_tensor *res) {
    lb_gptq_linear l = *lp;
    const int64_t out = l.out_features, in = l.in_features;
    const int bits = l.bits;
    lb_status s = LB_OK;
    char name[256];
    snprintf(name, sizeof name, "%s/%s", c->dir, prefix);
    LB_TRY(lb_gptq_linear_check(&l, name));
    if (mc) (void)lb_gptq_linear_sanitize(&l, name, mc->sym, mc->desc_act);

    lb_type type = LB_TYPE_F32;
    switch (c->mode) {
    case LB_GPTQ_LOAD_F32: type = LB_TYPE_F32; break;
    case LB_GPTQ_LOAD_F16: type = LB_TYPE_F16; break;
    case LB_GPTQ_LOAD_AUTO:
    case LB_GPTQ_LOAD_FAST: {
        int t = lb_gptq_linear_exact_type(&l);
        if (t >= 0)
            type = (lb_type)t;
        else if (c->mode == LB_GPTQ_LOAD_FAST && bits == 4) {
            /* Q4_1 needs one group per aligned 32-column block */
            type = LB_TYPE_Q4_1;
        }
        break;
    }
    default:
        return lb_set_error(LB_ERR_INVALID_ARG, "gptq load mode %d",
                            (int)c->mode);
    }
    size_t rb, nbytes;
    if (!lb_row_size(type, in, &rb) || !lb_mul_ok(rb, (size_t)out, &nbytes))
        return lb_set_error(LB_ERR_OVERFLOW, "%s: size overflows", name);
    void *buf = lb_alloc(nbytes);
    if (!buf) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory (%zu "
                                  "bytes)", name, nbytes);
    s = lb_gptq_linear_repack(&l, type, buf, nbytes);
    if (s == LB_ERR_UNSUPPORTED && type == LB_TYPE_Q4_1) {
        /* g_idx splits a block: fall back to exact F32 */
        lb_free(buf);
        type = LB_TYPE_F32;
        nbytes = (size_t)out * (size_t)in * sizeof(float);
        buf = lb_alloc(nbytes);
        if (!buf) return lb_set_error(LB_ERR_NOMEM, "%s: out of memory", name);
        s = lb_gptq_linear_repack(&l, type, buf, nbytes);
    }
    if (s != LB_OK) {
        lb_free(buf);
        return lb_error_context(s, "%s", name);
    }
    LB_TRY(lb_model_builder_own(c->m, buf));
    lb_tensor t = {.name = tname(qw), .type = type, .n_dims = 2,
                   .shape = {out, in}, .data = buf, .nbytes = nbytes};
    if (res) {
        *res = t;
        c->n_by_type[type]++;
        return LB_OK;
    }
    s = lb_model_builder_set(c->m, role, layer, &t);
    if (s != LB_OK) return lb_error_context(s, "%s", c->dir);
    c->n_by_type[type]++;
    return LB_OK;
}

/* A bias the model has no slot for must be all zeros. */
static lb_status check_no_bias(load_ctx *c, const char *prefix) {
    lb_status s = LB_OK;
    const lb_tensor *b = need(c, prefix, "bias", true, &s);
    if (!b) return LB_OK;
    size_t esz = b->type == LB_TYPE_F32 ? 4 : 2;
    if (b->type != LB_TYPE_F32 && b->type != LB_TYPE_F16 &&
        b->type != LB_TYPE_BF16)
        return bad_shape(c, b, "a float bias");
    const uint8_t *p = b->data;
    for (size_t i = 0; i < b->nbytes / esz; i++) {
        uint32_t v = esz == 4 ? lb_rd_u32(p + 4 * i) : lb_rd_u16(p + 2 * i);
        if (v & (esz == 4 ? 0x7FFFFFFFu : 0x7FFFu))
            return lb_set_error(LB_ERR_UNSUPPORTED,
                                "%s: tensor '%s' is a non-zero bias, which "
                                "this architecture has no place for",
                                c->dir, tname(b));
    }
    return LB_OK;
}

/* A linear: quantized when prefix.qweight exists, else prefix.weight. */
static lb_status load_linear(load_ctx *c, const char *prefix,
                             lb_tensor_role role, int layer, bool optional) {
    lb_status s = LB_OK;
    const lb_tensor *qw = need(c, prefix, "qweight", true, &s);
    if (qw) return load_quantized(c, prefix, qw, role, layer);
    char name[256];
    snprintf(name, sizeof name, "%s.weight", prefix);
    bool present = lb_st_find(c->st, name) != NULL;
    LB_TRY(set_dense(c, name, role, layer, optional));
    if (present) c->n_dense++;
    return LB_OK;
}

/* The issue-13 architectures' linears (lb_model_load_layers_ext): the
 * converted prefix.qweight, else the dense prefix.weight. */
static lb_status ext_linear(void *user, const char *prefix, int64_t out,
                            int64_t in, lb_tensor *t) {
    load_ctx *c = user;
    lb_status s = LB_OK;
    const lb_tensor *qw = need(c, prefix, "qweight", true, &s);
    if (qw)
        return quantized_tensor(c, prefix, qw, LB_ROLE_Q, 0, out, in, t);
    const lb_tensor *d = need(c, prefix, "weight", false, &s);
    if (!d) return s;
    if (d->type != LB_TYPE_F32 && d->type != LB_TYPE_F16 &&
        d->type != LB_TYPE_BF16)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: tensor '%s' has dtype %s (F32/F16/BF16 "
                            "expected)", c->dir, tname(d),
                            lb_type_name(d->type));
    c->n_dense++;
    *t = *d;
    return LB_OK;
}

/* The built model's Q4_0 / Q8_0 / Q4_1 linears into the layout the kernels
 * stream fastest: the tensors the GGUF loader repacks
 * (lb_model_repack_weights), so a checkpoint and its direct GGUF run the
 * same kernels and give the same bits. After the build: a row view of a
 * fused qkv_proj / gate_up_proj (Phi-3) is repacked as the tensor
 * lb_matmul receives. Every tensor of those types here is this loader's
 * private copy (lb_gptq_linear_repack); dense ones are never repacked. */
static lb_status repack_linears(lb_model *m) { return lb_model_repack_weights(m, NULL, NULL); }

lb_status lb_model_load_gptq(const char *dir, const lb_model_load_opts *opts,
                             lb_model **out) {
    *out = NULL;
    lb_model_config cfg;
    LB_TRY(lb_model_config_load_dir(dir, &cfg));
    lb_gptq_qconfig qc;
    memset(&qc, 0, sizeof qc);
    lb_status s;
    char label[600];
    if (cfg.quantization_config_json) {
        snprintf(label, sizeof label, "%s/config.json quantization_config",
                 dir);
        s = lb_gptq_qconfig_parse(cfg.quantization_config_json,
                                  strlen(cfg.quantization_config_json), label,
                                  &qc);
    } else {
        char *p = lb_path_join(dir, "quantize_config.json");
        char *js = NULL;
        size_t n = 0;
        s = p ? lb_read_file(p, (size_t)16 << 20, &js, &n)
              : lb_set_error(LB_ERR_NOMEM, "out of memory");
        snprintf(label, sizeof label, "%s", p ? p : dir);
        if (s == LB_OK) s = lb_gptq_qconfig_parse(js, n, label, &qc);
        free(js);
        free(p);
    }
    lb_safetensors *st = NULL;
    if (s == LB_OK && qc.rotation_order &&
        qc.rotation_order != cfg.hidden_size)
        s = lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.order %lld does "
                         "not match hidden_size %d", label,
                         (long long)qc.rotation_order, cfg.hidden_size);
    if (s == LB_OK) s = open_weights(dir, &st);
    if (s == LB_OK) s = lb_gptq_build_model(&cfg, &qc, st, true, dir, opts, out);
    lb_model_config_clear(&cfg);
    lb_gptq_qconfig_clear(&qc);
    return s;
}

lb_status lb_gptq_build_model(const lb_model_config *cfg,
                              const lb_gptq_qconfig *qc, lb_safetensors *st,
                              bool own_st, const char *label,
                              const lb_model_load_opts *opts, lb_model **out) {
    *out = NULL;
    lb_model *m = NULL;
    lb_status s = lb_model_builder_new_st(cfg, st, own_st, &m);
    if (s != LB_OK) return s;
    /* a rotated checkpoint's online transform: the forward applies it
     * (config.online_hadamard_down), so the checkpoint never runs without */
    if (qc->rotation_online_down_order) {
        if (qc->rotation_online_down_order != cfg->intermediate_size)
            s = lb_set_error(LB_ERR_FORMAT, "%s: meta.rotation.online[0].order "
                             "%lld does not match intermediate_size %d", label,
                             (long long)qc->rotation_online_down_order,
                             cfg->intermediate_size);
        else if (lb_model_config_is_ext(cfg) || cfg->arch >= LB_ARCH_GEMMA2)
            s = lb_set_error(LB_ERR_UNSUPPORTED, "%s: meta.rotation.online: "
                             "the online Hadamard runs with Llama/Mistral/"
                             "Qwen2/Qwen3 only, not %s", label, cfg->arch_name);
        if (s != LB_OK) {
            lb_model_free(m);
            return s;
        }
        m->config.online_hadamard_down = true;
    }
    const char *dir = label;
    load_ctx c = {.m = m, .dir = dir, .qc = qc,
                  .mode = opts ? opts->gptq_mode : LB_GPTQ_LOAD_AUTO, .st = st};
    const lb_model_config *mc = &m->config;

    bool tied = mc->tie_word_embeddings;
    bool q_head = lb_st_find(st, "lm_head.qweight") != NULL;
    s = set_dense(&c, "model.embed_tokens.weight", LB_ROLE_TOK_EMBD, 0,
                  tied && (q_head || lb_st_find(st, "lm_head.weight")));
    if (s == LB_OK)
        s = load_linear(&c, "lm_head", LB_ROLE_OUTPUT, 0, tied);
    if (s == LB_OK)
        s = set_dense(&c, "model.norm.weight", LB_ROLE_OUTPUT_NORM, 0, false);
    if (s != LB_OK) goto fail;
    /* tied and both stored densely: transformers uses the embedding (as
     * the HF loader); a quantized lm_head is kept (GPTQModel unties). */
    if (tied && !q_head && m->tok_embd.data)
        memset(&m->output, 0, sizeof m->output);
    if (mc->arch >= LB_ARCH_GEMMA2) {
        /* Gemma 2/3, Phi-3 (fused qkv_proj / gate_up_proj), MoE experts */
        s = lb_model_load_layers_ext(m, st, dir, opts, ext_linear, &c);
        if (s == LB_OK) s = lb_model_builder_finish(m);
        if (s == LB_OK && mc->post_norms) s = lb_model_gemma_norms_plus_one(m);
        if (s == LB_OK) s = repack_linears(m);
        if (s != LB_OK) goto fail;
        goto loaded;
    }

    static const struct {
        lb_tensor_role role;
        const char *suffix;
    } linears[] = {
        {LB_ROLE_Q, "self_attn.q_proj"},  {LB_ROLE_K, "self_attn.k_proj"},
        {LB_ROLE_V, "self_attn.v_proj"},  {LB_ROLE_O, "self_attn.o_proj"},
        {LB_ROLE_GATE, "mlp.gate_proj"}, {LB_ROLE_UP, "mlp.up_proj"},
        {LB_ROLE_DOWN, "mlp.down_proj"},
    };
    for (int l = 0; l < mc->n_layers && s == LB_OK; l++) {
        char name[256];
#define LAYER_NAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)
        s = set_dense(&c, LAYER_NAME("input_layernorm.weight"),
                      LB_ROLE_ATTN_NORM, l, false);
        if (s == LB_OK)
            s = set_dense(&c, LAYER_NAME("post_attention_layernorm.weight"),
                          LB_ROLE_FFN_NORM, l, false);
        if (s == LB_OK && mc->qk_norm) {
            s = set_dense(&c, LAYER_NAME("self_attn.q_norm.weight"),
                          LB_ROLE_Q_NORM, l, false);
            if (s == LB_OK)
                s = set_dense(&c, LAYER_NAME("self_attn.k_norm.weight"),
                              LB_ROLE_K_NORM, l, false);
        }
        for (size_t i = 0; i < LB_ARRAY_LEN(linears) && s == LB_OK; i++) {
            char prefix[200];
            snprintf(prefix, sizeof prefix, "model.layers.%d.%s", l,
                     linears[i].suffix);
            s = load_linear(&c, prefix, linears[i].role, l, false);
            if (s != LB_OK) break;
            lb_tensor_role r = linears[i].role;
            bool has_slot = mc->attention_bias &&
                            (r == LB_ROLE_Q || r == LB_ROLE_K || r == LB_ROLE_V);
            if (has_slot) {
                snprintf(name, sizeof name, "%s.bias", prefix);
                s = set_dense(&c, name,
                              r == LB_ROLE_Q   ? LB_ROLE_Q_BIAS
                              : r == LB_ROLE_K ? LB_ROLE_K_BIAS
                                               : LB_ROLE_V_BIAS,
                              l, false);
            } else {
                s = check_no_bias(&c, prefix);
            }
        }
#undef LAYER_NAME
        if (s == LB_OK && opts &&
            !lb_progress_report(&opts->progress, "load", (uint64_t)l + 1,
                                (uint64_t)mc->n_layers))
            s = lb_set_error(LB_ERR_CANCELLED, "load cancelled");
    }
    if (s == LB_OK) s = lb_model_builder_finish(m);
    if (s == LB_OK) s = repack_linears(m);
    if (s != LB_OK) goto fail;
loaded:
    lb_log(LB_LOG_INFO,
           "%s: %s %d-bit checkpoint (%s): %d Q4_0, %d Q8_0, %d Q4_1, "
           "%d F32, %d F16 linears from qweight, %d dense linears",
           dir, qc->format == LB_GPTQ_FORMAT_AWQ ? "AWQ" : "GPTQ", qc->bits,
           qc->format == LB_GPTQ_FORMAT_AWQ  ? "gemm"
           : qc->format == LB_GPTQ_FORMAT_V2 ? "gptq_v2"
                                              : "gptq",
           c.n_by_type[LB_TYPE_Q4_0], c.n_by_type[LB_TYPE_Q8_0],
           c.n_by_type[LB_TYPE_Q4_1], c.n_by_type[LB_TYPE_F32],
           c.n_by_type[LB_TYPE_F16], c.n_dense);
    *out = m;
    return LB_OK;
fail:
    lb_model_free(m);
    return s;
}
