/*
 * lowbit inspect FILE [--no-metadata] [--json]
 * (FILE: GGUF, safetensors file or index, or an HF checkpoint directory)
 *
 * Prints a model file's tensor table (name, type, shape, bytes, bits per
 * weight), totals (effective bits/weight over all tensors and over the 2-D
 * weight matrices) and its metadata.
 *
 * Structure: a per-format reader fills a format-neutral table model
 * (insp_model: pre-rendered metadata entries + tensor rows); the text and
 * JSON printers only know the model. To add a format (safetensors file, HF
 * directory, GPTQ checkpoint), write an insp_read_FORMAT() that fills an
 * insp_model and add a row to `formats` below.
 */
#include "cli.h"

#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "lowbit/safetensors.h"

#include <sys/stat.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Table model                                                               */
/* ------------------------------------------------------------------------ */

typedef struct insp_meta {
    char *key;
    char *type; /* "UINT32", "[STRING]", ... */
    char *text; /* human form: strings quoted and truncated, long arrays
                   summarised as "[TYPE x N]" */
    char *json; /* a JSON value (same summarising rules, longer strings)  */
} insp_meta;

typedef struct insp_tensor {
    const char *name; /* owned by the format reader (insp_model.owner)    */
    const char *type; /* type name ("Q4_0")                               */
    int n_dims;
    int64_t shape[LB_MAX_DIMS]; /* outermost-first                        */
    uint64_t bytes;
    int64_t n_elements;
} insp_tensor;

typedef struct insp_model {
    const char *format; /* "gguf"                                          */
    const char *path;
    uint32_t version;   /* format version (0: none)                        */
    size_t alignment;   /* 0: not applicable                               */
    uint64_t file_size;
    insp_meta *meta;
    size_t n_meta;
    insp_tensor *t;
    size_t n_t;
    void *owner; /* format-specific state the strings point into          */
    void (*free_owner)(void *);
} insp_model;

static void insp_free(insp_model *m) {
    for (size_t i = 0; i < m->n_meta; i++) {
        free(m->meta[i].key);
        free(m->meta[i].type);
        free(m->meta[i].text);
        free(m->meta[i].json);
    }
    free(m->meta);
    free(m->t);
    if (m->free_owner) m->free_owner(m->owner);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------------ */
/* Rendering helpers (open_memstream-backed strings)                         */
/* ------------------------------------------------------------------------ */

#define TEXT_STR_MAX 60    /* bytes of a string shown in text mode        */
#define JSON_STR_MAX 1024  /* bytes of a string kept in JSON              */
#define ARRAY_SHOW_MAX 8   /* arrays up to this length are listed in full */

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) len = 2, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* Write s[0..n) as a quoted string, escaping as JSON does (valid JSON
 * also for text mode); invalid UTF-8 bytes become U+FFFD. At most `max`
 * bytes are shown; a longer string ends in "..." (cut on a character
 * boundary). */
static void put_quoted(FILE *fp, const char *s, size_t n, size_t max) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', fp);
    size_t i = 0;
    while (i < n) {
        if (i >= max) {
            fputs("...", fp);
            break;
        }
        unsigned c = p[i];
        switch (c) {
        case '"': fputs("\\\"", fp); i++; continue;
        case '\\': fputs("\\\\", fp); i++; continue;
        case '\n': fputs("\\n", fp); i++; continue;
        case '\r': fputs("\\r", fp); i++; continue;
        case '\t': fputs("\\t", fp); i++; continue;
        default: break;
        }
        if (c < 0x20 || c == 0x7f) {
            fprintf(fp, "\\u%04x", c);
            i++;
            continue;
        }
        size_t k = utf8_len(p + i, n - i);
        if (k == 0) {
            fputs("\\ufffd", fp);
            i++;
        } else {
            fwrite(p + i, 1, k, fp);
            i += k;
        }
    }
    fputc('"', fp);
}

static void put_float(FILE *fp, double v, bool f32, bool json) {
    if (!isfinite(v)) {
        if (json)
            fputs("null", fp);
        else
            fputs(isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"), fp);
        return;
    }
    /* shortest form that reads back to the same value */
    char buf[40];
    for (int prec = f32 ? 6 : 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        double back = strtod(buf, NULL);
        if (f32 ? (float)back == (float)v : back == v) break;
    }
    fputs(buf, fp);
}

/* A scalar GGUF value. */
static void put_gguf_scalar(FILE *fp, const lb_gguf_value *v, bool json) {
    switch (v->type) {
    case LB_GGUF_TYPE_BOOL: {
        bool b = false;
        lb_gguf_value_bool(v, &b);
        fputs(b ? "true" : "false", fp);
        return;
    }
    case LB_GGUF_TYPE_FLOAT32:
    case LB_GGUF_TYPE_FLOAT64: {
        double d = 0;
        lb_gguf_value_f64(v, &d);
        put_float(fp, d, v->type == LB_GGUF_TYPE_FLOAT32, json);
        return;
    }
    case LB_GGUF_TYPE_STRING: {
        lb_gguf_str s = {0};
        lb_gguf_value_str(v, &s);
        put_quoted(fp, s.data, s.len, json ? JSON_STR_MAX : TEXT_STR_MAX);
        return;
    }
    case LB_GGUF_TYPE_UINT64: {
        uint64_t u = 0;
        lb_gguf_value_u64(v, &u);
        fprintf(fp, "%" PRIu64, u);
        return;
    }
    default: {
        int64_t s = 0;
        lb_gguf_value_i64(v, &s);
        fprintf(fp, "%" PRId64, s);
        return;
    }
    }
}

/* A GGUF value: scalars in full, arrays of up to ARRAY_SHOW_MAX scalars as
 * a list, longer (or nested) arrays as the summary "[TYPE x N]" (a string
 * in JSON). */
static void put_gguf_value(FILE *fp, const lb_gguf_value *v, bool json) {
    if (v->type != LB_GGUF_TYPE_ARRAY) {
        put_gguf_scalar(fp, v, json);
        return;
    }
    if (v->n > ARRAY_SHOW_MAX || v->elem_type == LB_GGUF_TYPE_ARRAY) {
        if (json) fputc('"', fp);
        fprintf(fp, "[%s x %" PRIu64 "]", lb_gguf_type_name(v->elem_type), v->n);
        if (json) fputc('"', fp);
        return;
    }
    fputc('[', fp);
    for (uint64_t i = 0; i < v->n; i++) {
        lb_gguf_value el;
        if (lb_gguf_arr_elem(v, i, &el) != LB_OK) break;
        if (i) fputs(", ", fp);
        put_gguf_scalar(fp, &el, json);
    }
    fputc(']', fp);
}

typedef struct mstr {
    char *buf;
    size_t len;
    FILE *fp;
} mstr;

static bool mstr_open(mstr *m) {
    m->buf = NULL;
    m->len = 0;
    m->fp = open_memstream(&m->buf, &m->len);
    return m->fp != NULL;
}
static char *mstr_close(mstr *m) {
    if (m->fp) fclose(m->fp);
    m->fp = NULL;
    return m->buf;
}

/* ------------------------------------------------------------------------ */
/* GGUF reader -> table model                                                */
/* ------------------------------------------------------------------------ */

static void free_gguf(void *p) { lb_gguf_close(p); }

static lb_status insp_read_gguf(const char *path, bool want_meta,
                                insp_model *m) {
    lb_gguf *g = NULL;
    lb_status st = lb_gguf_open(path, &g);
    if (st != LB_OK) return st;
    m->format = "gguf";
    m->path = path;
    m->version = lb_gguf_version(g);
    m->alignment = lb_gguf_alignment(g);
    m->file_size = lb_gguf_file_size(g);
    m->owner = g;
    m->free_owner = free_gguf;
    size_t nt = (size_t)lb_gguf_n_tensors(g);
    m->t = calloc(nt ? nt : 1, sizeof *m->t);
    if (!m->t) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nt; i++) {
        lb_tensor t;
        st = lb_gguf_tensor_view(g, (int64_t)i, &t);
        if (st != LB_OK) return st;
        insp_tensor *r = &m->t[m->n_t++];
        r->name = t.name;
        r->type = lb_type_name(t.type);
        r->n_dims = t.n_dims;
        memcpy(r->shape, t.shape, sizeof r->shape);
        r->bytes = t.nbytes;
        r->n_elements = lb_gguf_tensor_at(g, (int64_t)i)->n_elements;
    }
    if (!want_meta) return LB_OK;
    size_t nkv = (size_t)lb_gguf_n_kv(g);
    m->meta = calloc(nkv ? nkv : 1, sizeof *m->meta);
    if (!m->meta) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nkv; i++) {
        const lb_gguf_value *v = lb_gguf_kv_value(g, (int64_t)i);
        insp_meta *e = &m->meta[m->n_meta++];
        mstr ty, tx, js;
        if (!mstr_open(&ty) || !mstr_open(&tx) || !mstr_open(&js)) {
            free(mstr_close(&ty));
            free(mstr_close(&tx));
            free(mstr_close(&js));
            return lb_set_error(LB_ERR_NOMEM, "out of memory");
        }
        if (v->type == LB_GGUF_TYPE_ARRAY)
            fprintf(ty.fp, "[%s]", lb_gguf_type_name(v->elem_type));
        else
            fputs(lb_gguf_type_name(v->type), ty.fp);
        put_gguf_value(tx.fp, v, false);
        put_gguf_value(js.fp, v, true);
        e->type = mstr_close(&ty);
        e->text = mstr_close(&tx);
        e->json = mstr_close(&js);
        e->key = strdup(lb_gguf_kv_key(g, (int64_t)i));
        if (!e->type || !e->text || !e->json || !e->key)
            return lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* safetensors reader (a file, a sharded index or an HF directory)           */
/* ------------------------------------------------------------------------ */

static void free_st(void *p) { lb_st_close(p); }

static lb_status insp_read_safetensors(const char *path, bool want_meta,
                                       insp_model *m) {
    lb_safetensors *st = NULL;
    lb_status s = lb_st_open(path, &st);
    if (s != LB_OK) return s;
    m->format = "safetensors";
    m->path = path;
    m->owner = st;
    m->free_owner = free_st;
    size_t nt = lb_st_count(st);
    m->t = calloc(nt ? nt : 1, sizeof *m->t);
    if (!m->t) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    /* file size: the shards' sizes added up */
    const char *seen_last = NULL;
    for (size_t i = 0; i < nt; i++) {
        const lb_tensor *t = lb_st_tensor_at(st, i);
        insp_tensor *r = &m->t[m->n_t++];
        r->name = t->name;
        r->type = lb_type_name(t->type);
        r->n_dims = t->n_dims;
        memcpy(r->shape, t->shape, sizeof r->shape);
        r->bytes = t->nbytes;
        r->n_elements = lb_tensor_nelements(t);
        const char *f = lb_st_tensor_file(st, t);
        bool counted = f && seen_last && strcmp(f, seen_last) == 0;
        for (size_t k = 0; f && !counted && k < i; k++)
            counted = strcmp(lb_st_tensor_file(st, lb_st_tensor_at(st, k)), f) == 0;
        struct stat sb;
        if (f && !counted && stat(f, &sb) == 0) m->file_size += (uint64_t)sb.st_size;
        seen_last = f;
    }
    if (!want_meta) return LB_OK;
    size_t nm = lb_st_metadata_count(st);
    m->meta = calloc(nm ? nm : 1, sizeof *m->meta);
    if (!m->meta) return lb_set_error(LB_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nm; i++) {
        const char *k = NULL, *v = NULL;
        if (!lb_st_metadata_at(st, i, &k, &v)) continue;
        insp_meta *e = &m->meta[m->n_meta++];
        mstr tx, js;
        if (!mstr_open(&tx) || !mstr_open(&js)) {
            free(mstr_close(&tx));
            free(mstr_close(&js));
            return lb_set_error(LB_ERR_NOMEM, "out of memory");
        }
        put_quoted(tx.fp, v, strlen(v), TEXT_STR_MAX);
        cli_json_string(js.fp, v);
        e->text = mstr_close(&tx);
        e->json = mstr_close(&js);
        e->type = strdup("STRING");
        e->key = strdup(k);
        if (!e->type || !e->text || !e->json || !e->key)
            return lb_set_error(LB_ERR_NOMEM, "out of memory");
    }
    return LB_OK;
}

/* ------------------------------------------------------------------------ */
/* Format detection                                                          */
/* ------------------------------------------------------------------------ */

typedef struct insp_format {
    const char *name;
    /* true if the first bytes (head, n of them) belong to this format */
    bool (*probe)(const uint8_t *head, size_t n);
    lb_status (*read)(const char *path, bool want_meta, insp_model *m);
} insp_format;

static bool probe_gguf(const uint8_t *head, size_t n) {
    return n >= 4 && memcmp(head, LB_GGUF_MAGIC, 4) == 0;
}

/* safetensors: u64 little-endian header length, then a JSON object */
static bool probe_safetensors(const uint8_t *head, size_t n) {
    if (n < 9) return false;
    uint64_t len;
    memcpy(&len, head, 8);
    size_t i = 8;
    while (i < n && (head[i] == ' ' || head[i] == '\n')) i++;
    return len >= 2 && i < n && head[i] == '{';
}
/* a safetensors index (model.safetensors.index.json): JSON text */
static bool probe_json(const uint8_t *head, size_t n) {
    size_t i = 0;
    while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t'))
        i++;
    return i < n && head[i] == '{';
}

static const insp_format formats[] = {
    {"gguf", probe_gguf, insp_read_gguf},
    {"safetensors", probe_safetensors, insp_read_safetensors},
    {"safetensors index", probe_json, insp_read_safetensors},
};

static lb_status insp_open(const char *path, bool want_meta, insp_model *m) {
    memset(m, 0, sizeof *m);
    if (lb_is_dir(path)) /* a Hugging Face checkpoint directory */
        return insp_read_safetensors(path, want_meta, m);
    FILE *fp = fopen(path, "rb");
    if (!fp) return lb_set_error(LB_ERR_IO, "%s: cannot open", path);
    uint8_t head[16];
    size_t n = fread(head, 1, sizeof head, fp);
    fclose(fp);
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (formats[i].probe(head, n)) return formats[i].read(path, want_meta, m);
    return lb_set_error(LB_ERR_UNSUPPORTED,
                        "%s: unknown file format (inspect reads GGUF and "
                        "safetensors files, safetensors indexes and HF "
                        "directories)",
                        path);
}

/* ------------------------------------------------------------------------ */
/* Totals and printers                                                       */
/* ------------------------------------------------------------------------ */

typedef struct insp_totals {
    uint64_t n_elements, bytes;       /* all tensors        */
    uint64_t n_elements_2d, bytes_2d; /* 2-D tensors only   */
    size_t n_2d;
} insp_totals;

static insp_totals totals_of(const insp_model *m) {
    insp_totals s = {0};
    for (size_t i = 0; i < m->n_t; i++) {
        const insp_tensor *t = &m->t[i];
        s.n_elements += (uint64_t)t->n_elements;
        s.bytes += t->bytes;
        if (t->n_dims == 2) {
            s.n_2d++;
            s.n_elements_2d += (uint64_t)t->n_elements;
            s.bytes_2d += t->bytes;
        }
    }
    return s;
}

static double bpw(uint64_t bytes, uint64_t n) {
    return n ? 8.0 * (double)bytes / (double)n : 0.0;
}

/* GPTQ checkpoints: the int32 words of PREFIX.qweight are not weights.
 * Each quantized module (qweight [in*bits/32, out] with qzeros, scales,
 * g_idx) counts as out*in weights stored in the bytes of its four tensors
 * -- quantize's bits_per_weight -- and the model's effective bits/weight
 * counts modules by their weights and every other tensor by its elements. */
typedef struct insp_gptq {
    size_t n_modules;
    uint64_t weights, bytes;      /* quantized modules                     */
    uint64_t eff_elements, eff_bytes; /* the whole model, modules as weights */
} insp_gptq;

static const insp_tensor *find_t(const insp_model *m, const char *prefix, const char *suffix) {
    char nm[512];
    snprintf(nm, sizeof nm, "%s.%s", prefix, suffix);
    for (size_t i = 0; i < m->n_t; i++)
        if (!strcmp(m->t[i].name, nm)) return &m->t[i];
    return NULL;
}

static insp_gptq gptq_of(const insp_model *m) {
    insp_gptq g = {0};
    uint64_t part_elems = 0, part_bytes = 0, all_elems = 0, all_bytes = 0;
    for (size_t i = 0; i < m->n_t; i++) {
        all_elems += (uint64_t)m->t[i].n_elements;
        all_bytes += m->t[i].bytes;
        const char *nm = m->t[i].name;
        size_t l = strlen(nm);
        if (l < 9 || l >= 500 || strcmp(nm + l - 8, ".qweight") || strcmp(m->t[i].type, "I32") ||
            m->t[i].n_dims != 2)
            continue;
        char prefix[512];
        memcpy(prefix, nm, l - 8);
        prefix[l - 8] = '\0';
        const insp_tensor *qw = &m->t[i], *qz = find_t(m, prefix, "qzeros"),
                          *sc = find_t(m, prefix, "scales"), *gi = find_t(m, prefix, "g_idx");
        if (!qz || !sc || qz->n_dims != 2) continue;
        const int64_t out = qw->shape[1];
        int64_t in = 0;
        if (gi && gi->n_dims == 1) in = gi->shape[0];
        else if (out > 0 && qz->shape[1] > 0) { /* bits from qzeros [G, out*bits/32] */
            int64_t bits = qz->shape[1] * 32 / out;
            if (bits > 0) in = qw->shape[0] * 32 / bits;
        }
        if (in <= 0 || out <= 0) continue;
        const uint64_t b = qw->bytes + qz->bytes + sc->bytes + (gi ? gi->bytes : 0);
        g.n_modules++;
        g.weights += (uint64_t)(out * in);
        g.bytes += b;
        part_elems += (uint64_t)qw->n_elements + (uint64_t)qz->n_elements +
                      (uint64_t)sc->n_elements + (gi ? (uint64_t)gi->n_elements : 0);
        part_bytes += b;
    }
    g.eff_elements = all_elems - part_elems + g.weights;
    g.eff_bytes = all_bytes;
    (void)part_bytes;
    return g;
}

/* "[d0, d1, ...]" (at most 4 dims of 20 digits: fits 96 bytes). */
static const char *shape_str(char *buf, size_t n, const insp_tensor *t) {
    size_t len = (size_t)snprintf(buf, n, "[");
    for (int k = 0; k < t->n_dims && len < n; k++)
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, k ? ", " : "",
                                t->shape[k]);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

static void print_json(const insp_model *m, bool want_meta) {
    insp_totals s = totals_of(m);
    FILE *o = stdout;
    fprintf(o, "{\"format\": ");
    cli_json_string(o, m->format);
    fprintf(o, ", \"path\": ");
    put_quoted(o, m->path, strlen(m->path), SIZE_MAX);
    fprintf(o, ", \"version\": %" PRIu32 ", \"alignment\": %zu, \"file_size\": %" PRIu64,
            m->version, m->alignment, m->file_size);
    if (want_meta) {
        fprintf(o, ", \"metadata\": {");
        for (size_t i = 0; i < m->n_meta; i++) {
            fputs(i ? ", " : "", o);
            put_quoted(o, m->meta[i].key, strlen(m->meta[i].key), SIZE_MAX);
            fprintf(o, ": %s", m->meta[i].json);
        }
        fputc('}', o);
    }
    fprintf(o, ", \"tensors\": [");
    for (size_t i = 0; i < m->n_t; i++) {
        const insp_tensor *t = &m->t[i];
        fputs(i ? ", " : "", o);
        char shape[96];
        fputs("{\"name\": ", o);
        put_quoted(o, t->name, strlen(t->name), SIZE_MAX);
        fprintf(o, ", \"type\": \"%s\", \"shape\": %s", t->type,
                shape_str(shape, sizeof shape, t));
        fprintf(o, ", \"n_elements\": %" PRId64 ", \"bytes\": %" PRIu64 ", \"bpw\": %.6f}",
                t->n_elements, t->bytes, bpw(t->bytes, (uint64_t)t->n_elements));
    }
    fprintf(o, "], \"n_tensors\": %zu, \"n_elements\": %" PRIu64
               ", \"total_bytes\": %" PRIu64 ", \"bpw\": %.6f",
            m->n_t, s.n_elements, s.bytes, bpw(s.bytes, s.n_elements));
    fprintf(o, ", \"n_tensors_2d\": %zu, \"n_elements_2d\": %" PRIu64
               ", \"total_bytes_2d\": %" PRIu64 ", \"bpw_2d\": %.6f",
            s.n_2d, s.n_elements_2d, s.bytes_2d, bpw(s.bytes_2d, s.n_elements_2d));
    insp_gptq g = gptq_of(m);
    if (g.n_modules)
        fprintf(o, ", \"gptq\": {\"modules\": %zu, \"weights\": %" PRIu64 ", \"bytes\": %" PRIu64
                   ", \"bpw\": %.6f, \"effective_elements\": %" PRIu64 ", \"effective_bpw\": %.6f}",
                g.n_modules, g.weights, g.bytes, bpw(g.bytes, g.weights), g.eff_elements,
                bpw(g.eff_bytes, g.eff_elements));
    fputs("}\n", o);
}

static void print_text(const insp_model *m, bool want_meta) {
    insp_totals s = totals_of(m);
    FILE *o = stdout;
    fprintf(o, "file:       %s (%" PRIu64 " bytes)\n", m->path, m->file_size);
    fprintf(o, "format:     %s", m->format);
    if (m->version) fprintf(o, " v%" PRIu32, m->version);
    if (m->alignment) fprintf(o, ", alignment %zu", m->alignment);
    fputc('\n', o);
    if (want_meta) {
        size_t w = 20;
        for (size_t i = 0; i < m->n_meta; i++)
            if (strlen(m->meta[i].key) > w) w = strlen(m->meta[i].key);
        if (w > 48) w = 48;
        fprintf(o, "\nmetadata (%zu keys):\n", m->n_meta);
        for (size_t i = 0; i < m->n_meta; i++)
            fprintf(o, "  %-*s %-10s %s\n", (int)w, m->meta[i].key,
                    m->meta[i].type, m->meta[i].text);
    }
    size_t w = 4;
    for (size_t i = 0; i < m->n_t; i++)
        if (strlen(m->t[i].name) > w) w = strlen(m->t[i].name);
    fprintf(o, "\ntensors (%zu; shape outermost-first):\n", m->n_t);
    fprintf(o, "  %-*s %-6s %-20s %12s %7s\n", (int)w, "name", "type", "shape",
            "bytes", "bpw");
    for (size_t i = 0; i < m->n_t; i++) {
        const insp_tensor *t = &m->t[i];
        char shape[96];
        fprintf(o, "  %-*s %-6s %-20s %12" PRIu64 " %7.3f\n", (int)w, t->name,
                t->type, shape_str(shape, sizeof shape, t), t->bytes,
                bpw(t->bytes, (uint64_t)t->n_elements));
    }
    fprintf(o, "\ntotal:      %zu tensors, %" PRIu64 " elements, %" PRIu64
               " bytes, %.4f bits/weight\n",
            m->n_t, s.n_elements, s.bytes, bpw(s.bytes, s.n_elements));
    fprintf(o, "2-D only:   %zu tensors, %" PRIu64 " elements, %" PRIu64
               " bytes, %.4f bits/weight\n",
            s.n_2d, s.n_elements_2d, s.bytes_2d, bpw(s.bytes_2d, s.n_elements_2d));
    insp_gptq g = gptq_of(m);
    if (g.n_modules) {
        fprintf(o, "GPTQ:       %zu quantized modules, %" PRIu64 " weights in %" PRIu64
                   " bytes (qweight + qzeros + scales + g_idx): %.4f bits/weight\n",
                g.n_modules, g.weights, g.bytes, bpw(g.bytes, g.weights));
        fprintf(o, "effective:  %" PRIu64 " weights (quantized modules counted by their "
                   "weights, not int32 words): %.4f bits/weight\n",
                g.eff_elements, bpw(g.eff_bytes, g.eff_elements));
    }
}

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit inspect FILE [--no-metadata] [--json]\n\n"
            "Show a model file's tensors (name, type, shape, bytes, bits per\n"
            "weight), totals and metadata. FILE: a GGUF file, a .safetensors\n"
            "file, a model.safetensors.index.json or a Hugging Face directory\n"
            "(its safetensors shards together; metadata = __metadata__).\n\n"
            "  --no-metadata  leave the metadata out\n"
            "  --json         one JSON object: format, path, version, alignment,\n"
            "                 file_size, metadata {key: value}, tensors [{name, type,\n"
            "                 shape, n_elements, bytes, bpw}], n_tensors, n_elements,\n"
            "                 total_bytes, bpw, and the same totals over 2-D tensors\n"
            "                 (n_tensors_2d, n_elements_2d, total_bytes_2d, bpw_2d)\n\n"
            "Shapes are outermost-first ([rows, cols]; GGUF's ne[] reversed).\n"
            "bpw = 8 * bytes / elements. Arrays longer than %d elements are shown\n"
            "as \"[TYPE x N]\"; strings are cut to %d bytes (%d in JSON).\n",
            ARRAY_SHOW_MAX, TEXT_STR_MAX, JSON_STR_MAX);
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool want_meta = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--no-metadata")) {
            want_meta = false;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        } else if (path) {
            return cli_usage_error("inspect", "one FILE only (got '%s' and '%s')",
                                   path, argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path) return cli_usage_error("inspect", "missing FILE");
    insp_model m;
    lb_status st = insp_open(path, want_meta, &m);
    if (st != LB_OK) {
        insp_free(&m);
        return cli_fail("inspect", st);
    }
    if (g_cli.json)
        print_json(&m, want_meta);
    else
        print_text(&m, want_meta);
    insp_free(&m);
    return fflush(stdout) == 0 ? 0 : 1;
}
