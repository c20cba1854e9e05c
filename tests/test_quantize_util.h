/*
 * test_quantize_util.h — helpers shared by test_quantize_ckpt.c and
 * test_quantize_resume.c (lb_quantize_model: GPTQ checkpoints written and
 * reloaded).
 *  - tinystories-656k, the reference protocol: the packed tensors equal
 *    AutoGPTQ's own checkpoint (../shared/reference/gptq_model/
 *    gptq_checkpoint), the reload gives ppl within 1% of 41.4763 (F32) and
 *    loads as exact Q4_0; config.json / quantize_config.json / tokenizer
 *    files / report; nothing left beside the output;
 *  - resume: a run cancelled after layer 0 and resumed gives the same
 *    bytes as an uninterrupted run; other settings start afresh;
 *  - RTN asym gptq_v2 with module rules (8-bit, skip) -> dynamic config,
 *    mixed reload; v1 cannot hold a zero point of 0;
 *  - the vllm-w4a8 profile (lm_head quantized and untied, BF16 embedding,
 *    SNR report); sharding; output-directory rules and argument errors.
 */
#ifndef LB_TEST_QUANTIZE_UTIL_H
#define LB_TEST_QUANTIZE_UTIL_H

#include "th.h"

#include "lowbit/eval.h"
#include "lowbit/file.h"
#include "lowbit/gptq_ckpt.h"
#include "lowbit/model.h"
#include "lowbit/quantize.h"
#include "lowbit/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#define TS_DIR "models/tinystories-656k"
#define QW_DIR "models/random/qwen2-random"

static inline double ppl_full256(lb_model *m) {
    size_t nb = 0;
    int32_t *ids = th_read_bin(th_shared("reference/ppl/ids/tinystories-lf."
                                         "hf-tokenizers.ids.i32"),
                               &nb);
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 256;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    lb_ppl_params p = lb_ppl_default_params();
    p.protocol = LB_PPL_FULL;
    p.n_ctx = 256;
    lb_ppl_result r = {0};
    if (ctx && ids)
        TH_CHECK_OK(lb_perplexity(ctx, ids, (int64_t)nb / 4, &p, &r));
    lb_context_free(ctx);
    free(ids);
    return r.ppl;
}

static inline cJSON *read_json(const char *path) {
    size_t n;
    char *s = th_read_bin(path, &n);
    if (!s) return NULL;
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    return j;
}

static inline const char *tmp_path(const char *name) {
    static char buf[8][700];
    static int k;
    char *b = buf[k++ & 7];
    snprintf(b, sizeof buf[0], "%s/%s", th_tmpdir(), name);
    return b;
}

/* Entries of th_tmpdir() whose name starts with prefix. */
static inline int count_entries(const char *prefix) {
    DIR *d = opendir(th_tmpdir());
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static inline bool files_equal(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    void *pa = th_read_bin(a, &na), *pb = th_read_bin(b, &nb);
    bool eq = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return eq;
}

static inline lb_calib random_calib(int64_t ns, int64_t T, int32_t vocab,
                             uint32_t seed) {
    lb_calib c = {0};
    c.ids = malloc((size_t)(ns * T) * 4);
    c.nsamples = ns;
    c.seqlen = T;
    for (int64_t i = 0; i < ns * T; i++) {
        seed = seed * 1664525u + 1013904223u;
        c.ids[i] = (int32_t)((seed >> 8) % (uint32_t)vocab);
    }
    return c;
}

static inline int qt_rm_one(const char *path, const struct stat *sb, int flag,
                            struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Remove th_tmpdir() and everything in it (call at the end of main). */
static inline void qt_cleanup(void) {
    nftw(th_tmpdir(), qt_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
