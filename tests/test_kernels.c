/* Kernels: every variant the running CPU supports against the scalar
 * reference, with the cases of tests/kernel_cases.h (exact and realistic
 * data on awkward sizes, tile invariance, activation quantizers byte for
 * byte, Q4_0/Q8_0 SIMD variants bit-identical to AVX2, lb_matmul against a float64 oracle with 1/2/3 threads), plus
 * lb_matmul's error paths and the LB_FORCE_REF / LB_KERNELS switches.
 * Prints which variants were tested and which cannot run on this CPU (the
 * AVX-512/VNNI/AMX kernels also run, on emulated intrinsics, in
 * tests/test_kernels_emu.c).
 * Standalone: ./build/test_kernels (add -v for per-case lines). */
#include "th.h"
#include "kernel_cases.h"

#include <sys/wait.h>
#include <unistd.h>

static int n_compared[LB_KV_COUNT];

static void test_variants_vs_ref(void) {
    for (int v = 1; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v)) n_compared[v] += kc_check_table(lb_kernels_table(v));
}

static void test_simd_same_bits(void) {
    const int64_t ins[] = {32, 96, 32 * 300}, toks[] = {1, 4, 15, 16, 17, 64, 65, 130};
    for (int v = LB_KV_AVX2 + 1; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v))
            fprintf(stderr, "  %s: %d products bit-identical to avx2 (Q4_0, Q8_0)\n",
                    lb_kernels_table(v)->name,
                    kc_same_bits_as_avx2(lb_kernels_table(v), ins, 3, toks, 8));
}

static void test_qact_edges(void) {
    for (int v = 1; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v)) kc_qact_edges(lb_kernels_table(v));
}

static void test_matmul_oracle_and_threads(void) {
    for (int v = 0; v < LB_KV_COUNT; v++)
        if (lb_kernels_usable(v)) kc_matmul_oracle_and_threads(lb_kernels_table(v));
}

static void test_matmul_errors(void) {
    float x[64] = {0}, y[64];
    uint8_t w[2048] = {0};
    lb_tensor W = {"blk.0.bad", LB_TYPE_Q8_1, 2, {2, 32}, w, sizeof w};
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_UNSUPPORTED);
    TH_CHECK(strstr(lb_last_error(), "blk.0.bad") != NULL);
    W.type = LB_TYPE_I32;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_UNSUPPORTED);
    W.type = LB_TYPE_Q4_0;
    W.shape[1] = 48;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_INVALID_ARG);
    W.shape[1] = 256;
    W.type = LB_TYPE_Q4_K;
    W.nbytes = 100;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_INVALID_ARG);
    W.n_dims = 3;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, 1), LB_ERR_INVALID_ARG);
    W.n_dims = 2;
    W.nbytes = sizeof w;
    TH_CHECK_FAILS(lb_matmul(NULL, &W, x, y, -1), LB_ERR_INVALID_ARG);
    TH_CHECK_OK(lb_matmul(NULL, &W, x, y, 0));
}

/* LB_FORCE_REF=1 selects the reference path: checked in a child process
 * (the choice is made once per process). */
static int run_child(const char *env, const char *val, const char *want) {
    pid_t pid = fork();
    if (pid == 0) {
        setenv(env, val, 1);
        execl("/proc/self/exe", "test_kernels", "--print-variant", want, (char *)NULL);
        _exit(3);
    }
    int status = 0;
    if (pid <= 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
static void test_force_ref(void) {
    TH_CHECK_INT(run_child("LB_FORCE_REF", "1", "ref"), 0);
    /* LB_KERNELS caps the family: "ref" always, "avx2" where usable */
    TH_CHECK_INT(run_child("LB_KERNELS", "ref", "ref"), 0);
    if (lb_kernels_usable(LB_KV_AVX2)) TH_CHECK_INT(run_child("LB_KERNELS", "avx2", "avx2"), 0);
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--print-variant") == 0)
        return strcmp(lb_kernels_variant(), argv[2]) == 0 ? 0 : 1;
    kc_verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    char feats[256];
    fprintf(stderr, "cpu: %s\nlb_matmul uses: %s\n", lb_cpu_describe(feats, sizeof feats),
            lb_kernels_variant());
    TH_RUN(test_variants_vs_ref);
    TH_RUN(test_simd_same_bits);
    TH_RUN(test_qact_edges);
    TH_RUN(test_matmul_oracle_and_threads);
    TH_RUN(test_matmul_errors);
    TH_RUN(test_force_ref);
    for (int v = 0; v < LB_KV_COUNT; v++) {
        const lb_kernel_table *kt = lb_kernels_table(v);
        if (!lb_kernels_usable(v))
            fprintf(stderr, "variant %-12s NOT RUNNABLE on this CPU (not tested)\n", kt->name);
        else if (v == LB_KV_REF)
            fprintf(stderr, "variant %-12s tested (reference; oracle + threads)\n", kt->name);
        else
            fprintf(stderr, "variant %-12s tested: %d kernel cases vs ref + oracle + threads\n",
                    kt->name, n_compared[v]);
    }
    lb_kernels_release_scratch();
    return th_report();
}
