/*
 * lb_export_cached_gguf (the GGUF cache `lowbit serve` keeps beside a GPTQ
 * checkpoint) and lb_server_load_model_ex, on RTN checkpoints of
 * tinystories-656k made here:
 *  - first call exports (rebuilt, reason "no cache yet"), the file is the
 *    auto export plus the lowbit.source.* keys, byte for byte;
 *  - second call re-uses it: same inode, mtime and bytes;
 *  - a changed config.json field, a safetensors file with a new mtime, an
 *    added JSON file, a truncated cache, a cache without the manifest key,
 *    a cache from another exporter version: rebuilt, with the reason named;
 *  - lowbit-cache/ unusable (a file in its place): the fallback directory
 *    (explicit, $XDG_CACHE_HOME, $HOME), re-used on the next call; neither
 *    writable: LB_ERR_IO, nothing left;
 *  - read-only checkpoint directories (chmod a-w; as root, in a child that
 *    runs as nobody): an existing valid cache is used, a missing or stale
 *    one is built in the fallback directory, nothing is written beside;
 *  - a cancelled export leaves the old cache (or nothing, no lowbit-cache/)
 *    and no temp file; concurrent first calls (fork) all succeed and every
 *    model.gguf seen meanwhile is the complete final file;
 *  - requantized modules of a 3-bit rule are listed, also on re-use;
 *  - the manifest format (sorted, escaped names, dangling links skipped);
 *  - lb_server_load_model_ex: the cached GGUF (NORM RoPE) with the
 *    directory's tokenizer and EOS ids, greedy tokens equal to the
 *    checkpoint loaded as it is; --no-cache; a cache failure falls back to
 *    the checkpoint with a WARN.
 */
#include "test_quantize_util.h"

#include "lowbit/export.h"
#include "lowbit/generate.h"
#include "lowbit/gguf.h"
#include "lowbit/server.h"

#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <sys/wait.h>

/* ---- helpers ------------------------------------------------------------------ */

/* A copy of path p freed at the end (tmp_path's buffers rotate). */
static char *g_paths[16];
static int g_n_paths;
static const char *keep_path(const char *p) {
    if (g_n_paths == (int)(sizeof g_paths / sizeof g_paths[0])) abort();
    return g_paths[g_n_paths++] = strdup(p);
}

/* An RTN checkpoint of tinystories-656k at tmp/name (sym 4-bit g32: every
 * module direct Q4_0), with optional module rules. */
static const char *make_ckpt(const char *name, const char *const *rules, int n_rules) {
    const char *out = tmp_path(name);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.group_size = 32;
    p.rules = rules;
    p.n_rules = n_rules;
    p.n_threads = 2;
    TH_CHECK_OK(lb_quantize_model(th_shared(TS_DIR), out, &p, NULL, NULL));
    return keep_path(out);
}

static char *cat(const char *a, const char *b) {
    char *p = lb_path_join(a, b);
    if (!p) abort();
    return p;
}

static struct stat stat_of(const char *path) {
    struct stat st;
    memset(&st, 0, sizeof st);
    if (stat(path, &st) != 0) st.st_ino = 0;
    return st;
}

static bool same_file_version(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Entries of directory d whose name contains `part`. */
static int count_in(const char *d, const char *part) {
    DIR *dir = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dir && (e = readdir(dir)))
        if (strstr(e->d_name, part)) n++;
    if (dir) closedir(dir);
    return n;
}

static char *gguf_str(const char *path, const char *key) {
    lb_gguf *g = NULL;
    char *v = NULL;
    if (lb_gguf_open(path, &g) == LB_OK) lb_gguf_get_str_dup(g, key, &v);
    lb_gguf_close(g);
    return v;
}

static uint32_t gguf_u32(const char *path, const char *key) {
    lb_gguf *g = NULL;
    uint32_t v = 0;
    if (lb_gguf_open(path, &g) == LB_OK) lb_gguf_get_u32(g, key, &v);
    lb_gguf_close(g);
    return v;
}

static lb_status cache(const char *dir, const char *fallback, lb_export_cache_result *r) {
    lb_export_cache_opts o;
    lb_export_cache_opts_default(&o);
    o.fallback_dir = fallback;
    o.n_threads = 2;
    return lb_export_cached_gguf(dir, &o, r);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(s, f);
        fclose(f);
    }
}

/* Set config.json's number `key` in checkpoint ck. */
static void set_config_num(const char *ck, const char *key, double v) {
    char *cfg = cat(ck, "config.json");
    cJSON *j = read_json(cfg);
    TH_CHECK(j != NULL);
    if (j) {
        cJSON_ReplaceItemInObject(j, key, cJSON_CreateNumber(v));
        char *s = cJSON_Print(j);
        write_text(cfg, s);
        free(s);
        cJSON_Delete(j);
    }
    free(cfg);
}

/* Captured log lines (the library's lb_log). */
static char g_log[8192];
static void log_cb(lb_log_level lvl, const char *msg, void *user) {
    (void)user;
    size_t l = strlen(g_log);
    snprintf(g_log + l, sizeof g_log - l, "%s: %s\n",
             lvl == LB_LOG_WARN ? "WARN" : lvl == LB_LOG_INFO ? "INFO" : "OTHER", msg);
}

/* ---- cases ------------------------------------------------------------------------ */

static const char *g_ck; /* the main checkpoint */

static void test_build_and_reuse(void) {
    g_ck = make_ckpt("ck", NULL, 0);
    char *cdir = cat(g_ck, LB_EXPORT_CACHE_SUBDIR), *want = cat(cdir, LB_EXPORT_CACHE_FILE);
    g_log[0] = '\0';
    lb_log_set_callback(log_cb, NULL);
    lb_export_cache_result r;
    TH_CHECK_OK(cache(g_ck, tmp_path("unused-fallback"), &r));
    TH_CHECK(r.rebuilt && !r.fallback);
    TH_CHECK_STR(r.path, want);
    TH_CHECK_STR(r.reason, "no cache yet");
    TH_CHECK_INT(r.n_requantized, 0);
    TH_CHECK_STR(r.requantized, "");
    TH_CHECK_INT(r.n_q4_1, 0);
    TH_CHECK_INT(r.stats.n_route[LB_EXPORT_ROUTE_DIRECT], 14);
    TH_CHECK_INT(r.stats.n_route[LB_EXPORT_ROUTE_MIXED], 0);
    TH_CHECK_INT((long long)r.stats.bytes_out, (long long)stat_of(want).st_size);
    TH_CHECK_MSG(strstr(g_log, "INFO: exported GPTQ checkpoint") &&
                     strstr(g_log, "MB, ") && strstr(g_log, want),
                 "log: %s", g_log);
    TH_CHECK(!lb_is_dir(tmp_path("unused-fallback")));
    TH_CHECK_INT(count_in(cdir, ".tmp."), 0);
    lb_export_cache_result_free(&r);

    /* the cache is the auto export plus the three keys, byte for byte */
    char *man = NULL, real[PATH_MAX];
    TH_CHECK_OK(lb_export_cache_manifest(g_ck, &man));
    TH_CHECK(realpath(g_ck, real) != NULL);
    char *m2 = gguf_str(want, "lowbit.source.manifest");
    TH_CHECK(man && m2 && !strcmp(man, m2));
    char *p2 = gguf_str(want, "lowbit.source.path");
    TH_CHECK_STR(p2, real);
    const char *meta[] = {"lowbit.source.manifest", man ? man : "", "lowbit.source.path", real,
                          "lowbit.source.requantized", ""};
    lb_export_opts eo;
    lb_export_opts_default(&eo);
    eo.n_threads = 2;
    eo.meta_kv = meta;
    eo.n_meta_kv = 3;
    const char *ref = tmp_path("ck-ref.gguf");
    TH_CHECK_OK(lb_export_gguf(g_ck, ref, &eo, NULL, NULL));
    TH_CHECK(files_equal(ref, want));
    /* and every linear is Q4_0 (direct) */
    lb_gguf *g = NULL;
    TH_CHECK_OK(lb_gguf_open(want, &g));
    if (g) {
        int64_t i = lb_gguf_find_tensor(g, "blk.1.ffn_down.weight");
        TH_CHECK(i >= 0 && lb_gguf_tensor_at(g, i)->type == LB_TYPE_Q4_0);
    }
    lb_gguf_close(g);
    free(m2);
    free(p2);

    /* second call: re-used, not rewritten */
    size_t n0 = 0;
    void *bytes0 = th_read_bin(want, &n0);
    struct stat s0 = stat_of(want);
    g_log[0] = '\0';
    TH_CHECK_OK(cache(g_ck, NULL, &r));
    TH_CHECK(!r.rebuilt && !r.fallback);
    TH_CHECK_STR(r.path, want);
    TH_CHECK_STR(r.reason, "");
    TH_CHECK_INT((long long)r.stats.bytes_out, 0);
    struct stat s1 = stat_of(want);
    TH_CHECK(s0.st_ino != 0 && same_file_version(&s0, &s1));
    size_t n1 = 0;
    void *bytes1 = th_read_bin(want, &n1);
    TH_CHECK(bytes0 && bytes1 && n0 == n1 && !memcmp(bytes0, bytes1, n0));
    TH_CHECK_MSG(strstr(g_log, "INFO: using cached GGUF ") != NULL, "log: %s", g_log);
    lb_export_cache_result_free(&r);
    lb_log_set_callback(NULL, NULL);
    free(bytes0);
    free(bytes1);
    free(man);
    free(cdir);
    free(want);
}

/* Run the cache and check it was rebuilt because of `why` (substring). */
static void expect_rebuild(const char *dir, const char *why, const char *path) {
    struct stat before = stat_of(path);
    lb_export_cache_result r;
    TH_CHECK_OK(cache(dir, NULL, &r));
    TH_CHECK(r.rebuilt && !r.fallback);
    TH_CHECK_STR(r.path, path);
    TH_CHECK_MSG(strstr(r.reason, why) != NULL, "reason '%s', want '%s'", r.reason, why);
    struct stat after = stat_of(path);
    TH_CHECK(after.st_ino != 0 && !same_file_version(&before, &after));
    /* and valid again: the next call re-uses it */
    lb_export_cache_result_free(&r);
    TH_CHECK_OK(cache(dir, NULL, &r));
    TH_CHECK(!r.rebuilt);
    lb_export_cache_result_free(&r);
}

static void test_invalidation(void) {
    if (!g_ck) return;
    char *cdir = cat(g_ck, LB_EXPORT_CACHE_SUBDIR), *gg = cat(cdir, LB_EXPORT_CACHE_FILE);
    char *cfg = cat(g_ck, "config.json");
    TH_CHECK_INT(gguf_u32(gg, "llama.context_length"), 512);

    /* a changed config field reaches the GGUF */
    set_config_num(g_ck, "max_position_embeddings", 256);
    expect_rebuild(g_ck, "config.json changed", gg);
    TH_CHECK_INT(gguf_u32(gg, "llama.context_length"), 256);

    /* touching a JSON file changes nothing (its contents are the key) */
    struct stat s0 = stat_of(gg);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 5}};
    TH_CHECK(utimensat(AT_FDCWD, cfg, ts, 0) == 0);
    lb_export_cache_result r;
    TH_CHECK_OK(cache(g_ck, NULL, &r));
    TH_CHECK(!r.rebuilt);
    struct stat s1 = stat_of(gg);
    TH_CHECK(same_file_version(&s0, &s1));
    lb_export_cache_result_free(&r);

    /* a safetensors file with another mtime (replaced / touched) */
    char *st = cat(g_ck, "model.safetensors");
    TH_CHECK(utimensat(AT_FDCWD, st, ts, 0) == 0);
    expect_rebuild(g_ck, "model.safetensors changed", gg);
    free(st);

    /* a new JSON file (e.g. a chat_template / generation config) */
    char *extra = cat(g_ck, "chat_template.json");
    write_text(extra, "{\"chat_template\": \"{{ messages[0].content }}\"}");
    expect_rebuild(g_ck, "chat_template.json added", gg);
    remove(extra);
    expect_rebuild(g_ck, "chat_template.json removed", gg);
    free(extra);

    /* a truncated cache */
    s0 = stat_of(gg);
    TH_CHECK(truncate(gg, s0.st_size / 2) == 0);
    expect_rebuild(g_ck, "unreadable", gg);
    /* garbage */
    write_text(gg, "not a gguf");
    expect_rebuild(g_ck, "unreadable", gg);
    /* a GGUF without the key (a plain export put there) */
    lb_export_opts eo;
    lb_export_opts_default(&eo);
    eo.n_threads = 2;
    TH_CHECK_OK(lb_export_gguf(g_ck, gg, &eo, NULL, NULL));
    expect_rebuild(g_ck, "no lowbit.source.manifest key", gg);
    /* a cache made by another exporter version */
    char *man = NULL;
    TH_CHECK_OK(lb_export_cache_manifest(g_ck, &man));
    if (man) {
        char *nl = strchr(man, '\n');
        size_t rest = nl ? strlen(nl) : 0;
        char *old = malloc(64 + rest);
        snprintf(old, 64 + rest, "lowbit-export-cache v0 lowbit 0.0.1 mode auto%s", nl ? nl : "");
        const char *meta[] = {"lowbit.source.manifest", old};
        eo.meta_kv = meta;
        eo.n_meta_kv = 1;
        TH_CHECK_OK(lb_export_gguf(g_ck, gg, &eo, NULL, NULL));
        expect_rebuild(g_ck, "another exporter version (lowbit-export-cache v0", gg);
        free(old);
    }
    free(man);
    TH_CHECK_INT(count_in(cdir, ".tmp."), 0);
    free(cfg);
    free(cdir);
    free(gg);
}

static void test_fallback(void) {
    const char *ck = make_ckpt("ck-ro", NULL, 0);
    char *cdir = cat(ck, LB_EXPORT_CACHE_SUBDIR);
    /* lowbit-cache cannot be a directory: a file is in its place */
    write_text(cdir, "in the way");
    const char *fb = tmp_path("fb/sub/dir");
    char real[PATH_MAX];
    TH_CHECK(realpath(ck, real) != NULL);
    g_log[0] = '\0';
    lb_log_set_callback(log_cb, NULL);
    lb_export_cache_result r;
    TH_CHECK_OK(cache(ck, fb, &r));
    lb_log_set_callback(NULL, NULL);
    TH_CHECK(r.rebuilt && r.fallback);
    TH_CHECK_STR(r.reason, "no cache yet");
    TH_CHECK_MSG(strstr(g_log, "is not writable: GGUF cache in ") != NULL, "log: %s", g_log);
    /* FALLBACK/ck-ro-<fnv1a64 of the real path>.gguf, directories 0700 */
    char want[PATH_MAX + 64];
    {
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (const char *p = real; *p; p++) {
            h ^= (unsigned char)*p;
            h *= UINT64_C(0x100000001b3);
        }
        snprintf(want, sizeof want, "%s/ck-ro-%016llx.gguf", fb, (unsigned long long)h);
    }
    TH_CHECK_STR(r.path, want);
    TH_CHECK(lb_is_file(want));
    TH_CHECK_INT(stat_of(fb).st_mode & 0777, 0700);
    TH_CHECK(lb_is_file(cdir)); /* left alone */
    struct stat s0 = stat_of(want);
    lb_export_cache_result_free(&r);
    /* re-used */
    TH_CHECK_OK(cache(ck, fb, &r));
    TH_CHECK(!r.rebuilt && r.fallback);
    TH_CHECK_STR(r.path, want);
    struct stat s1 = stat_of(want);
    TH_CHECK(same_file_version(&s0, &s1));
    lb_export_cache_result_free(&r);
    /* $XDG_CACHE_HOME/lowbit by default (a relative value is ignored) */
    const char *xdg = tmp_path("xdg");
    setenv("XDG_CACHE_HOME", xdg, 1);
    TH_CHECK_OK(cache(ck, NULL, &r));
    TH_CHECK(r.rebuilt && r.fallback);
    char xdg_dir[700];
    snprintf(xdg_dir, sizeof xdg_dir, "%s/lowbit/", xdg);
    TH_CHECK_MSG(r.path && !strncmp(r.path, xdg_dir, strlen(xdg_dir)), "path %s", r.path);
    lb_export_cache_result_free(&r);
    const char *home = tmp_path("home");
    mkdir(home, 0755);
    setenv("XDG_CACHE_HOME", "relative/dir", 1);
    const char *old_home = getenv("HOME");
    char *saved_home = old_home ? strdup(old_home) : NULL;
    setenv("HOME", home, 1);
    TH_CHECK_OK(cache(ck, NULL, &r));
    char home_dir[700];
    snprintf(home_dir, sizeof home_dir, "%s/.cache/lowbit/ck-ro-", home);
    TH_CHECK_MSG(r.path && !strncmp(r.path, home_dir, strlen(home_dir)), "path %s", r.path);
    lb_export_cache_result_free(&r);
    if (saved_home) setenv("HOME", saved_home, 1);
    free(saved_home);
    unsetenv("XDG_CACHE_HOME");

    /* neither location writable: an IO error naming both, nothing left */
    const char *blocker = tmp_path("blocker");
    write_text(blocker, "x");
    const char *bad = tmp_path("blocker/cache");
    TH_CHECK_FAILS(cache(ck, bad, &r), LB_ERR_IO);
    TH_CHECK(strstr(lb_last_error(), "lowbit-cache not writable") != NULL);
    TH_CHECK(r.path == NULL);

    free(cdir);
}

/* Run fn without write access to the checkpoint directories `dirs`: after
 * chmod 0555 when we are not root; as root (who writes anyway) in a child
 * process that drops to user nobody. False when neither can be arranged. */
static bool without_write_access(void (*fn)(void), const char *const *dirs, int n) {
    if (geteuid() != 0) {
        for (int i = 0; i < n; i++) TH_CHECK(chmod(dirs[i], 0555) == 0);
        fn();
        for (int i = 0; i < n; i++) chmod(dirs[i], 0755);
        return true;
    }
    fflush(stderr);
    int failed_before = th_n_failed;
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0 ||
            access(dirs[0], R_OK | X_OK) != 0)
            _exit(77);
        fn();
        fflush(stderr);
        _exit(th_n_failed > failed_before ? 1 : 0);
    }
    int status = -1;
    TH_CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return false;
    TH_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
    return true;
}

static const char *g_ro, *g_ro_new, *g_ro_fb; /* see test_readonly */

static void readonly_first(void) {
    lb_export_cache_result r;
    /* a cache made while the checkpoint was writable is still used */
    TH_CHECK_OK(cache(g_ro, g_ro_fb, &r));
    TH_CHECK(!r.rebuilt && !r.fallback);
    lb_export_cache_result_free(&r);
    /* none yet: built in the fallback directory, nothing beside the checkpoint */
    TH_CHECK_OK(cache(g_ro_new, g_ro_fb, &r));
    TH_CHECK(r.rebuilt && r.fallback);
    TH_CHECK_STR(r.reason, "no cache yet");
    TH_CHECK_MSG(r.path && !strncmp(r.path, g_ro_fb, strlen(g_ro_fb)) && lb_is_file(r.path),
                 "path %s", r.path ? r.path : "(null)");
    lb_export_cache_result_free(&r);
    char *cdir = cat(g_ro_new, LB_EXPORT_CACHE_SUBDIR);
    TH_CHECK(access(cdir, F_OK) != 0);
    free(cdir);
    /* and re-used there */
    TH_CHECK_OK(cache(g_ro_new, g_ro_fb, &r));
    TH_CHECK(!r.rebuilt && r.fallback);
    lb_export_cache_result_free(&r);
}

static void readonly_stale(void) {
    lb_export_cache_result r;
    TH_CHECK_OK(cache(g_ro, g_ro_fb, &r));
    TH_CHECK(r.rebuilt && r.fallback);
    TH_CHECK_MSG(strstr(r.reason, "config.json changed") != NULL, "reason %s", r.reason);
    lb_export_cache_result_free(&r);
}

/* Read-only checkpoint directories: the user cache directory takes over. */
static void test_readonly(void) {
    g_ro = make_ckpt("ck-ro2", NULL, 0);
    g_ro_new = make_ckpt("ck-ro3", NULL, 0);
    g_ro_fb = keep_path(tmp_path("fb-ro"));
    char *rc = cat(g_ro, LB_EXPORT_CACHE_SUBDIR), *primary = cat(rc, LB_EXPORT_CACHE_FILE);
    lb_export_cache_result r;
    TH_CHECK_OK(cache(g_ro, g_ro_fb, &r));
    TH_CHECK(r.rebuilt && !r.fallback);
    lb_export_cache_result_free(&r);
    struct stat s0 = stat_of(primary);
    /* as root the child running as nobody needs to reach the checkpoints
     * (lowbit quantize makes them 0700, as mkdtemp) and to own the fallback
     * directory */
    TH_CHECK(mkdir(g_ro_fb, 0700) == 0);
    if (geteuid() == 0) {
        TH_CHECK(chmod(th_tmpdir(), 0755) == 0);
        TH_CHECK(chmod(g_ro, 0755) == 0 && chmod(g_ro_new, 0755) == 0);
        TH_CHECK(chown(g_ro_fb, 65534, 65534) == 0);
    }
    const char *dirs[] = {g_ro, rc, g_ro_new};
    if (!without_write_access(readonly_first, dirs, 3)) {
        fprintf(stderr, "  note: read-only case skipped (cannot drop to user nobody or "
                        "it cannot reach %s)\n", th_tmpdir());
    } else {
        set_config_num(g_ro, "max_position_embeddings", 128);
        TH_CHECK(without_write_access(readonly_stale, dirs, 3));
        struct stat s1 = stat_of(primary); /* the stale cache is left alone */
        TH_CHECK(same_file_version(&s0, &s1));
    }
    if (geteuid() == 0) chmod(th_tmpdir(), 0700);
    free(rc);
    free(primary);
}

static bool cancel_cb(void *user, const char *stage, uint64_t done, uint64_t total) {
    (void)user;
    (void)total;
    return !(strcmp(stage, "export") == 0 && done > 0);
}

static void test_cancel(void) {
    const char *ck = make_ckpt("ck-cancel", NULL, 0);
    char *cdir = cat(ck, LB_EXPORT_CACHE_SUBDIR), *gg = cat(cdir, LB_EXPORT_CACHE_FILE);
    lb_export_cache_opts o;
    lb_export_cache_opts_default(&o);
    o.n_threads = 2;
    o.progress.fn = cancel_cb;
    lb_export_cache_result r;
    /* no cache yet: nothing left, not even lowbit-cache/ */
    TH_CHECK_FAILS(lb_export_cached_gguf(ck, &o, &r), LB_ERR_CANCELLED);
    TH_CHECK(r.path == NULL);
    TH_CHECK(!lb_is_dir(cdir));
    /* a stale cache survives a cancelled rebuild */
    TH_CHECK_OK(cache(ck, NULL, &r));
    lb_export_cache_result_free(&r);
    struct stat s0 = stat_of(gg);
    char *cfg = cat(ck, "generation_config.json");
    write_text(cfg, "{\"bos_token_id\": 1, \"eos_token_id\": 2}");
    TH_CHECK_FAILS(lb_export_cached_gguf(ck, &o, &r), LB_ERR_CANCELLED);
    struct stat s1 = stat_of(gg);
    TH_CHECK(same_file_version(&s0, &s1));
    TH_CHECK_INT(count_in(cdir, ".tmp."), 0);
    expect_rebuild(ck, "generation_config.json changed", gg);
    free(cfg);
    free(cdir);
    free(gg);
}

static void test_concurrent(void) {
    const char *ck = make_ckpt("ck-conc", NULL, 0);
    char *cdir = cat(ck, LB_EXPORT_CACHE_SUBDIR), *gg = cat(cdir, LB_EXPORT_CACHE_FILE);
    enum { N = 3 };
    pid_t pid[N];
    for (int i = 0; i < N; i++) {
        pid[i] = fork();
        if (pid[i] == 0) {
            lb_export_cache_result r;
            lb_status s = cache(ck, NULL, &r);
            bool ok = s == LB_OK && r.path && !strcmp(r.path, gg);
            lb_export_cache_result_free(&r);
            _exit(ok ? 0 : 1);
        }
    }
    /* while they export, model.gguf is absent or complete: every version
     * seen has the same bytes as the final file (the exporter is
     * deterministic) */
    void *seen = NULL;
    size_t n_seen = 0;
    int n_reads = 0, n_diff = 0;
    int left = 0;
    for (int i = 0; i < N; i++) {
        TH_CHECK(pid[i] > 0);
        left += pid[i] > 0;
    }
    while (left > 0) {
        for (int i = 0; i < N; i++) {
            int status = -1;
            pid_t w = pid[i] > 0 ? waitpid(pid[i], &status, WNOHANG) : 0;
            if (w == 0) continue;
            TH_CHECK(w == pid[i]);
            TH_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            pid[i] = -1;
            left--;
        }
        usleep(2000);
        size_t n = 0;
        void *b = th_read_bin(gg, &n);
        if (!b) continue;
        n_reads++;
        if (!seen) {
            seen = b;
            n_seen = n;
            continue;
        }
        if (n != n_seen || memcmp(b, seen, n) != 0) n_diff++;
        free(b);
    }
    TH_CHECK_INT(n_diff, 0);
    size_t n_final = 0;
    void *final = th_read_bin(gg, &n_final);
    TH_CHECK(seen && final && n_final == n_seen && !memcmp(seen, final, n_final));
    fprintf(stderr, "  note: model.gguf read %d time(s) during the exports\n", n_reads);
    free(seen);
    free(final);
    lb_export_cache_result r;
    TH_CHECK_OK(cache(ck, NULL, &r));
    TH_CHECK(!r.rebuilt); /* whichever rename won, the file is a valid cache */
    lb_export_cache_result_free(&r);
    TH_CHECK_INT(count_in(cdir, ".tmp."), 0);
    TH_CHECK_INT(count_in(cdir, ""), 3); /* ".", "..", model.gguf */
    free(cdir);
    free(gg);
}

static void test_requantized(void) {
    const char *rules[] = {"mlp\\.down_proj=3"};
    const char *ck = make_ckpt("ck-mixed", rules, 1);
    const char *list = "model.layers.0.mlp.down_proj, model.layers.1.mlp.down_proj";
    lb_export_cache_result r;
    TH_CHECK_OK(cache(ck, NULL, &r));
    TH_CHECK(r.rebuilt);
    TH_CHECK_INT(r.n_requantized, 2);
    TH_CHECK_STR(r.requantized, list);
    TH_CHECK_INT(r.stats.n_route[LB_EXPORT_ROUTE_MIXED], 2);
    TH_CHECK_INT(r.stats.n_route[LB_EXPORT_ROUTE_DIRECT], 12);
    lb_export_cache_result_free(&r);
    TH_CHECK_OK(cache(ck, NULL, &r));
    TH_CHECK(!r.rebuilt);
    TH_CHECK_INT(r.n_requantized, 2);
    TH_CHECK_STR(r.requantized, list);
    lb_export_cache_result_free(&r);
    TH_CHECK_INT(r.n_q4_1, 0);
    /* the server warns about them on every start */
    g_log[0] = '\0';
    lb_log_set_callback(log_cb, NULL);
    lb_model *m = NULL;
    lb_tokenizer *t = NULL;
    TH_CHECK_OK(lb_server_load_model_ex(ck, NULL, &m, &t));
    lb_log_set_callback(NULL, NULL);
    TH_CHECK_MSG(strstr(g_log, "WARN: 2 GPTQ module(s) could not be copied exactly") &&
                     strstr(g_log, list),
                 "log: %s", g_log);
    lb_model_free(m);
    lb_tokenizer_free(t);

    /* 4-bit asymmetric: every module direct Q4_1, counted (and logged) */
    const char *asym[] = {".*=4:g32:asym"};
    const char *ca = make_ckpt("ck-asym", asym, 1);
    TH_CHECK_OK(cache(ca, NULL, &r));
    TH_CHECK(r.rebuilt);
    TH_CHECK_INT(r.n_requantized, 0);
    TH_CHECK_INT(r.n_q4_1, 14);
    TH_CHECK_INT(r.stats.n_route[LB_EXPORT_ROUTE_DIRECT], 14);
    lb_export_cache_result_free(&r);
    TH_CHECK_OK(cache(ca, NULL, &r));
    TH_CHECK(!r.rebuilt);
    TH_CHECK_INT(r.n_q4_1, 14);
    lb_export_cache_result_free(&r);
    g_log[0] = '\0';
    lb_log_set_callback(log_cb, NULL);
    TH_CHECK_OK(lb_server_load_model_ex(ca, NULL, &m, &t));
    lb_log_set_callback(NULL, NULL);
    TH_CHECK_MSG(strstr(g_log, "INFO: 14 4-bit asymmetric module(s) are Q4_1") &&
                     !strstr(g_log, "WARN"),
                 "log: %s", g_log);
    lb_model_free(m);
    lb_tokenizer_free(t);
}

static void test_manifest_and_errors(void) {
    const char *d = tmp_path("mf");
    mkdir(d, 0755);
    char *a = cat(d, "b.json"), *b = cat(d, "a b%.json"), *c = cat(d, "x.safetensors"),
         *e = cat(d, "ignored.txt"), *l = cat(d, "dangling.json"), *h = cat(d, "t.jinja");
    write_text(a, "{}");
    write_text(b, "hello");
    write_text(e, "not listed");
    write_text(h, "");
    /* a safetensors file: 8-byte length + header */
    FILE *f = fopen(c, "wb");
    uint64_t n = 2;
    fwrite(&n, 8, 1, f);
    fputs("{}", f);
    fclose(f);
    TH_CHECK(symlink("/nonexistent/target", l) == 0);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1234567890, 42}};
    TH_CHECK(utimensat(AT_FDCWD, c, ts, 0) == 0);
    char *m = NULL;
    TH_CHECK_OK(lb_export_cache_manifest(d, &m));
    /* FNV-1a 64 of "hello", of "{}", of "", and of the 10 header bytes */
    uint64_t hh = UINT64_C(0xcbf29ce484222325);
    const unsigned char hdr[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    for (int i = 0; i < 10; i++) {
        hh ^= hdr[i];
        hh *= UINT64_C(0x100000001b3);
    }
    char want[1024];
    snprintf(want, sizeof want,
             "lowbit-export-cache v%d lowbit %s mode auto\n"
             "file a%%20b%%25.json size 5 fnv1a64 a430d84680aabd0b\n"
             "file b.json size 2 fnv1a64 %016llx\n"
             "file t.jinja size 0 fnv1a64 cbf29ce484222325\n"
             "file x.safetensors size 10 mtime 1234567890.000000042 header-fnv1a64 %016llx\n",
             LB_EXPORT_CACHE_VERSION, LB_VERSION_STRING,
             (unsigned long long)((((UINT64_C(0xcbf29ce484222325) ^ '{') *
                                     UINT64_C(0x100000001b3)) ^ '}') * UINT64_C(0x100000001b3)),
             (unsigned long long)hh);
    TH_CHECK_STR(m, want);
    free(m);
    /* a safetensors length beyond the file */
    f = fopen(c, "wb");
    n = 1000;
    fwrite(&n, 8, 1, f);
    fclose(f);
    TH_CHECK_OK(lb_export_cache_manifest(d, &m));
    TH_CHECK(m && strstr(m, "header-fnv1a64 malformed\n"));
    free(m);
    TH_CHECK_FAILS(lb_export_cache_manifest(tmp_path("no-such-dir"), &m), LB_ERR_IO);
    TH_CHECK(m == NULL);
    TH_CHECK_FAILS(lb_export_cache_manifest(NULL, &m), LB_ERR_INVALID_ARG);
    free(a);
    free(b);
    free(c);
    free(e);
    free(l);
    free(h);

    /* not a GPTQ checkpoint / bad arguments */
    lb_export_cache_result r;
    bool g = true;
    TH_CHECK_OK(lb_export_is_gptq_checkpoint(th_shared(TS_DIR), &g));
    TH_CHECK(!g);
    if (g_ck) {
        TH_CHECK_OK(lb_export_is_gptq_checkpoint(g_ck, &g));
        TH_CHECK(g);
    }
    TH_CHECK_FAILS(lb_export_cached_gguf(th_shared(TS_DIR), NULL, &r), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "not a GPTQ checkpoint") != NULL);
    TH_CHECK_FAILS(lb_export_cached_gguf(NULL, NULL, &r), LB_ERR_INVALID_ARG);
    TH_CHECK_FAILS(lb_export_cached_gguf(tmp_path("no-such-dir"), NULL, &r), LB_ERR_NOT_FOUND);
    TH_CHECK(r.path == NULL);
    /* the extra-metadata option of lb_export_gguf */
    lb_export_opts eo;
    lb_export_opts_default(&eo);
    const char *bad[] = {"general.name", "x"};
    eo.meta_kv = bad;
    eo.n_meta_kv = 1;
    TH_CHECK_FAILS(lb_export_gguf(th_shared(TS_DIR), tmp_path("bad.gguf"), &eo, NULL, NULL),
                   LB_ERR_INVALID_ARG);
    TH_CHECK(!lb_is_file(tmp_path("bad.gguf")));
    eo.n_meta_kv = -1;
    TH_CHECK_FAILS(lb_export_gguf(th_shared(TS_DIR), tmp_path("bad.gguf"), &eo, NULL, NULL),
                   LB_ERR_INVALID_ARG);
}

/* Greedy continuation of "Once upon a time" (32 tokens). */
static int32_t *greedy(const lb_model *m, const lb_tokenizer *t, int32_t *n_out) {
    *n_out = 0;
    int32_t *ids = NULL, *out = NULL;
    size_t n = 0;
    const char *p = "Once upon a time";
    TH_CHECK_OK(lb_tokenizer_encode(t, p, strlen(p), true, &ids, &n));
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    lb_context *ctx = NULL;
    TH_CHECK_OK(lb_context_create(m, &cp, &ctx));
    lb_generate_params gp = lb_generate_default_params();
    gp.n_predict = 32;
    lb_generate_result res;
    memset(&res, 0, sizeof res);
    if (ctx && ids) {
        TH_CHECK_OK(lb_generate(ctx, ids, (int32_t)n, &gp, &res));
        out = res.tokens;
        *n_out = res.n_tokens;
        res.tokens = NULL;
    }
    lb_generate_result_free(&res);
    lb_context_free(ctx);
    free(ids);
    return out;
}

static void test_server_load(void) {
    if (!g_ck) return;
    lb_model *mc = NULL, *md = NULL, *mx = NULL;
    lb_tokenizer *tc = NULL, *td = NULL, *tx = NULL;
    /* cached GGUF vs the checkpoint as it is (lb_server_load_model) */
    TH_CHECK_OK(lb_server_load_model_ex(g_ck, NULL, &mc, &tc));
    TH_CHECK_OK(lb_server_load_model(g_ck, NULL, &md, &td));
    if (!mc || !md) goto out;
    TH_CHECK_INT(mc->config.rope_mode, LB_ROPE_NORM); /* from the GGUF */
    TH_CHECK_INT(md->config.rope_mode, LB_ROPE_NEOX); /* from the checkpoint */
    TH_CHECK_INT(mc->layers[0].w[0].type, LB_TYPE_Q4_0);
    TH_CHECK_INT(mc->config.bos_token_id, md->config.bos_token_id);
    TH_CHECK_INT(mc->config.n_eos, md->config.n_eos);
    TH_CHECK(md->config.n_eos > 0 &&
             !memcmp(mc->config.eos_token_ids, md->config.eos_token_ids,
                     (size_t)md->config.n_eos * sizeof md->config.eos_token_ids[0]));
    TH_CHECK_INT(mc->config.max_position_embeddings, md->config.max_position_embeddings);
    /* the directory's tokenizer: same ids and template */
    TH_CHECK_INT(lb_tokenizer_bos(tc), lb_tokenizer_bos(td));
    const char *txt = "Hello world, it's a test: 123 !!";
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    TH_CHECK_OK(lb_tokenizer_encode(tc, txt, strlen(txt), true, &a, &na));
    TH_CHECK_OK(lb_tokenizer_encode(td, txt, strlen(txt), true, &b, &nb));
    TH_CHECK(na == nb && na > 0 && !memcmp(a, b, na * sizeof *a));
    free(a);
    free(b);
    const char *ta = lb_tokenizer_chat_template(tc), *tb = lb_tokenizer_chat_template(td);
    TH_CHECK((!ta && !tb) || (ta && tb && !strcmp(ta, tb)));
    /* greedy tokens equal (the same Q4_0 blocks) */
    int32_t n1 = 0, n2 = 0;
    int32_t *g1 = greedy(mc, tc, &n1), *g2 = greedy(md, td, &n2);
    TH_CHECK_INT(n1, 32);
    TH_CHECK(n1 == n2 && g1 && g2 && !memcmp(g1, g2, (size_t)n1 * sizeof *g1));
    free(g1);
    free(g2);
    /* EOS ids from generation_config.json (a list the GGUF cannot hold:
     * tokenizer.ggml.eos_token_id is one id) */
    {
        char *gc = cat(g_ck, "generation_config.json");
        write_text(gc, "{\"bos_token_id\": 1, \"eos_token_id\": [2, 7]}");
        lb_model_free(mc);
        lb_tokenizer_free(tc);
        mc = NULL;
        tc = NULL;
        TH_CHECK_OK(lb_server_load_model_ex(g_ck, NULL, &mc, &tc));
        if (!mc) goto out;
        TH_CHECK_INT(mc->config.n_eos, 2);
        TH_CHECK(mc->config.eos_token_ids[0] == 2 && mc->config.eos_token_ids[1] == 7);
        char *gg = cat(g_ck, LB_EXPORT_CACHE_SUBDIR "/" LB_EXPORT_CACHE_FILE);
        TH_CHECK_OK(lb_model_load(gg, NULL, &mx));
        if (mx) TH_CHECK_INT(mx->config.n_eos, 1); /* what the override fixes */
        lb_model_free(mx);
        mx = NULL;
        free(gg);
        free(gc);
    }
    /* the cache off: the checkpoint as it is */
    lb_server_load_opts o;
    lb_server_load_opts_default(&o);
    TH_CHECK(o.gguf_cache);
    o.gguf_cache = false;
    TH_CHECK_OK(lb_server_load_model_ex(g_ck, &o, &mx, &tx));
    if (mx) TH_CHECK_INT(mx->config.rope_mode, LB_ROPE_NEOX);
    lb_model_free(mx);
    lb_tokenizer_free(tx);
    mx = NULL;
    tx = NULL;
    /* a dense directory and a GGUF file go through lb_server_load_model */
    TH_CHECK_OK(lb_server_load_model_ex(th_shared(TS_DIR), NULL, &mx, &tx));
    if (mx) TH_CHECK_INT(mx->config.rope_mode, LB_ROPE_NEOX);
    TH_CHECK(!lb_is_dir(th_shared(TS_DIR "/" LB_EXPORT_CACHE_SUBDIR)));
    lb_model_free(mx);
    lb_tokenizer_free(tx);
    mx = NULL;
    tx = NULL;
    /* no cache possible: a WARN and the checkpoint as it is */
    {
        const char *ck = make_ckpt("ck-nocache", NULL, 0);
        char *cdir = cat(ck, LB_EXPORT_CACHE_SUBDIR);
        write_text(cdir, "in the way");
        write_text(tmp_path("blocker2"), "x");
        o.gguf_cache = true;
        o.cache_fallback_dir = tmp_path("blocker2/cache");
        g_log[0] = '\0';
        lb_log_set_callback(log_cb, NULL);
        TH_CHECK_OK(lb_server_load_model_ex(ck, &o, &mx, &tx));
        lb_log_set_callback(NULL, NULL);
        if (mx) TH_CHECK_INT(mx->config.rope_mode, LB_ROPE_NEOX);
        TH_CHECK_MSG(strstr(g_log, "WARN: no GGUF cache for ") &&
                         strstr(g_log, "loading the checkpoint as it is"),
                     "log: %s", g_log);
        free(cdir);
    }
    lb_model *m2 = (lb_model *)1;
    lb_tokenizer *t2 = (lb_tokenizer *)1;
    TH_CHECK(lb_server_load_model_ex(tmp_path("no-such"), NULL, &m2, &t2) != LB_OK);
    TH_CHECK(m2 == NULL && t2 == NULL);
out:
    lb_model_free(mx);
    lb_tokenizer_free(tx);
    lb_model_free(mc);
    lb_tokenizer_free(tc);
    lb_model_free(md);
    lb_tokenizer_free(td);
}

int main(void) {
    if (!lb_is_dir(th_shared(TS_DIR))) th_skip("../shared/models/tinystories-656k missing");
    TH_RUN(test_build_and_reuse);
    TH_RUN(test_invalidation);
    TH_RUN(test_fallback);
    TH_RUN(test_readonly);
    TH_RUN(test_cancel);
    TH_RUN(test_concurrent);
    TH_RUN(test_requantized);
    TH_RUN(test_manifest_and_errors);
    TH_RUN(test_server_load);
    qt_cleanup();
    for (int i = 0; i < g_n_paths; i++) free(g_paths[i]);
    return th_report();
}
