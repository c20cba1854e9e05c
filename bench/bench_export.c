/*
 * bench_export — speed and memory of lowbit export on a checkpoint
 * directory (e.g. a random Qwen2.5-0.5B-shape one from make_random_hf).
 *
 *   bench_export IN_DIR OUT.gguf [--qtype T] [--mode M] [-t N]
 *
 * Runs, each in a forked child so that peak RSS (getrusage ru_maxrss of
 * the child) belongs to that step alone:
 *   1. baseline: copy the checkpoint's *.safetensors bytes to OUT.copy with
 *      read()/write() in 8 MiB blocks + fsync (the I/O floor: what any
 *      exporter must at least do) — then removed;
 *   2. lowbit export IN_DIR -> OUT.gguf.
 * Prints one JSON object: seconds, MB/s of input read, peak RSS (MiB) of
 * each, the export/copy time ratio, the largest work buffer of the export
 * and the size of the largest input tensor (what "one tensor at a time"
 * should stay near). The page cache is not dropped between the steps (no
 * root needed); the copy runs first so both read warm data.
 */
#include "lowbit/export.h"
#include "lowbit/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct result {
    double seconds;
    double bytes_in;
    double peak_buffer;
    int ok;
} result;

static int copy_dir(const char *dir, const char *out, double *bytes) {
    DIR *d = opendir(dir);
    if (!d) return 1;
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *buf = malloc(8 << 20);
    int rc = fo < 0 || !buf;
    *bytes = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        int fi = open(p, O_RDONLY);
        if (fi < 0) {
            rc = 1;
            break;
        }
        for (ssize_t n; (n = read(fi, buf, 8 << 20)) > 0;) {
            if (write(fo, buf, (size_t)n) != n) rc = 1;
            *bytes += (double)n;
        }
        close(fi);
    }
    if (fo >= 0) {
        if (fsync(fo)) rc = 1;
        close(fo);
    }
    free(buf);
    closedir(d);
    return rc;
}

/* Run step in a child; the child writes its result into a pipe. */
static int run_child(int step, const char *in, const char *out, const lb_export_opts *o,
                     result *r, long *maxrss_kb) {
    int fd[2];
    if (pipe(fd)) return 1;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(fd[0]);
        result res = {0};
        double t0 = lb_time_s();
        if (step == 0) {
            char cp[4096];
            snprintf(cp, sizeof cp, "%s.copy", out);
            res.ok = copy_dir(in, cp, &res.bytes_in) == 0;
            unlink(cp);
        } else {
            lb_export_stats st;
            lb_status s = lb_export_gguf(in, out, o, NULL, &st);
            res.ok = s == LB_OK;
            if (!res.ok) fprintf(stderr, "bench_export: %s\n", lb_last_error());
            res.bytes_in = (double)st.bytes_in;
            res.peak_buffer = (double)st.peak_buffer_bytes;
        }
        res.seconds = lb_time_s() - t0;
        if (write(fd[1], &res, sizeof res) != (ssize_t)sizeof res) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    ssize_t n = read(fd[0], r, sizeof *r);
    close(fd[0]);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) return 1;
    *maxrss_kb = ru.ru_maxrss;
    return n != (ssize_t)sizeof *r || !WIFEXITED(status) || WEXITSTATUS(status) || !r->ok;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_export IN_DIR OUT.gguf [--qtype T] [--mode M] [-t N]\n");
        return 2;
    }
    const char *in = argv[1], *out = argv[2];
    lb_export_opts o;
    lb_export_opts_default(&o);
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--qtype") && i + 1 < argc) o.qtype = argv[++i];
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            int m = lb_export_mode_from_name(argv[++i]);
            if (m < 0) return 2;
            o.mode = (lb_export_mode)m;
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc) o.n_threads = atoi(argv[++i]);
        else return 2;
    }
    result rc, re;
    long rss_c = 0, rss_e = 0;
    if (run_child(0, in, out, &o, &rc, &rss_c) || run_child(1, in, out, &o, &re, &rss_e)) {
        fprintf(stderr, "bench_export: a step failed\n");
        return 1;
    }
    /* largest input tensor */
    lb_export_plan *plan = NULL;
    if (lb_export_plan_make(in, &o, &plan) != LB_OK) {
        fprintf(stderr, "bench_export: %s\n", lb_last_error());
        return 1;
    }
    size_t largest = 0;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        int64_t ne = 1;
        for (int d = 0; d < plan->tensors[i].n_dims; d++) ne *= plan->tensors[i].shape[d];
        size_t b = (size_t)ne * 4; /* its f32 copy */
        if (b > largest) largest = b;
    }

    printf("{\"input\": \"%s\", \"qtype\": \"%s\", \"mode\": \"%s\", \"tensors\": %zu, "
           "\"input_mb\": %.1f, \"output_mb\": %.1f,\n"
           " \"copy\": {\"seconds\": %.3f, \"mb_per_s\": %.1f, \"peak_rss_mib\": %.1f},\n"
           " \"export\": {\"seconds\": %.3f, \"mb_per_s\": %.1f, \"peak_rss_mib\": %.1f, "
           "\"peak_work_buffers_mib\": %.1f},\n"
           " \"largest_tensor_f32_mib\": %.1f, \"export_over_copy_time\": %.2f}\n",
           in, plan->has_qtype ? lb_export_qtype_name(plan->qtype) : "(none)",
           lb_export_mode_name(plan->mode), plan->n_tensors, rc.bytes_in / 1e6,
           (double)plan->file_bytes / 1e6, rc.seconds, rc.bytes_in / rc.seconds / 1e6,
           (double)rss_c / 1024, re.seconds, re.bytes_in / re.seconds / 1e6, (double)rss_e / 1024,
           re.peak_buffer / 1048576, (double)largest / 1048576, re.seconds / rc.seconds);
    lb_export_plan_free(plan);
    return 0;
}
