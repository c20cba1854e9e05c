/*
 * The GGUF cache of a GPTQ checkpoint (lowbit/export.h,
 * lb_export_cached_gguf): CKPT_DIR/lowbit-cache/model.gguf, or a file in the
 * user's cache directory when the checkpoint directory is not writable,
 * keyed by a manifest of the checkpoint's files stored in the GGUF itself
 * (lowbit.source.manifest) and rebuilt atomically when it no longer
 * matches.
 */
#include "lowbit/config.h"
#include "lowbit/export.h"
#include "lowbit/file.h"
#include "lowbit/gguf.h"
#include "core/internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAX_FILES 100000
#define ST_HEADER_MAX ((uint64_t)100 << 20) /* safetensors' own header limit */

static const char *const KEY_MANIFEST = "lowbit.source.manifest";
static const char *const KEY_PATH = "lowbit.source.path";
static const char *const KEY_REQUANT = "lowbit.source.requantized";
static const char NO_CACHE_YET[] = "no cache yet";

/* ---- small helpers ---------------------------------------------------------- */

/* FNV-1a 64 (Fowler, Noll, Vo), as quantize_write.c's calib_fnv1a. */
#define FNV_OFFSET UINT64_C(0xcbf29ce484222325)
static uint64_t fnv1a(const void *data, size_t n, uint64_t h) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* A growing NUL-terminated string. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->s && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap ? b->cap * 2 : 256;
        while (ncap < b->len + (size_t)n + 1) ncap *= 2;
        char *ns = realloc(b->s, ncap);
        if (!ns) {
            b->failed = true;
            return;
        }
        b->s = ns;
        b->cap = ncap;
    }
}

/* A file name as one manifest token: control bytes, space, '%' and DEL as
 * %XX, so that a line splits unambiguously at spaces. */
static void sb_name(sbuf *b, const char *name) {
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p <= 0x20 || *p == '%' || *p == 0x7f) sb_printf(b, "%%%02X", *p);
        else sb_printf(b, "%c", *p);
    }
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && memcmp(s + a - b, suf, b) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* FNV-1a of a whole file, streamed. */
static lb_status hash_file(const char *path, uint64_t *h_out) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return lb_set_error(LB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint64_t h = FNV_OFFSET;
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv1a(buf, n, h);
    bool err = ferror(f) != 0;
    fclose(f);
    if (err) return lb_set_error(LB_ERR_IO, "%s: read error", path);
    *h_out = h;
    return LB_OK;
}

/* FNV-1a of a safetensors header (the 8-byte length and the JSON); *ok
 * false when the file is too short or the length implausible (the manifest
 * then says so; the export itself reports the malformed file). */
static lb_status hash_st_header(const char *path, uint64_t size, uint64_t *h_out,
                                bool *ok) {
    *ok = false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return lb_set_error(LB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char len8[8];
    lb_status s = LB_OK;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t n = lb_rd_u64(len8);
        if (n <= ST_HEADER_MAX && n <= size - 8) {
            char *hdr = malloc(n ? (size_t)n : 1);
            if (!hdr) s = lb_set_error(LB_ERR_NOMEM, "%s: out of memory", path);
            else if (fread(hdr, 1, (size_t)n, f) == (size_t)n) {
                *h_out = fnv1a(hdr, (size_t)n, fnv1a(len8, 8, FNV_OFFSET));
                *ok = true;
            }
            free(hdr);
        }
    }
    if (s == LB_OK && ferror(f)) s = lb_set_error(LB_ERR_IO, "%s: read error", path);
    fclose(f);
    return s;
}

/* ---- manifest ----------------------------------------------------------------- */

lb_status lb_export_cache_manifest(const char *dir, char **manifest_out) {
    if (!manifest_out) return lb_set_error(LB_ERR_INVALID_ARG, "cache manifest: NULL output");
    *manifest_out = NULL;
    if (!dir) return lb_set_error(LB_ERR_INVALID_ARG, "cache manifest: NULL directory");
    DIR *d = opendir(dir);
    if (!d)
        return lb_set_error(LB_ERR_IO, "%s: cannot list the checkpoint directory: %s", dir,
                            strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    lb_status s = LB_OK;
    struct dirent *e;
    while (s == LB_OK && (e = readdir(d))) {
        const char *nm = e->d_name;
        if (!ends_with(nm, ".json") && !ends_with(nm, ".jinja") &&
            !ends_with(nm, ".safetensors"))
            continue;
        if (n == CACHE_MAX_FILES) {
            s = lb_set_error(LB_ERR_RANGE, "%s: more than %d checkpoint files", dir,
                             CACHE_MAX_FILES);
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) {
                s = lb_set_error(LB_ERR_NOMEM, "cache manifest: out of memory");
                break;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = lb_strdup(nm))) s = lb_set_error(LB_ERR_NOMEM, "cache manifest: out of memory");
        else n++;
    }
    closedir(d);
    if (s == LB_OK && n) qsort(names, n, sizeof *names, cmp_str);

    sbuf b = {0};
    sb_printf(&b, "lowbit-export-cache v%d lowbit %s mode auto\n", LB_EXPORT_CACHE_VERSION,
              LB_VERSION_STRING);
    for (size_t i = 0; s == LB_OK && i < n; i++) {
        char *path = lb_path_join(dir, names[i]);
        struct stat st;
        if (!path) {
            s = lb_set_error(LB_ERR_NOMEM, "cache manifest: out of memory");
            break;
        }
        /* stat follows symlinks (Hugging Face hub snapshots link to blobs);
         * dangling links and non-files are not part of the checkpoint */
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            free(path);
            continue;
        }
        uint64_t h = 0;
        sb_printf(&b, "file ");
        sb_name(&b, names[i]);
        if (ends_with(names[i], ".safetensors")) {
            bool ok = false;
            s = hash_st_header(path, (uint64_t)st.st_size, &h, &ok);
            sb_printf(&b, " size %lld mtime %lld.%09ld header-fnv1a64 ", (long long)st.st_size,
                      (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
            if (ok) sb_printf(&b, "%016llx\n", (unsigned long long)h);
            else sb_printf(&b, "malformed\n");
        } else {
            s = hash_file(path, &h);
            sb_printf(&b, " size %lld fnv1a64 %016llx\n", (long long)st.st_size,
                      (unsigned long long)h);
        }
        free(path);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (s == LB_OK && b.failed) s = lb_set_error(LB_ERR_NOMEM, "cache manifest: out of memory");
    if (s != LB_OK) {
        free(b.s);
        return s;
    }
    *manifest_out = b.s;
    return LB_OK;
}

/* The NAME of a "file NAME ..." line (into out), or false. */
static bool line_name(const char *line, size_t len, char *out, size_t size) {
    if (len < 5 || memcmp(line, "file ", 5) != 0) return false;
    const char *p = line + 5, *end = memchr(p, ' ', len - 5);
    size_t k = end ? (size_t)(end - p) : len - 5;
    snprintf(out, size, "%.*s", (int)LB_MIN(k, size - 1), p);
    return true;
}

/* Does `text` have a line equal to / with the same file name as
 * [line, line+len)? 2: equal, 1: same name, 0: none. */
static int find_line(const char *text, const char *line, size_t len) {
    char want[512], got[512];
    bool named = line_name(line, len, want, sizeof want);
    int best = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        if (l == len && memcmp(p, line, len) == 0) return 2;
        if (named && line_name(p, l, got, sizeof got) && !strcmp(got, want)) best = 1;
        p += l + (nl ? 1 : 0);
    }
    return best;
}

/* Why the stored manifest `old` differs from `now`: the files added,
 * changed or removed (at most three named). */
static void explain(const char *old, const char *now, char *why, size_t size) {
    const char *o_nl = strchr(old, '\n'), *n_nl = strchr(now, '\n');
    size_t ol = o_nl ? (size_t)(o_nl - old) : strlen(old),
           nl = n_nl ? (size_t)(n_nl - now) : strlen(now);
    if (ol != nl || memcmp(old, now, ol) != 0) {
        snprintf(why, size, "made by another exporter version (%.*s)", (int)LB_MIN(ol, 120),
                 old);
        return;
    }
    int shown = 0, more = 0;
    size_t w = 0;
    why[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        const char *a = pass ? old : now, *b = pass ? now : old;
        for (const char *p = a; *p;) {
            const char *e = strchr(p, '\n');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            char name[512];
            if (line_name(p, l, name, sizeof name)) {
                int f = find_line(b, p, l);
                const char *what = f == 2 ? NULL
                                   : f == 1 ? (pass ? NULL : "changed")
                                            : (pass ? "removed" : "added");
                if (what && shown < 3) {
                    int k = snprintf(why + w, size - w, "%s%s %s", w ? ", " : "", name, what);
                    if (k > 0) w = LB_MIN(size - 1, w + (size_t)k);
                    shown++;
                } else if (what) {
                    more++;
                }
            }
            p += l + (e ? 1 : 0);
        }
    }
    if (more && w < size) snprintf(why + w, size - w, " (and %d more)", more);
    if (!why[0]) snprintf(why, size, "manifest differs");
}

/* ---- the cache files ---------------------------------------------------------- */

void lb_export_cache_opts_default(lb_export_cache_opts *o) {
    memset(o, 0, sizeof *o);
}

void lb_export_cache_result_free(lb_export_cache_result *r) {
    if (!r) return;
    free(r->path);
    free(r->requantized);
    memset(r, 0, sizeof *r);
}

lb_status lb_export_is_gptq_checkpoint(const char *dir, bool *out) {
    if (!dir || !out) return lb_set_error(LB_ERR_INVALID_ARG, "gptq detect: NULL argument");
    *out = false;
    lb_model_config cfg;
    LB_TRY(lb_model_config_load_dir(dir, &cfg));
    /* the rule of lb_model_load_hf */
    bool g = cfg.has_quantization_config &&
             (!cfg.quant_method[0] || !strcmp(cfg.quant_method, "gptq"));
    if (!cfg.has_quantization_config) {
        char *qc = lb_path_join(dir, "quantize_config.json");
        if (!qc) {
            lb_model_config_clear(&cfg);
            return lb_set_error(LB_ERR_NOMEM, "gptq detect: out of memory");
        }
        g = lb_is_file(qc);
        free(qc);
    }
    lb_model_config_clear(&cfg);
    *out = g;
    return LB_OK;
}

/* Is the file at `path` a GGUF whose manifest equals `manifest`? On false,
 * `why` says why not. On true, *requant gets lowbit.source.requantized
 * (malloc'd, "" when absent) and *n_q4_1 the Q4_1 tensors. Errors only for
 * NOMEM. */
static lb_status cache_check(const char *path, const char *manifest, bool *valid,
                             char *why, size_t why_size, char **requant, int *n_q4_1) {
    *valid = false;
    *requant = NULL;
    *n_q4_1 = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(why, why_size, errno == ENOENT || errno == ENOTDIR ? NO_CACHE_YET
                                                                   : "cannot stat: %s",
                 strerror(errno));
        return LB_OK;
    }
    lb_gguf *g = NULL;
    if (lb_gguf_open(path, &g) != LB_OK) {
        snprintf(why, why_size, "unreadable (%s)", lb_last_error());
        lb_clear_error();
        return LB_OK;
    }
    char *m = NULL;
    if (lb_gguf_get_str_dup(g, KEY_MANIFEST, &m) != LB_OK) {
        snprintf(why, why_size, "no %s key (%s)", KEY_MANIFEST, lb_last_error());
        lb_clear_error();
        lb_gguf_close(g);
        return LB_OK;
    }
    if (strcmp(m, manifest) != 0) {
        explain(m, manifest, why, why_size);
    } else {
        lb_status s = LB_OK;
        if (lb_gguf_find_key(g, KEY_REQUANT) < 0) {
            *requant = lb_strdup("");
        } else if ((s = lb_gguf_get_str_dup(g, KEY_REQUANT, requant)) != LB_OK) {
            snprintf(why, why_size, "bad %s key (%s)", KEY_REQUANT, lb_last_error());
            lb_clear_error();
        }
        if (s == LB_OK && !*requant) {
            free(m);
            lb_gguf_close(g);
            return lb_set_error(LB_ERR_NOMEM, "cache: out of memory");
        }
        *valid = s == LB_OK;
    }
    if (*valid) /* the cache's only Q4_1 tensors are direct GPTQ modules */
        for (int64_t i = 0; i < lb_gguf_n_tensors(g); i++)
            if (lb_gguf_tensor_at(g, i)->type == LB_TYPE_Q4_1) (*n_q4_1)++;
    free(m);
    lb_gguf_close(g);
    return LB_OK;
}

/* mkdir -p with `mode` for the components created. */
static lb_status mkdir_p(const char *path, mode_t mode) {
    char *p = lb_strdup(path);
    if (!p) return lb_set_error(LB_ERR_NOMEM, "cache: out of memory");
    lb_status s = LB_OK;
    for (char *q = p + 1;; q++) {
        if (*q == '/' || *q == '\0') {
            char c = *q;
            *q = '\0';
            if (mkdir(p, mode) != 0 && errno != EEXIST)
                s = lb_set_error(LB_ERR_IO, "%s: cannot create: %s", p, strerror(errno));
            *q = c;
            if (s != LB_OK || c == '\0') break;
        }
    }
    free(p);
    if (s == LB_OK && !lb_is_dir(path))
        s = lb_set_error(LB_ERR_IO, "%s: not a directory", path);
    return s;
}

/* Can we write files into directory `d` (creating it when absent: then
 * *created is set)? */
static bool dir_writable(const char *d, bool *created) {
    *created = false;
    if (mkdir(d, 0755) == 0) *created = true;
    else if (errno != EEXIST) return false;
    return lb_is_dir(d) && access(d, W_OK | X_OK) == 0;
}

/* FALLBACK_DIR/NAME-HASH.gguf for checkpoint real path `real`. */
static lb_status fallback_path(const char *fb_dir_opt, const char *real, char **dir_out,
                               char **path_out) {
    *dir_out = *path_out = NULL;
    char *dir = NULL;
    if (fb_dir_opt) {
        dir = lb_strdup(fb_dir_opt);
    } else {
        /* XDG Base Directory spec: a relative $XDG_CACHE_HOME is ignored */
        const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (x && x[0] == '/') dir = lb_path_join(x, "lowbit");
        else if (home && home[0] == '/') dir = lb_path_join(home, ".cache/lowbit");
        else
            return lb_set_error(LB_ERR_IO, "no user cache directory (neither XDG_CACHE_HOME "
                                           "nor HOME is an absolute path)");
    }
    if (!dir) return lb_set_error(LB_ERR_NOMEM, "cache: out of memory");
    const char *base = strrchr(real, '/');
    base = base && base[1] ? base + 1 : real;
    char name[128];
    size_t k = 0;
    for (const char *p = base; *p && k < 64; p++) {
        unsigned char c = (unsigned char)*p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        name[k++] = ok ? (char)c : '_';
    }
    if (k == 0) name[k++] = '_';
    if (name[0] == '.') name[0] = '_'; /* not hidden, not "." or ".." */
    snprintf(name + k, sizeof name - k, "-%016llx.gguf",
             (unsigned long long)fnv1a(real, strlen(real), FNV_OFFSET));
    char *path = lb_path_join(dir, name);
    if (!path) {
        free(dir);
        return lb_set_error(LB_ERR_NOMEM, "cache: out of memory");
    }
    *dir_out = dir;
    *path_out = path;
    return LB_OK;
}

/* The GPTQ modules of the auto plan that are not copied exactly, and those
 * copied to Q4_1. */
static lb_status requantized_list(const lb_export_plan *p, int *n_out, char **list_out,
                                  int *n_q4_1) {
    sbuf b = {0};
    sb_printf(&b, "%s", "");
    int n = 0;
    *n_q4_1 = 0;
    for (size_t i = 0; i < p->n_tensors; i++) {
        const lb_export_tensor *t = &p->tensors[i];
        if (t->bits > 0 && t->route == LB_EXPORT_ROUTE_DIRECT && t->type == LB_TYPE_Q4_1)
            (*n_q4_1)++;
        if (t->bits <= 0 || t->route == LB_EXPORT_ROUTE_DIRECT) continue;
        sb_printf(&b, "%s%s", n ? ", " : "", t->source);
        n++;
    }
    if (b.failed) {
        free(b.s);
        return lb_set_error(LB_ERR_NOMEM, "cache: out of memory");
    }
    *n_out = n;
    *list_out = b.s;
    return LB_OK;
}

static int count_list(const char *list) {
    if (!list || !list[0]) return 0;
    int n = 1;
    for (const char *p = list; (p = strstr(p, ", ")); p += 2) n++;
    return n;
}

/* Export ckpt_dir to `target` with the cache keys. */
static lb_status cache_build(const char *ckpt_dir, const char *real, const char *manifest,
                             const char *target, const lb_export_cache_opts *o,
                             lb_export_cache_result *r) {
    lb_export_opts eo;
    lb_export_opts_default(&eo);
    eo.n_threads = o->n_threads;
    eo.pool = o->pool;
    eo.progress = o->progress;
    lb_export_plan *plan = NULL;
    LB_TRY(lb_export_plan_make(ckpt_dir, &eo, &plan));
    lb_status s = LB_OK;
    if (!plan->gptq)
        s = lb_set_error(LB_ERR_INVALID_ARG, "%s: not a GPTQ checkpoint", ckpt_dir);
    if (s == LB_OK) s = requantized_list(plan, &r->n_requantized, &r->requantized, &r->n_q4_1);
    lb_export_plan_free(plan);
    if (s != LB_OK) return s;
    const char *meta[] = {KEY_MANIFEST, manifest, KEY_PATH, real, KEY_REQUANT, r->requantized};
    eo.meta_kv = meta;
    eo.n_meta_kv = 3;
    return lb_export_gguf(ckpt_dir, target, &eo, NULL, &r->stats);
}

lb_status lb_export_cached_gguf(const char *ckpt_dir, const lb_export_cache_opts *opts,
                                lb_export_cache_result *out) {
    if (!out) return lb_set_error(LB_ERR_INVALID_ARG, "cache: NULL result");
    memset(out, 0, sizeof *out);
    if (!ckpt_dir) return lb_set_error(LB_ERR_INVALID_ARG, "cache: NULL checkpoint directory");
    lb_export_cache_opts def;
    lb_export_cache_opts_default(&def);
    const lb_export_cache_opts *o = opts ? opts : &def;
    bool gptq = false;
    LB_TRY(lb_export_is_gptq_checkpoint(ckpt_dir, &gptq));
    if (!gptq)
        return lb_set_error(LB_ERR_INVALID_ARG, "%s: not a GPTQ checkpoint (no "
                            "quantization_config with quant_method gptq, no "
                            "quantize_config.json)", ckpt_dir);

    lb_export_cache_result r;
    memset(&r, 0, sizeof r);
    char *manifest = NULL, *real = NULL, *cdir = NULL, *primary = NULL, *fb_dir = NULL,
         *fb = NULL;
    char why[sizeof r.reason] = "";
    bool valid = false, created = false;
    lb_status s = lb_export_cache_manifest(ckpt_dir, &manifest);
    if (s == LB_OK && !(real = realpath(ckpt_dir, NULL)))
        s = lb_set_error(LB_ERR_IO, "%s: %s", ckpt_dir, strerror(errno));
    if (s == LB_OK) {
        cdir = lb_path_join(ckpt_dir, LB_EXPORT_CACHE_SUBDIR);
        primary = cdir ? lb_path_join(cdir, LB_EXPORT_CACHE_FILE) : NULL;
        if (!primary) s = lb_set_error(LB_ERR_NOMEM, "cache: out of memory");
    }
    /* 1. the cache beside the checkpoint */
    if (s == LB_OK) s = cache_check(primary, manifest, &valid, why, sizeof why, &r.requantized,
                                     &r.n_q4_1);
    if (s == LB_OK && valid) {
        r.path = primary;
        primary = NULL;
    }
    /* 2. rebuild it there if we can write there */
    if (s == LB_OK && !valid && dir_writable(cdir, &created)) {
        snprintf(r.reason, sizeof r.reason, "%s", why);
        lb_log(LB_LOG_INFO, "%s: building the GGUF cache %s (%s)", ckpt_dir, primary, why);
        s = cache_build(ckpt_dir, real, manifest, primary, o, &r);
        if (s == LB_OK) {
            r.rebuilt = true;
            r.path = primary;
            primary = NULL;
        } else if (created) {
            (void)rmdir(cdir); /* leave the checkpoint as it was */
        }
        valid = s == LB_OK;
    }
    /* 3. the user cache directory */
    if (s == LB_OK && !valid) {
        char why1[sizeof why];
        snprintf(why1, sizeof why1, "%s", why);
        s = fallback_path(o->fallback_dir, real, &fb_dir, &fb);
        if (s == LB_OK)
            lb_log(LB_LOG_INFO, "%s is not writable: GGUF cache in %s", cdir, fb);
        if (s == LB_OK) s = cache_check(fb, manifest, &valid, why, sizeof why, &r.requantized,
                                         &r.n_q4_1);
        if (s == LB_OK && !valid) {
            /* a first fallback build is due to the checkpoint's own cache */
            if (!strcmp(why, NO_CACHE_YET)) snprintf(why, sizeof why, "%s", why1);
            s = mkdir_p(fb_dir, 0700);
            if (s == LB_OK) {
                snprintf(r.reason, sizeof r.reason, "%s", why);
                lb_log(LB_LOG_INFO, "%s: building the GGUF cache %s (%s)", ckpt_dir, fb, why);
                s = cache_build(ckpt_dir, real, manifest, fb, o, &r);
                r.rebuilt = s == LB_OK;
            }
            if (s != LB_OK && s != LB_ERR_CANCELLED && s != LB_ERR_NOMEM)
                s = lb_error_context(s, "GGUF cache (%s not writable: %s)", cdir, why1);
        }
        if (s == LB_OK) {
            r.fallback = true;
            r.path = fb;
            fb = NULL;
        }
    }
    if (s == LB_OK) {
        if (r.rebuilt)
            lb_log(LB_LOG_INFO, "exported GPTQ checkpoint %s to cache %s (%.1f MB, %.1f s)",
                   ckpt_dir, r.path, (double)r.stats.bytes_out / 1e6, r.stats.seconds);
        else
            lb_log(LB_LOG_INFO, "using cached GGUF %s", r.path);
        if (!r.rebuilt) r.n_requantized = count_list(r.requantized);
        *out = r;
    } else {
        lb_export_cache_result_free(&r);
    }
    free(manifest);
    free(real);
    free(cdir);
    free(primary);
    free(fb_dir);
    free(fb);
    return s;
}
