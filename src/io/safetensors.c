/*
 * safetensors reader (mmap, single file and sharded index) and streaming
 * writer (atomic, optional sharding). Format: huggingface/safetensors
 * README "Format"; index layout: transformers' save_pretrained
 * (modeling_utils.py, transformers 5.12). See lowbit/safetensors.h.
 */
#include "lowbit/safetensors.h"
#include "lowbit/file.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ST_MAX_INDEX_BYTES ((size_t)256 * 1024 * 1024)
#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: larger doubles lose integers */

/* ------------------------------------------------------------------------ */
/* dtype table                                                               */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *name;
    lb_type type;
} st_dtypes[] = {
    {"F64", LB_TYPE_F64}, {"F32", LB_TYPE_F32}, {"F16", LB_TYPE_F16},
    {"BF16", LB_TYPE_BF16}, {"I64", LB_TYPE_I64}, {"I32", LB_TYPE_I32},
    {"I16", LB_TYPE_I16}, {"I8", LB_TYPE_I8}, {"U8", LB_TYPE_U8},
    {"BOOL", LB_TYPE_BOOL}, {"F8_E4M3", LB_TYPE_F8_E4M3}, {"F8_E5M2", LB_TYPE_F8_E5M2},
};

const char *lb_st_dtype_name(lb_type t) {
    for (size_t i = 0; i < LB_ARRAY_LEN(st_dtypes); i++)
        if (st_dtypes[i].type == t) return st_dtypes[i].name;
    return NULL;
}

int lb_st_dtype_from_name(const char *dtype) {
    for (size_t i = 0; i < LB_ARRAY_LEN(st_dtypes); i++)
        if (strcmp(st_dtypes[i].name, dtype) == 0) return (int)st_dtypes[i].type;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Reader                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct st_entry {
    lb_tensor t;    /* t.name points to the owned name          */
    char *name;
    size_t shard;   /* index into st->files                     */
    size_t order;   /* insertion order (stable sort tie-break)  */
    uint64_t begin, end;
} st_entry;

typedef struct st_meta {
    char *key, *value;
    size_t order;
} st_meta;

struct lb_safetensors {
    st_entry *ents;
    size_t n, cap;
    st_meta *meta;
    size_t n_meta, cap_meta;
    lb_mapped_file *maps; /* n_files mappings (none for lb_st_parse) */
    char **files;         /* n_files labels/paths (owned)            */
    size_t n_files;
};

static lb_status st_push_entry(lb_safetensors *st, st_entry *e) {
    if (st->n == st->cap) {
        size_t nc = st->cap ? st->cap * 2 : 64;
        st_entry *ne = realloc(st->ents, nc * sizeof *ne);
        if (!ne) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
        st->ents = ne;
        st->cap = nc;
    }
    e->order = st->n;
    st->ents[st->n++] = *e;
    return LB_OK;
}

static lb_status st_push_meta(lb_safetensors *st, const char *k,
                              const char *v) {
    if (st->n_meta == st->cap_meta) {
        size_t nc = st->cap_meta ? st->cap_meta * 2 : 8;
        st_meta *nm = realloc(st->meta, nc * sizeof *nm);
        if (!nm) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
        st->meta = nm;
        st->cap_meta = nc;
    }
    st_meta *m = &st->meta[st->n_meta];
    m->key = lb_strdup(k);
    m->value = lb_strdup(v);
    m->order = st->n_meta;
    if (!m->key || !m->value) {
        free(m->key);
        free(m->value);
        return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    }
    st->n_meta++;
    return LB_OK;
}

static lb_status st_add_file(lb_safetensors *st, const char *label,
                             size_t *idx) {
    char **nf = realloc(st->files, (st->n_files + 1) * sizeof *nf);
    if (!nf) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    st->files = nf;
    lb_mapped_file *nm = realloc(st->maps, (st->n_files + 1) * sizeof *nm);
    if (!nm) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    st->maps = nm;
    memset(&st->maps[st->n_files], 0, sizeof *nm);
    st->files[st->n_files] = lb_strdup(label);
    if (!st->files[st->n_files])
        return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    *idx = st->n_files++;
    return LB_OK;
}

void lb_st_close(lb_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) free(st->ents[i].name);
    free(st->ents);
    for (size_t i = 0; i < st->n_meta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->meta);
    for (size_t i = 0; i < st->n_files; i++) {
        lb_unmap_file(&st->maps[i]);
        free(st->files[i]);
    }
    free(st->maps);
    free(st->files);
    free(st);
}

/* A JSON number that must be a non-negative integer below 2^53. */
static bool st_json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d >= ST_MAX_EXACT || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

typedef struct span {
    uint64_t begin, end;
    size_t ent;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* Parse one tensor entry of the header. */
static lb_status st_parse_entry(lb_safetensors *st, const cJSON *item,
                                const char *label, size_t shard,
                                const uint8_t *data_area, uint64_t data_size) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': entry is not a JSON object",
                            label, name);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(jd) || !jd->valuestring)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': missing or non-string 'dtype'",
                            label, name);
    int type = lb_st_dtype_from_name(jd->valuestring);
    if (type < 0)
        return lb_set_error(LB_ERR_UNSUPPORTED,
                            "%s: tensor '%s': unsupported dtype '%s'", label,
                            name, jd->valuestring);
    if (!cJSON_IsArray(js))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': missing or non-array 'shape'",
                            label, name);
    int nd = cJSON_GetArraySize(js);
    if (nd > LB_MAX_DIMS)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': %d dims (lowbit supports at most "
                            "%d)",
                            label, name, nd, LB_MAX_DIMS);
    st_entry e;
    memset(&e, 0, sizeof e);
    e.t.type = (lb_type)type;
    e.t.n_dims = nd;
    size_t nel = 1;
    bool overflow = false;
    int d = 0;
    for (const cJSON *x = js->child; x; x = x->next, d++) {
        uint64_t v;
        if (!st_json_uint(x, &v))
            return lb_set_error(LB_ERR_FORMAT,
                                "%s: tensor '%s': shape[%d] is not a "
                                "non-negative integer",
                                label, name, d);
        e.t.shape[d] = (int64_t)v;
        if (!lb_mul_ok(nel, (size_t)v, &nel)) overflow = true;
    }
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': 'data_offsets' must be an array "
                            "of 2 integers",
                            label, name);
    if (!st_json_uint(jo->child, &e.begin) ||
        !st_json_uint(jo->child->next, &e.end))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets are not "
                            "non-negative integers",
                            label, name);
    if (e.begin > e.end || e.end > data_size)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] "
                            "outside the data area of %llu bytes",
                            label, name, (unsigned long long)e.begin,
                            (unsigned long long)e.end,
                            (unsigned long long)data_size);
    size_t want;
    const lb_type_traits *tr = lb_type_get_traits(type);
    if (overflow || !lb_mul_ok(nel, (size_t)tr->type_size, &want))
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': shape size overflows", label,
                            name);
    if ((uint64_t)want != e.end - e.begin)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: tensor '%s': %s shape needs %zu bytes but "
                            "data_offsets span %llu",
                            label, name, jd->valuestring, want,
                            (unsigned long long)(e.end - e.begin));
    e.name = lb_strdup(name);
    if (!e.name) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    e.t.name = e.name;
    e.t.data = data_area ? data_area + e.begin : NULL;
    e.t.nbytes = want;
    e.shard = shard;
    lb_status s = st_push_entry(st, &e);
    if (s != LB_OK) free(e.name);
    return s;
}

/* Parse the whole image of one file (header + data) and append its entries
 * and metadata to st. */
static lb_status st_parse_image(lb_safetensors *st, const uint8_t *data,
                                size_t size, const char *label, size_t shard) {
    if (size < 8)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: truncated: %zu bytes, a safetensors file "
                            "needs at least 8",
                            label, size);
    uint64_t hlen = lb_rd_u64(data);
    if (hlen > size - 8)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: header length %llu goes beyond the file size "
                            "%zu",
                            label, (unsigned long long)hlen, size);
    if (hlen > LB_ST_MAX_HEADER)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: header length %llu exceeds the %zu-byte limit",
                            label, (unsigned long long)hlen, LB_ST_MAX_HEADER);
    const char *hdr = (const char *)data + 8;
    if (hlen < 2 || hdr[0] != '{')
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: header is not a JSON object", label);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root)
        return lb_set_error(LB_ERR_FORMAT,
                            "%s: header is not valid JSON (error near byte "
                            "%lld)",
                            label,
                            (long long)(cJSON_GetErrorPtr()
                                            ? cJSON_GetErrorPtr() - hdr
                                            : -1));
    lb_status s = LB_OK;
    if (!cJSON_IsObject(root)) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: header is not a JSON object",
                         label);
        goto done;
    }
    /* Only whitespace may follow the object (writers pad with spaces). */
    for (const char *p = end; p && p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            s = lb_set_error(LB_ERR_FORMAT,
                             "%s: trailing bytes after the header JSON object",
                             label);
            goto done;
        }
    const uint8_t *data_area = data + 8 + hlen;
    uint64_t data_size = (uint64_t)(size - 8 - hlen);
    size_t first = st->n;
    bool seen_meta = false;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!it->string) {
            s = lb_set_error(LB_ERR_FORMAT, "%s: header entry without a key",
                             label);
            goto done;
        }
        if (strcmp(it->string, "__metadata__") == 0) {
            if (seen_meta) {
                s = lb_set_error(LB_ERR_FORMAT,
                                 "%s: duplicate __metadata__", label);
                goto done;
            }
            seen_meta = true;
            if (cJSON_IsNull(it)) continue;
            if (!cJSON_IsObject(it)) {
                s = lb_set_error(LB_ERR_FORMAT,
                                 "%s: __metadata__ is not an object", label);
                goto done;
            }
            for (const cJSON *m = it->child; m; m = m->next) {
                if (!m->string || !cJSON_IsString(m) || !m->valuestring) {
                    s = lb_set_error(LB_ERR_FORMAT,
                                     "%s: __metadata__ '%s' is not a string",
                                     label, m->string ? m->string : "?");
                    goto done;
                }
                if ((s = st_push_meta(st, m->string, m->valuestring)) != LB_OK)
                    goto done;
            }
            continue;
        }
        s = st_parse_entry(st, it, label, shard, data_area, data_size);
        if (s != LB_OK) goto done;
    }
    /* Overlap check among this file's tensors (sorted by begin). */
    size_t cnt = st->n - first;
    if (cnt > 1) {
        span *sp = malloc(cnt * sizeof *sp);
        if (!sp) {
            s = lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
            goto done;
        }
        for (size_t i = 0; i < cnt; i++) {
            sp[i].begin = st->ents[first + i].begin;
            sp[i].end = st->ents[first + i].end;
            sp[i].ent = first + i;
        }
        qsort(sp, cnt, sizeof *sp, span_cmp);
        /* cover: the non-empty span seen so far that reaches furthest */
        size_t cover = SIZE_MAX;
        for (size_t i = 0; i < cnt && s == LB_OK; i++) {
            if (sp[i].end == sp[i].begin) continue; /* empty: no bytes */
            if (cover != SIZE_MAX && sp[i].begin < sp[cover].end)
                s = lb_set_error(LB_ERR_FORMAT,
                                 "%s: tensors '%s' [%llu, %llu) and '%s' "
                                 "[%llu, %llu) overlap",
                                 label, st->ents[sp[cover].ent].name,
                                 (unsigned long long)sp[cover].begin,
                                 (unsigned long long)sp[cover].end,
                                 st->ents[sp[i].ent].name,
                                 (unsigned long long)sp[i].begin,
                                 (unsigned long long)sp[i].end);
            if (cover == SIZE_MAX || sp[i].end > sp[cover].end) cover = i;
        }
        free(sp);
    }
done:
    cJSON_Delete(root);
    return s;
}

static int ent_cmp(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int meta_cmp(const void *a, const void *b) {
    const st_meta *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Sort tensors and metadata, reject duplicate tensor names, keep the first
 * metadata value per key. */
static lb_status st_finish(lb_safetensors *st) {
    if (st->n > 1) qsort(st->ents, st->n, sizeof *st->ents, ent_cmp);
    for (size_t i = 1; i < st->n; i++)
        if (strcmp(st->ents[i].name, st->ents[i - 1].name) == 0) {
            if (st->ents[i].shard == st->ents[i - 1].shard)
                return lb_set_error(LB_ERR_FORMAT,
                                    "%s: duplicate tensor name '%s'",
                                    st->files[st->ents[i].shard],
                                    st->ents[i].name);
            return lb_set_error(LB_ERR_FORMAT,
                                "duplicate tensor name '%s' in %s and %s",
                                st->ents[i].name,
                                st->files[st->ents[i - 1].shard],
                                st->files[st->ents[i].shard]);
        }
    /* Entries moved: re-point names (they are heap strings, still valid). */
    for (size_t i = 0; i < st->n; i++) st->ents[i].t.name = st->ents[i].name;
    if (st->n_meta > 1) {
        qsort(st->meta, st->n_meta, sizeof *st->meta, meta_cmp);
        size_t w = 1;
        for (size_t i = 1; i < st->n_meta; i++) {
            if (strcmp(st->meta[i].key, st->meta[w - 1].key) == 0) {
                free(st->meta[i].key);
                free(st->meta[i].value);
            } else {
                st->meta[w++] = st->meta[i];
            }
        }
        st->n_meta = w;
    }
    return LB_OK;
}

lb_status lb_st_parse(const void *data, size_t size, const char *label,
                      lb_safetensors **out) {
    *out = NULL;
    if (!label) label = "<memory>";
    lb_safetensors *st = calloc(1, sizeof *st);
    if (!st) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    size_t idx;
    lb_status s = st_add_file(st, label, &idx);
    if (s == LB_OK) s = st_parse_image(st, data, size, label, idx);
    if (s == LB_OK) s = st_finish(st);
    if (s != LB_OK) {
        lb_st_close(st);
        return s;
    }
    *out = st;
    return LB_OK;
}

/* Map and parse one file as shard `idx`. */
static lb_status st_load_file(lb_safetensors *st, const char *path) {
    size_t idx;
    LB_TRY(st_add_file(st, path, &idx));
    LB_TRY(lb_map_file(path, &st->maps[idx]));
    return st_parse_image(st, st->maps[idx].data, st->maps[idx].size, path,
                          idx);
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool st_tail_is(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static lb_status st_load_index(lb_safetensors *st, const char *index_path) {
    char *text = NULL;
    size_t len = 0;
    LB_TRY(lb_read_file(index_path, ST_MAX_INDEX_BYTES, &text, &len));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root)
        return lb_set_error(LB_ERR_FORMAT, "%s: not valid JSON", index_path);
    lb_status s = LB_OK;
    char *dir = NULL;
    char **names = NULL;
    size_t n_names = 0;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        s = lb_set_error(LB_ERR_FORMAT, "%s: missing object 'weight_map'",
                         index_path);
        goto done;
    }
    /* Directory of the index. */
    dir = lb_strdup(index_path);
    if (!dir) {
        s = lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
        goto done;
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    else
        strcpy(dir, ".");
    size_t n_map = (size_t)cJSON_GetArraySize(wm);
    names = calloc(n_map ? n_map : 1, sizeof *names);
    if (!names) {
        s = lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
        goto done;
    }
    for (const cJSON *it = wm->child; it; it = it->next) {
        if (!cJSON_IsString(it) || !it->valuestring || !it->string) {
            s = lb_set_error(LB_ERR_FORMAT,
                             "%s: weight_map entry '%s' is not a string",
                             index_path, it->string ? it->string : "?");
            goto done;
        }
        const char *f = it->valuestring;
        if (!f[0] || strchr(f, '/') || strcmp(f, "..") == 0 ||
            strcmp(f, ".") == 0) {
            s = lb_set_error(LB_ERR_FORMAT,
                             "%s: tensor '%s': bad shard file name '%s'",
                             index_path, it->string, f);
            goto done;
        }
        names[n_names++] = it->valuestring;
    }
    qsort(names, n_names, sizeof *names, str_cmp);
    size_t u = 0;
    for (size_t i = 0; i < n_names; i++)
        if (u == 0 || strcmp(names[i], names[u - 1]) != 0) names[u++] = names[i];
    n_names = u;
    for (size_t i = 0; i < n_names; i++) {
        char *p = lb_path_join(dir, names[i]);
        if (!p) {
            s = lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
            goto done;
        }
        if (!lb_is_file(p)) {
            s = lb_set_error(LB_ERR_NOT_FOUND,
                             "%s: shard '%s' named in the weight_map is "
                             "missing (%s)",
                             index_path, names[i], p);
            free(p);
            goto done;
        }
        s = st_load_file(st, p);
        free(p);
        if (s != LB_OK) goto done;
    }
    if ((s = st_finish(st)) != LB_OK) goto done;
    /* Every weight_map entry must be in the shard it names. */
    for (const cJSON *it = wm->child; it; it = it->next) {
        const lb_tensor *t = lb_st_find(st, it->string);
        const char *file = t ? lb_st_tensor_file(st, t) : NULL;
        if (!t || !st_tail_is(file, it->valuestring) ||
            (strlen(file) > strlen(it->valuestring) &&
             file[strlen(file) - strlen(it->valuestring) - 1] != '/')) {
            s = lb_set_error(LB_ERR_FORMAT,
                             "%s: tensor '%s' is mapped to shard '%s', which "
                             "does not contain it",
                             index_path, it->string, it->valuestring);
            goto done;
        }
    }
done:
    free(names);
    free(dir);
    cJSON_Delete(root);
    return s;
}

lb_status lb_st_open(const char *path, lb_safetensors **out) {
    *out = NULL;
    lb_safetensors *st = calloc(1, sizeof *st);
    if (!st) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    lb_status s;
    if (lb_is_dir(path)) {
        char *idx = lb_path_join(path, "model.safetensors.index.json");
        char *one = lb_path_join(path, "model.safetensors");
        if (!idx || !one)
            s = lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
        else if (lb_is_file(idx))
            s = st_load_index(st, idx); /* finishes itself */
        else if (lb_is_file(one)) {
            s = st_load_file(st, one);
            if (s == LB_OK) s = st_finish(st);
        } else
            s = lb_set_error(LB_ERR_NOT_FOUND,
                             "%s: no model.safetensors or "
                             "model.safetensors.index.json",
                             path);
        free(idx);
        free(one);
    } else if (!lb_is_file(path)) {
        s = lb_set_error(LB_ERR_NOT_FOUND, "%s: no such file", path);
    } else if (st_tail_is(path, ".json")) {
        s = st_load_index(st, path);
    } else {
        s = st_load_file(st, path);
        if (s == LB_OK) s = st_finish(st);
    }
    if (s != LB_OK) {
        lb_st_close(st);
        return s;
    }
    *out = st;
    return LB_OK;
}

size_t lb_st_count(const lb_safetensors *st) { return st ? st->n : 0; }

const lb_tensor *lb_st_tensor_at(const lb_safetensors *st, size_t i) {
    return st && i < st->n ? &st->ents[i].t : NULL;
}

const lb_tensor *lb_st_find(const lb_safetensors *st, const char *name) {
    if (!st || !name) return NULL;
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->ents[mid].name, name);
        if (c == 0) return &st->ents[mid].t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *lb_st_tensor_file(const lb_safetensors *st, const lb_tensor *t) {
    if (!st || !t || st->n == 0) return NULL;
    const st_entry *e = (const st_entry *)(const void *)t; /* t is first */
    if (e < st->ents || e >= st->ents + st->n) return NULL;
    return st->files[e->shard];
}

const char *lb_st_metadata(const lb_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

size_t lb_st_metadata_count(const lb_safetensors *st) {
    return st ? st->n_meta : 0;
}

bool lb_st_metadata_at(const lb_safetensors *st, size_t i, const char **key,
                       const char **value) {
    if (!st || i >= st->n_meta) return false;
    if (key) *key = st->meta[i].key;
    if (value) *value = st->meta[i].value;
    return true;
}

size_t lb_st_shard_count(const lb_safetensors *st) {
    if (!st) return 0;
    size_t n = 0;
    for (size_t i = 0; i < st->n_files; i++) n += st->maps[i].path != NULL;
    return n;
}

void lb_st_release(const lb_safetensors *st, const lb_tensor *t) {
    if (!st || !t) return;
    for (size_t k = 0; k < st->n_files; k++)
        lb_mapped_file_release(&st->maps[k], t->data, t->nbytes);
}

const lb_mapped_file *lb_st_shard_mapping(const lb_safetensors *st, size_t i) {
    if (!st) return NULL;
    for (size_t k = 0; k < st->n_files; k++)
        if (st->maps[k].path && i-- == 0) return &st->maps[k];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct wr_entry {
    char *name;
    lb_type type;
    int n_dims;
    int64_t shape[LB_MAX_DIMS];
    size_t nbytes;
    const void *data;
    lb_st_produce_fn fn;
    void *user;
} wr_entry;

struct lb_st_writer {
    wr_entry *e;
    size_t n, cap;
    char **mk, **mv;
    size_t nm;
};

struct lb_st_sink {
    lb_atomic_file *af;
    size_t remaining;
    const char *name;
};

lb_status lb_st_sink_write(lb_st_sink *sink, const void *data, size_t n) {
    if (n > sink->remaining)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "safetensors writer: producer of '%s' wrote more "
                            "than the tensor's size",
                            sink->name);
    sink->remaining -= n;
    return lb_atomic_write(sink->af, data, n);
}

lb_status lb_st_writer_create(lb_st_writer **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    return LB_OK;
}

void lb_st_writer_free(lb_st_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    for (size_t i = 0; i < w->nm; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->mk);
    free(w->mv);
    free(w);
}

lb_status lb_st_writer_set_metadata(lb_st_writer *w, const char *key,
                                    const char *value) {
    if (!key || !value)
        return lb_set_error(LB_ERR_INVALID_ARG, "safetensors writer: NULL key");
    char *v = lb_strdup(value);
    if (!v) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    for (size_t i = 0; i < w->nm; i++)
        if (strcmp(w->mk[i], key) == 0) {
            free(w->mv[i]);
            w->mv[i] = v;
            return LB_OK;
        }
    char *k = lb_strdup(key);
    char **nk = realloc(w->mk, (w->nm + 1) * sizeof *nk);
    if (nk) w->mk = nk;
    char **nv = nk ? realloc(w->mv, (w->nm + 1) * sizeof *nv) : NULL;
    if (nv) w->mv = nv;
    if (!k || !nk || !nv) {
        free(k);
        free(v);
        return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    }
    w->mk[w->nm] = k;
    w->mv[w->nm] = v;
    w->nm++;
    return LB_OK;
}

static lb_status wr_add(lb_st_writer *w, const char *name, lb_type type,
                        int n_dims, const int64_t *shape, const void *data,
                        lb_st_produce_fn fn, void *user) {
    if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "safetensors writer: invalid tensor name '%s'",
                            name ? name : "(null)");
    const lb_type_traits *tr = lb_type_get_traits((int)type);
    if (!tr || !lb_st_dtype_name(type))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "safetensors writer: tensor '%s': type %s has no "
                            "safetensors dtype",
                            name, lb_type_name((int)type));
    if (n_dims < 0 || n_dims > LB_MAX_DIMS || (n_dims > 0 && !shape))
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "safetensors writer: tensor '%s': bad n_dims %d",
                            name, n_dims);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "safetensors writer: duplicate tensor '%s'",
                                name);
    wr_entry e;
    memset(&e, 0, sizeof e);
    size_t nel = 1;
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0)
            return lb_set_error(LB_ERR_INVALID_ARG,
                                "safetensors writer: tensor '%s': negative "
                                "dim",
                                name);
        if (!lb_mul_ok(nel, (size_t)shape[i], &nel))
            return lb_set_error(LB_ERR_OVERFLOW,
                                "safetensors writer: tensor '%s': size "
                                "overflows",
                                name);
        e.shape[i] = shape[i];
    }
    if (!lb_mul_ok(nel, (size_t)tr->type_size, &e.nbytes))
        return lb_set_error(LB_ERR_OVERFLOW,
                            "safetensors writer: tensor '%s': size overflows",
                            name);
    if (e.nbytes > 0 && !data && !fn)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "safetensors writer: tensor '%s': no data", name);
    e.type = type;
    e.n_dims = n_dims;
    e.data = data;
    e.fn = fn;
    e.user = user;
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 32;
        wr_entry *ne = realloc(w->e, nc * sizeof *ne);
        if (!ne) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
        w->e = ne;
        w->cap = nc;
    }
    e.name = lb_strdup(name);
    if (!e.name) return lb_set_error(LB_ERR_NOMEM, "safetensors: out of memory");
    w->e[w->n++] = e;
    return LB_OK;
}

lb_status lb_st_writer_add(lb_st_writer *w, const char *name, lb_type type,
                           int n_dims, const int64_t *shape, const void *data) {
    return wr_add(w, name, type, n_dims, shape, data, NULL, NULL);
}

lb_status lb_st_writer_add_fn(lb_st_writer *w, const char *name, lb_type type,
                              int n_dims, const int64_t *shape,
                              lb_st_produce_fn fn, void *user) {
    if (!fn)
        return lb_set_error(LB_ERR_INVALID_ARG,
                            "safetensors writer: tensor '%s': NULL producer",
                            name ? name : "(null)");
    return wr_add(w, name, type, n_dims, shape, NULL, fn, user);
}

/* A growable string for building JSON. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}
static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_fmt_u64(sbuf *b, uint64_t v) {
    char t[32];
    int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_put(b, t, (size_t)n);
}
/* JSON string literal (UTF-8 passed through, controls escaped). */
static void sb_json(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char e[2] = {'\\', (char)*c};
            sb_put(b, e, 2);
        } else if (*c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", *c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Write entries [b, e) as one safetensors file into an opened atomic file. */
static lb_status wr_file(lb_st_writer *w, size_t b, size_t e,
                         lb_atomic_file *af) {
    sbuf h = {0};
    sb_str(&h, "{");
    bool first = true;
    if (w->nm) {
        sb_str(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->nm; i++) {
            if (i) sb_str(&h, ",");
            sb_json(&h, w->mk[i]);
            sb_str(&h, ":");
            sb_json(&h, w->mv[i]);
        }
        sb_str(&h, "}");
        first = false;
    }
    uint64_t off = 0;
    for (size_t i = b; i < e; i++) {
        const wr_entry *x = &w->e[i];
        if (!first) sb_str(&h, ",");
        first = false;
        sb_json(&h, x->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, lb_st_dtype_name(x->type));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < x->n_dims; d++) {
            if (d) sb_str(&h, ",");
            sb_fmt_u64(&h, (uint64_t)x->shape[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_fmt_u64(&h, off);
        sb_str(&h, ",");
        off += x->nbytes;
        sb_fmt_u64(&h, off);
        sb_str(&h, "]}");
    }
    sb_str(&h, "}");
    while (!h.oom && (8 + h.len) % 8) sb_str(&h, " ");
    if (h.oom) {
        free(h.p);
        return lb_set_error(LB_ERR_NOMEM, "safetensors writer: out of memory");
    }
    uint8_t n8[8]; /* u64 little-endian header length */
    for (int i = 0; i < 8; i++) n8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    lb_status s = lb_atomic_write(af, n8, 8);
    if (s == LB_OK) s = lb_atomic_write(af, h.p, h.len);
    free(h.p);
    for (size_t i = b; i < e && s == LB_OK; i++) {
        const wr_entry *x = &w->e[i];
        if (!x->fn) {
            if (x->nbytes) s = lb_atomic_write(af, x->data, x->nbytes);
            continue;
        }
        lb_st_sink sink = {af, x->nbytes, x->name};
        s = x->fn(x->user, x->name, &sink, x->nbytes);
        if (s != LB_OK)
            s = lb_error_context(s, "safetensors writer: tensor '%s'", x->name);
        else if (sink.remaining)
            s = lb_set_error(LB_ERR_INVALID_ARG,
                             "safetensors writer: producer of '%s' wrote %zu "
                             "of %zu bytes",
                             x->name, x->nbytes - sink.remaining, x->nbytes);
    }
    return s;
}

lb_status lb_st_writer_write_file(lb_st_writer *w, const char *path) {
    lb_atomic_file af;
    LB_TRY(lb_atomic_open(path, &af));
    lb_status s = wr_file(w, 0, w->n, &af);
    if (s != LB_OK) {
        lb_atomic_abort(&af);
        return s;
    }
    return lb_atomic_commit(&af);
}

static int cstr_ptr_cmp(const void *a, const void *b) {
    const wr_entry *x = *(const wr_entry *const *)a;
    const wr_entry *y = *(const wr_entry *const *)b;
    return strcmp(x->name, y->name);
}

lb_status lb_st_writer_write_dir(lb_st_writer *w, const char *dir,
                                 uint64_t max_shard_bytes, int *n_shards_out) {
    if (n_shards_out) *n_shards_out = 0;
    if (!lb_is_dir(dir))
        return lb_set_error(LB_ERR_IO, "%s: not a directory", dir);
    /* Plan: shard of each entry. */
    size_t *shard_begin = malloc((w->n + 2) * sizeof *shard_begin);
    if (!shard_begin)
        return lb_set_error(LB_ERR_NOMEM, "safetensors writer: out of memory");
    size_t n_sh = 0;
    uint64_t cur = 0, total = 0;
    shard_begin[n_sh++] = 0;
    for (size_t i = 0; i < w->n; i++) {
        uint64_t nb = w->e[i].nbytes;
        if (max_shard_bytes && i > shard_begin[n_sh - 1] &&
            cur + nb > max_shard_bytes) {
            shard_begin[n_sh++] = i;
            cur = 0;
        }
        cur += nb;
        total += nb;
    }
    shard_begin[n_sh] = w->n;
    lb_status s = LB_OK;
    if (n_sh == 1) {
        char *p = lb_path_join(dir, "model.safetensors");
        char *ip = lb_path_join(dir, "model.safetensors.index.json");
        if (!p || !ip)
            s = lb_set_error(LB_ERR_NOMEM, "safetensors writer: out of memory");
        else
            s = lb_st_writer_write_file(w, p);
        if (s == LB_OK && lb_is_file(ip)) unlink(ip); /* stale index */
        free(p);
        free(ip);
        free(shard_begin);
        if (s == LB_OK && n_shards_out) *n_shards_out = 1;
        return s;
    }
    lb_atomic_file *af = calloc(n_sh + 1, sizeof *af);
    char **final = calloc(n_sh + 1, sizeof *final);
    char **fname = calloc(n_sh, sizeof *fname);
    const wr_entry **sorted = malloc((w->n ? w->n : 1) * sizeof *sorted);
    size_t *shard_of = malloc((w->n ? w->n : 1) * sizeof *shard_of);
    size_t opened = 0, committed = 0;
    if (!af || !final || !fname || !sorted || !shard_of) {
        s = lb_set_error(LB_ERR_NOMEM, "safetensors writer: out of memory");
        goto done;
    }
    for (size_t k = 0; k < n_sh && s == LB_OK; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "model-%05zu-of-%05zu.safetensors", k + 1,
                 n_sh);
        fname[k] = lb_strdup(nm);
        final[k] = lb_path_join(dir, nm);
        if (!fname[k] || !final[k]) {
            s = lb_set_error(LB_ERR_NOMEM, "safetensors writer: out of memory");
            break;
        }
        if ((s = lb_atomic_open(final[k], &af[k])) != LB_OK) break;
        opened = k + 1;
        s = wr_file(w, shard_begin[k], shard_begin[k + 1], &af[k]);
    }
    if (s != LB_OK) goto done;
    /* Index JSON (weight_map sorted by tensor name, as transformers). */
    for (size_t k = 0; k < n_sh; k++)
        for (size_t i = shard_begin[k]; i < shard_begin[k + 1]; i++)
            shard_of[i] = k;
    for (size_t i = 0; i < w->n; i++) sorted[i] = &w->e[i];
    qsort(sorted, w->n, sizeof *sorted, cstr_ptr_cmp);
    sbuf j = {0};
    sb_str(&j, "{\n  \"metadata\": {\n    \"total_size\": ");
    sb_fmt_u64(&j, total);
    sb_str(&j, "\n  },\n  \"weight_map\": {");
    for (size_t i = 0; i < w->n; i++) {
        sb_str(&j, i ? ",\n    " : "\n    ");
        sb_json(&j, sorted[i]->name);
        sb_str(&j, ": ");
        sb_json(&j, fname[shard_of[sorted[i] - w->e]]);
    }
    sb_str(&j, "\n  }\n}\n");
    if (j.oom) {
        free(j.p);
        s = lb_set_error(LB_ERR_NOMEM, "safetensors writer: out of memory");
        goto done;
    }
    final[n_sh] = lb_path_join(dir, "model.safetensors.index.json");
    if (!final[n_sh]) {
        free(j.p);
        s = lb_set_error(LB_ERR_NOMEM, "safetensors writer: out of memory");
        goto done;
    }
    s = lb_atomic_open(final[n_sh], &af[n_sh]);
    if (s == LB_OK) {
        opened = n_sh + 1;
        s = lb_atomic_write(&af[n_sh], j.p, j.len);
    }
    free(j.p);
    if (s != LB_OK) goto done;
    /* Everything is written: rename into place, the index last. */
    for (size_t k = 0; k <= n_sh; k++) {
        s = lb_atomic_commit(&af[k]);
        if (s != LB_OK) break;
        committed = k + 1;
    }
done:
    if (s != LB_OK) {
        for (size_t k = 0; k < opened; k++) {
            if (k < committed)
                unlink(final[k]);
            else
                lb_atomic_abort(&af[k]);
        }
    } else if (n_shards_out) {
        *n_shards_out = (int)n_sh;
    }
    if (s == LB_OK) {
        /* A stale single-file checkpoint would be shadowed by the index
         * anyway; remove it as save_pretrained does. */
        char *one = lb_path_join(dir, "model.safetensors");
        if (one && lb_is_file(one)) unlink(one);
        free(one);
    }
    if (final)
        for (size_t k = 0; k <= n_sh; k++) free(final[k]);
    if (fname)
        for (size_t k = 0; k < n_sh; k++) free(fname[k]);
    free(final);
    free(fname);
    free(af);
    free(sorted);
    free(shard_of);
    free(shard_begin);
    return s;
}
