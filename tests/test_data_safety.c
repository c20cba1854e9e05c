/*
 * Nothing is lost at the edges (issue 11, "Data loss"):
 *  - lb_check_output_file refuses device nodes, FIFOs and directories;
 *    lb_path_relate (same / inside / containing, through symlinks and for
 *    paths not created yet); lb_atomic_remove_stale removes the temp files
 *    of dead processes only;
 *  - lb_quantize_model refuses an output that is, contains or lies inside
 *    the source checkpoint (the source is untouched, also with force);
 *  - --resume verifies each finished layer file's checksum: a flipped byte
 *    fails with "checksum mismatch" naming the file; put back, it resumes;
 *  - the run's identity: a source checkpoint rewritten since (its files'
 *    mtimes) is not resumed, and the log names what differs;
 *  - a fresh run reports the work directories of interrupted runs for the
 *    same output and removes them when it completes; one owned by a live
 *    process is left alone.
 */
#include "test_quantize_util.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

/* log lines captured from the library */
static char g_log[16384];
static void log_cb(lb_log_level level, const char *msg, void *user) {
    (void)level;
    (void)user;
    size_t o = strlen(g_log);
    snprintf(g_log + o, sizeof g_log - o, "%s\n", msg);
}

static void copy_file(const char *src, const char *dst) {
    size_t n = 0;
    void *p = th_read_bin(src, &n);
    TH_CHECK_MSG(p != NULL, "read %s", src);
    FILE *f = fopen(dst, "wb");
    TH_CHECK_MSG(f != NULL, "create %s", dst);
    if (f && p) TH_CHECK(fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
    free(p);
}

static void copy_model(const char *dst) {
    static const char *files[] = {"config.json", "generation_config.json",
                                  "model.safetensors"};
    mkdir(dst, 0755);
    for (int i = 0; i < 3; i++) {
        char s[800], d[800];
        snprintf(s, sizeof s, "%s/%s", th_shared(QW_DIR), files[i]);
        snprintf(d, sizeof d, "%s/%s", dst, files[i]);
        copy_file(s, d);
    }
}

static void test_paths(void) {
    TH_CHECK_OK(lb_check_output_file(tmp_path("new.gguf")));
    const char *reg = tmp_path("reg.gguf");
    copy_file(th_shared(QW_DIR "/config.json"), reg);
    TH_CHECK_OK(lb_check_output_file(reg));
    TH_CHECK_FAILS(lb_check_output_file("/dev/null"), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "device node"));
    const char *fifo = tmp_path("fifo");
    TH_CHECK(mkfifo(fifo, 0644) == 0);
    TH_CHECK_FAILS(lb_check_output_file(fifo), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "FIFO"));
    TH_CHECK_FAILS(lb_check_output_file(th_tmpdir()), LB_ERR_INVALID_ARG);

    const char *d = tmp_path("rel");
    TH_CHECK(mkdir(d, 0755) == 0);
    char sub[800], dotted[800], link[800], via_link[800];
    snprintf(sub, sizeof sub, "%s/sub/new", d);
    snprintf(dotted, sizeof dotted, "%s/../rel/", d);
    snprintf(link, sizeof link, "%s", tmp_path("rel-link"));
    TH_CHECK(symlink(d, link) == 0);
    snprintf(via_link, sizeof via_link, "%s/x", link);
    TH_CHECK_INT(lb_path_relate(d, d), LB_PATH_SAME);
    TH_CHECK_INT(lb_path_relate(dotted, d), LB_PATH_SAME);
    TH_CHECK_INT(lb_path_relate(link, d), LB_PATH_SAME);
    TH_CHECK_INT(lb_path_relate(sub, d), LB_PATH_A_INSIDE);     /* not created yet */
    TH_CHECK_INT(lb_path_relate(via_link, d), LB_PATH_A_INSIDE);
    TH_CHECK_INT(lb_path_relate(th_tmpdir(), d), LB_PATH_B_INSIDE);
    TH_CHECK_INT(lb_path_relate(tmp_path("relx"), d), LB_PATH_UNRELATED); /* a prefix, not a parent */
    TH_CHECK_INT(lb_path_relate("/", d), LB_PATH_B_INSIDE);

    /* stale temp files: a dead process's are removed, a live one's and
     * look-alikes stay */
    const char *out = tmp_path("o.gguf");
    pid_t child = fork();
    if (child == 0) _exit(0);
    int wst;
    waitpid(child, &wst, 0); /* child is gone: its pid is (almost surely) free */
    char dead[800], live[800], odd[800];
    snprintf(dead, sizeof dead, "%s.tmp.%ld.3", out, (long)child);
    snprintf(live, sizeof live, "%s.tmp.%ld.0", out, (long)getppid());
    snprintf(odd, sizeof odd, "%s.tmp.%ld.x", out, (long)child);
    copy_file(reg, dead);
    copy_file(reg, live);
    copy_file(reg, odd);
    g_log[0] = '\0';
    TH_CHECK_INT(lb_atomic_remove_stale(out), 1);
    TH_CHECK(!lb_is_file(dead) && lb_is_file(live) && lb_is_file(odd));
    TH_CHECK(strstr(g_log, "interrupted run") && strstr(g_log, dead));
}

/* lb_quantize_model's output must not overlap its input */
static void test_quantize_overlap(void) {
    const char *m = tmp_path("ov-model");
    copy_model(m);
    char before[800];
    snprintf(before, sizeof before, "%s/model.safetensors", m);
    size_t n0 = 0;
    void *orig = th_read_bin(before, &n0);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.force = true;
    char inside[800];
    snprintf(inside, sizeof inside, "%s/q", m);
    TH_CHECK_FAILS(lb_quantize_model(m, m, &p, NULL, NULL), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "is the input"));
    TH_CHECK_FAILS(lb_quantize_model(m, inside, &p, NULL, NULL), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "inside the input"));
    TH_CHECK_FAILS(lb_quantize_model(m, th_tmpdir(), &p, NULL, NULL), LB_ERR_INVALID_ARG);
    TH_CHECK(strstr(lb_last_error(), "contain the input"));
    size_t n1 = 0;
    void *now = th_read_bin(before, &n1);
    TH_CHECK(orig && now && n0 == n1 && !memcmp(orig, now, n0));
    TH_CHECK(!lb_is_dir(inside));
    free(orig);
    free(now);
}

static bool cancel_cb(void *user, const char *stage, uint64_t done, uint64_t total) {
    (void)done;
    (void)total;
    return strncmp(stage, (const char *)user, strlen((const char *)user)) != 0;
}

/* the one OUT.tmp-* directory of `out_name` in th_tmpdir() */
static bool find_tmp(const char *out_name, char *buf, size_t n) {
    DIR *d = opendir(th_tmpdir());
    struct dirent *e;
    char pre[200];
    snprintf(pre, sizeof pre, "%s.tmp-", out_name);
    bool found = false;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, pre, strlen(pre))) {
            snprintf(buf, n, "%s/%s", th_tmpdir(), e->d_name);
            found = true;
        }
    if (d) closedir(d);
    return found;
}

static void test_resume_checksum_identity(void) {
    const char *m = tmp_path("rs-model");
    copy_model(m);
    lb_calib cal = random_calib(4, 32, 512, 11);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.n_threads = 2;
    p.group_size = 32;
    const char *out = tmp_path("rs-out");
    /* cancelled when layer 2 starts: layer 0 committed */
    p.progress.fn = cancel_cb;
    p.progress.user = (void *)"layer 2/2";
    TH_CHECK_FAILS(lb_quantize_model(m, out, &p, &cal, NULL), LB_ERR_CANCELLED);
    char tmpd[800], layer[900];
    TH_CHECK(find_tmp("rs-out", tmpd, sizeof tmpd));
    snprintf(layer, sizeof layer, "%s/layers/layer-00000.safetensors", tmpd);
    TH_CHECK(lb_is_file(layer));
    /* flip one bit in the last byte (tensor data) */
    int fd = open(layer, O_RDWR);
    TH_CHECK(fd >= 0);
    struct stat sb;
    TH_CHECK(fstat(fd, &sb) == 0);
    unsigned char b = 0;
    const off_t at = sb.st_size - 5;
    TH_CHECK(pread(fd, &b, 1, at) == 1);
    b ^= 0x10;
    TH_CHECK(pwrite(fd, &b, 1, at) == 1);
    p.resume = true;
    p.progress.fn = NULL;
    lb_quantize_report rep;
    TH_CHECK_FAILS(lb_quantize_model(m, out, &p, &cal, &rep), LB_ERR_FORMAT);
    TH_CHECK_MSG(strstr(lb_last_error(), "checksum mismatch") &&
                     strstr(lb_last_error(), "layer-00000.safetensors"),
                 "error: %s", lb_last_error());
    TH_CHECK(!lb_is_dir(out));
    /* put back: resumes layer 0 */
    b ^= 0x10;
    TH_CHECK(pwrite(fd, &b, 1, at) == 1);
    close(fd);
    p.progress.fn = cancel_cb;
    p.progress.user = (void *)"layer 2/2";
    TH_CHECK_FAILS(lb_quantize_model(m, out, &p, &cal, NULL), LB_ERR_CANCELLED);
    /* the source rewritten since (same bytes, new mtime): not resumed */
    char cfgp[800];
    snprintf(cfgp, sizeof cfgp, "%s/model.safetensors", m);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    TH_CHECK(utimensat(AT_FDCWD, cfgp, ts, 0) == 0);
    p.progress.fn = NULL;
    g_log[0] = '\0';
    TH_CHECK_OK(lb_quantize_model(m, out, &p, &cal, &rep));
    TH_CHECK_INT(rep.layers_resumed, 0);
    lb_quantize_report_free(&rep);
    TH_CHECK_MSG(strstr(g_log, "other settings (source_fnv1a differs)"), "log: %s", g_log);
    /* the interrupted run's directory was removed when this run completed */
    TH_CHECK_MSG(strstr(g_log, "removed ") && strstr(g_log, tmpd), "log: %s", g_log);
    TH_CHECK_INT(count_entries("rs-out.tmp-"), 0);
    lb_calib_free(&cal);
}

/* a fresh run: an interrupted run with the same settings is reported (with
 * --resume as the way to continue it) and removed at the end; a directory
 * owned by a live process is left alone */
static void test_stale_work_dirs(void) {
    const char *m = tmp_path("st-model");
    copy_model(m);
    lb_quantize_params p;
    lb_quantize_default_params(&p);
    p.method = LB_QUANT_RTN;
    p.group_size = 32;
    const char *out = tmp_path("st-out");
    p.progress.fn = cancel_cb;
    p.progress.user = (void *)"layer 2/2";
    TH_CHECK_FAILS(lb_quantize_model(m, out, &p, NULL, NULL), LB_ERR_CANCELLED);
    char killed[800];
    TH_CHECK(find_tmp("st-out", killed, sizeof killed));
    /* a work directory whose state names a live process (our parent) */
    char live[800], sp[900];
    snprintf(live, sizeof live, "%s.tmp-live01", out);
    TH_CHECK(mkdir(live, 0755) == 0);
    snprintf(sp, sizeof sp, "%s/lowbit-state.json", live);
    FILE *f = fopen(sp, "w");
    TH_CHECK(f != NULL);
    if (f) {
        fprintf(f, "{\"pid\": %ld, \"settings\": {}}", (long)getppid());
        fclose(f);
    }
    p.progress.fn = NULL;
    g_log[0] = '\0';
    TH_CHECK_OK(lb_quantize_model(m, out, &p, NULL, NULL));
    TH_CHECK_MSG(strstr(g_log, "an interrupted run with these settings") &&
                     strstr(g_log, "--resume continues it"),
                 "log: %s", g_log);
    TH_CHECK_MSG(strstr(g_log, "in use by a running lowbit"), "log: %s", g_log);
    TH_CHECK(!lb_is_dir(killed));
    TH_CHECK(lb_is_dir(live));
    TH_CHECK_INT(count_entries("st-out.tmp-"), 1);
}

int main(void) {
    lb_log_set_callback(log_cb, NULL);
    TH_RUN(test_paths);
    TH_RUN(test_quantize_overlap);
    TH_RUN(test_resume_checksum_identity);
    TH_RUN(test_stale_work_dirs);
    qt_cleanup();
    return th_report();
}
