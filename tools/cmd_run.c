/* lowbit run — generate text from a prompt (streaming). */
#include "cli.h"

#include "lowbit/generate.h"
#include "lowbit/model.h"
#include "lowbit/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define MAX_STOPS 16

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit run MODEL -p TEXT [options]\n"
            "\n"
            "Generate a continuation of TEXT with MODEL (a Hugging Face\n"
            "checkpoint directory or a GGUF file). The new text is printed\n"
            "as it is generated; a stats line goes to stderr (unless --quiet).\n"
            "\n"
            "  -p, --prompt TEXT        prompt (BOS added as the tokenizer's\n"
            "                           post-processor does)\n"
            "  -n, --n-predict N        max new tokens (default 128; -1 = until\n"
            "                           the context is full)\n"
            "      --temp T             temperature (default 0 = greedy)\n"
            "      --top-k K            keep the K most likely (default 0 = off)\n"
            "      --top-p P            nucleus sampling (default 1 = off)\n"
            "      --min-p P            drop p < P * p_max (default 0 = off)\n"
            "      --repeat-penalty R   repetition penalty (default 1 = off)\n"
            "      --repeat-last-n N    penalty window (default 64, -1 = all)\n"
            "      --presence-penalty X, --frequency-penalty X (default 0)\n"
            "      --seed S             PRNG seed (default 0)\n"
            "      --stop STR           stop when STR appears (repeatable)\n"
            "      --ignore-eos         do not stop at end-of-sequence tokens\n"
            "  -t, --threads N          threads (default: all CPUs)\n"
            "  -c, --ctx N              context length (default: min(model max,\n"
            "                           4096))\n"
            "      --no-stream          print the text only at the end\n"
            "global: --quiet (no stats), --json (one JSON object: text, tokens,\n"
            "n_prompt, n_gen, prefill_tps, decode_tps, stop_reason)\n");
}

static lb_status detok(void *user, const int32_t *ids, size_t n, char **text,
                       size_t *len) {
    return lb_tokenizer_decode(user, ids, n, true, text, len);
}

typedef struct run_stream {
    bool print;
} run_stream;

static bool on_token(void *user, int32_t token, const char *text, size_t len) {
    run_stream *rs = user;
    (void)token;
    if (rs->print && len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    return true;
}

int cmd_run(int argc, char **argv) {
    const char *cmd = "run";
    const char *model_path = NULL, *prompt = NULL;
    const char *stops[MAX_STOPS];
    int n_stops = 0;
    long n_predict = 128, top_k = 0, threads = 0, n_ctx = 0, last_n = 64;
    double temp = 0, top_p = 1, min_p = 0, rep = 1, pres = 0, freq = 0;
    long long seed = 0;
    bool stream = true, ignore_eos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
#define VAL() \
    do { if (!(v = cli_value(cmd, argc, argv, &i))) return 2; } while (0)
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VAL();
            prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, -1, 1L << 24, &n_predict)) return 2;
        } else if (!strcmp(a, "--temp")) {
            VAL();
            if (!cli_parse_float(cmd, a, v, 0, 100, &temp)) return 2;
        } else if (!strcmp(a, "--top-k")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 0, 1L << 24, &top_k)) return 2;
        } else if (!strcmp(a, "--top-p")) {
            VAL();
            if (!cli_parse_float(cmd, a, v, 0, 1, &top_p)) return 2;
        } else if (!strcmp(a, "--min-p")) {
            VAL();
            if (!cli_parse_float(cmd, a, v, 0, 1, &min_p)) return 2;
        } else if (!strcmp(a, "--repeat-penalty")) {
            VAL();
            if (!cli_parse_float(cmd, a, v, 1e-3, 100, &rep)) return 2;
        } else if (!strcmp(a, "--repeat-last-n")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, -1, 1L << 24, &last_n)) return 2;
        } else if (!strcmp(a, "--presence-penalty")) {
            VAL();
            if (!cli_parse_float(cmd, a, v, -2, 2, &pres)) return 2;
        } else if (!strcmp(a, "--frequency-penalty")) {
            VAL();
            if (!cli_parse_float(cmd, a, v, -2, 2, &freq)) return 2;
        } else if (!strcmp(a, "--seed")) {
            VAL();
            char *end;
            seed = strtoll(v, &end, 10);
            if (end == v || *end)
                return cli_usage_error(cmd, "--seed: expected an integer, "
                                       "got '%s'", v);
        } else if (!strcmp(a, "--stop")) {
            VAL();
            if (n_stops == MAX_STOPS)
                return cli_usage_error(cmd, "at most %d --stop strings",
                                       MAX_STOPS);
            if (!v[0]) return cli_usage_error(cmd, "--stop: empty string");
            stops[n_stops++] = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1024, &threads)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            VAL();
            if (!cli_parse_int(cmd, a, v, 1, 1L << 24, &n_ctx)) return 2;
        } else if (!strcmp(a, "--no-stream")) {
            stream = false;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option %s", a);
        } else if (!model_path) {
            model_path = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
#undef VAL
    }
    if (!model_path) return cli_usage_error(cmd, "missing MODEL");
    if (!prompt) return cli_usage_error(cmd, "missing -p TEXT");

    int rc = 1;
    lb_model *model = NULL;
    lb_tokenizer *tok = NULL;
    lb_context *ctx = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    lb_generate_result res;
    memset(&res, 0, sizeof res);
    cli_progress prog;
    lb_model_load_opts lo = {cli_progress_make(&prog)};
    lb_status st = lb_model_load(model_path, &lo, &model);
    cli_progress_done(&prog);
    if (st != LB_OK) return cli_fail(cmd, st);
    if ((st = lb_tokenizer_load(model_path, &tok)) != LB_OK) {
        rc = cli_fail(cmd, st);
        goto out;
    }
    if ((st = lb_tokenizer_encode(tok, prompt, strlen(prompt), true, &ids,
                                  &n_ids)) != LB_OK) {
        rc = cli_fail(cmd, st);
        goto out;
    }
    if (n_ids == 0) {
        fprintf(stderr, "lowbit run: the prompt encodes to no tokens\n");
        goto out;
    }
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = (int32_t)n_ctx;
    cp.n_threads = (int)threads;
    if ((st = lb_context_create(model, &cp, &ctx)) != LB_OK) {
        rc = cli_fail(cmd, st);
        goto out;
    }
    run_stream rs = {stream && !g_cli.json};
    lb_generate_params gp = lb_generate_default_params();
    gp.n_predict = (int32_t)n_predict;
    gp.ignore_eos = ignore_eos;
    gp.sampling.temperature = (float)temp;
    gp.sampling.top_k = (int32_t)top_k;
    gp.sampling.top_p = (float)top_p;
    gp.sampling.min_p = (float)min_p;
    gp.sampling.repeat_penalty = (float)rep;
    gp.sampling.penalty_last_n = (int32_t)last_n;
    gp.sampling.presence_penalty = (float)pres;
    gp.sampling.frequency_penalty = (float)freq;
    gp.sampling.seed = (uint64_t)seed;
    gp.stop = stops;
    gp.n_stop = n_stops;
    gp.detok = (lb_detok){detok, tok};
    gp.on_token = on_token;
    gp.user = &rs;
    st = lb_generate(ctx, ids, (int32_t)n_ids, &gp, &res);
    if (st != LB_OK) {
        if (rs.print) fputc('\n', stdout);
        rc = cli_fail(cmd, st);
        goto out;
    }
    double prefill_tps = res.prefill_s > 0 ? res.n_prompt / res.prefill_s : 0;
    double decode_tps = res.decode_s > 0 ? res.n_decode / res.decode_s : 0;
    if (g_cli.json) {
        printf("{\"text\": ");
        cli_json_string(stdout, res.text ? res.text : "");
        printf(", \"tokens\": [");
        for (int32_t i = 0; i < res.n_tokens; i++)
            printf("%s%d", i ? ", " : "", (int)res.tokens[i]);
        printf("], \"n_prompt\": %d, \"n_gen\": %d, \"prefill_tps\": %.3f, "
               "\"decode_tps\": %.3f, \"stop_reason\": \"%s\"}\n",
               (int)res.n_prompt, (int)res.n_tokens, prefill_tps, decode_tps,
               lb_stop_reason_name(res.stop_reason));
    } else {
        if (!stream && res.text) fwrite(res.text, 1, res.text_len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        if (!g_cli.quiet)
            fprintf(stderr,
                    "lowbit run: prompt %d tokens (%.1f tok/s), generated %d "
                    "tokens (%.1f tok/s), stop: %s, %d threads\n",
                    (int)res.n_prompt, prefill_tps, (int)res.n_tokens,
                    decode_tps, lb_stop_reason_name(res.stop_reason),
                    lb_pool_size(lb_context_pool(ctx)));
    }
    rc = 0;
out:
    lb_generate_result_free(&res);
    free(ids);
    lb_context_free(ctx);
    lb_tokenizer_free(tok);
    lb_model_free(model);
    return rc;
}
