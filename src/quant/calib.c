/*
 * Calibration data (lowbit/quantize.h): pre-tokenized int32 files and
 * seeded window sampling from text / JSONL files, in the manner of GPTQ's
 * get_wikitext2 loader (random windows of one token stream).
 */
#include "lowbit/quantize.h"
#include "lowbit/file.h"
#include "lowbit/sample.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#define CALIB_MAX_FILE ((size_t)1 << 34) /* 16 GiB per text file */

void lb_calib_free(lb_calib *c) {
    if (!c) return;
    free(c->ids);
    memset(c, 0, sizeof *c);
}

lb_status lb_calib_load_ids(const char *path, int64_t seqlen,
                            int64_t nsamples, lb_calib *out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "calib: NULL out");
    memset(out, 0, sizeof *out);
    if (!path || seqlen < 1 || seqlen > (1 << 24))
        return lb_set_error(LB_ERR_INVALID_ARG, "calib: bad path or seqlen "
                            "%lld", (long long)seqlen);
    lb_mapped_file mf;
    LB_TRY(lb_map_file(path, &mf));
    lb_status s = LB_OK;
    const size_t row = (size_t)seqlen * 4;
    if (mf.size == 0 || mf.size % row) {
        s = lb_set_error(LB_ERR_FORMAT,
                         "%s: %zu bytes is not a whole number of rows of "
                         "seqlen %lld int32 ids (%zu bytes each)",
                         path, mf.size, (long long)seqlen, row);
        goto done;
    }
    int64_t rows = (int64_t)(mf.size / row);
    if (nsamples <= 0) nsamples = rows;
    if (nsamples > rows) {
        s = lb_set_error(LB_ERR_RANGE,
                         "%s: %lld sequences of %lld ids, %lld requested",
                         path, (long long)rows, (long long)seqlen,
                         (long long)nsamples);
        goto done;
    }
    out->ids = malloc((size_t)nsamples * row);
    if (!out->ids) {
        s = lb_set_error(LB_ERR_NOMEM, "calib: out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)nsamples * (size_t)seqlen; i++)
        out->ids[i] = (int32_t)lb_rd_u32(mf.data + 4 * i);
    out->nsamples = nsamples;
    out->seqlen = seqlen;
done:
    lb_unmap_file(&mf);
    return s;
}

typedef struct stream {
    int32_t *ids;
    size_t n, cap;
    int64_t n_docs;
} stream;

static lb_status stream_doc(stream *st, lb_tokenize_fn tok, void *user,
                            const char *text, size_t len, const char *label) {
    int32_t *ids = NULL;
    size_t n = 0;
    lb_status s = tok(user, text, len, &ids, &n);
    if (s != LB_OK) {
        free(ids);
        return lb_error_context(s, "%s", label);
    }
    if (st->n + n > st->cap) {
        size_t nc = LB_MAX(st->cap * 2, st->n + n + 1024);
        int32_t *p = realloc(st->ids, nc * sizeof *p);
        if (!p) {
            free(ids);
            return lb_set_error(LB_ERR_NOMEM, "calib: out of memory for %zu "
                                "tokens", nc);
        }
        st->ids = p;
        st->cap = nc;
    }
    if (n) memcpy(st->ids + st->n, ids, n * sizeof *ids);
    st->n += n;
    st->n_docs++;
    free(ids);
    return LB_OK;
}

static bool is_jsonl(const char *path) {
    size_t n = strlen(path);
    return n >= 6 && !strcmp(path + n - 6, ".jsonl");
}

static lb_status read_jsonl(stream *st, const char *path, const char *data,
                            size_t size, lb_tokenize_fn tok, void *user) {
    size_t line_no = 0;
    for (size_t b = 0; b < size;) {
        size_t e = b;
        while (e < size && data[e] != '\n') e++;
        line_no++;
        size_t len = e - b;
        /* skip blank lines (and a CR before the LF) */
        bool blank = true;
        for (size_t i = b; i < e; i++)
            if (data[i] != ' ' && data[i] != '\t' && data[i] != '\r')
                blank = false;
        if (!blank) {
            cJSON *j = cJSON_ParseWithLength(data + b, len);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
            if (!cJSON_IsString(t)) {
                cJSON_Delete(j);
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s:%zu: not a JSON object with a string "
                                    "\"text\" field",
                                    path, line_no);
            }
            char label[600];
            snprintf(label, sizeof label, "%s:%zu", path, line_no);
            lb_status s = stream_doc(st, tok, user, t->valuestring,
                                     strlen(t->valuestring), label);
            cJSON_Delete(j);
            LB_TRY(s);
        }
        b = e + 1;
    }
    return LB_OK;
}

lb_status lb_calib_sample_text(const char *const *paths, int n_paths,
                               lb_tokenize_fn tok, void *tok_user,
                               int64_t nsamples, int64_t seqlen, uint64_t seed,
                               lb_calib *out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "calib: NULL out");
    memset(out, 0, sizeof *out);
    if (!paths || n_paths < 1 || !tok)
        return lb_set_error(LB_ERR_INVALID_ARG, "calib: no text files");
    if (nsamples < 1 || seqlen < 1 || seqlen > (1 << 24) ||
        nsamples > (1 << 24))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "calib: nsamples %lld / seqlen %lld out of range",
                            (long long)nsamples, (long long)seqlen);
    stream st = {0};
    lb_status s = LB_OK;
    for (int f = 0; f < n_paths && s == LB_OK; f++) {
        char *data = NULL;
        size_t size = 0;
        s = lb_read_file(paths[f], CALIB_MAX_FILE, &data, &size);
        if (s != LB_OK) break;
        if (is_jsonl(paths[f]))
            s = read_jsonl(&st, paths[f], data, size, tok, tok_user);
        else
            s = stream_doc(&st, tok, tok_user, data, size, paths[f]);
        free(data);
    }
    if (s == LB_OK && st.n < (size_t)seqlen)
        s = lb_set_error(LB_ERR_RANGE,
                         "calibration text too short: %zu tokens in %lld "
                         "documents, at least seqlen = %lld needed (%lld = "
                         "nsamples x seqlen for windows that do not overlap)",
                         st.n, (long long)st.n_docs, (long long)seqlen,
                         (long long)(nsamples * seqlen));
    if (s == LB_OK) {
        out->ids = malloc((size_t)nsamples * (size_t)seqlen * sizeof(int32_t));
        if (!out->ids) s = lb_set_error(LB_ERR_NOMEM, "calib: out of memory");
    }
    if (s == LB_OK) {
        if (st.n < (size_t)(nsamples * seqlen))
            lb_log(LB_LOG_WARN,
                   "calibration: %zu tokens for %lld x %lld windows: windows "
                   "overlap",
                   st.n, (long long)nsamples, (long long)seqlen);
        lb_rng rng;
        lb_rng_seed(&rng, seed);
        const uint64_t range = (uint64_t)(st.n - (size_t)seqlen) + 1;
        for (int64_t k = 0; k < nsamples; k++) {
            uint64_t start = lb_rng_next(&rng) % range;
            memcpy(out->ids + k * seqlen, st.ids + start,
                   (size_t)seqlen * sizeof(int32_t));
        }
        out->nsamples = nsamples;
        out->seqlen = seqlen;
    }
    free(st.ids);
    if (s != LB_OK) lb_calib_free(out);
    return s;
}
