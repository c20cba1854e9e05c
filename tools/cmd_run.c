/* lowbit run — generate text from a prompt (streaming). */
#include "cli.h"
#include "cli_lora.h"

#include "lowbit/file.h"
#include "lowbit/generate.h"
#include "lowbit/model.h"
#include "lowbit/server.h"
#include "lowbit/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_STOPS 16

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit run MODEL (-p TEXT | -p - | -f FILE) [options]\n"
            "       lowbit run MODEL --chat [options]\n"
            "\n"
            "Generate a continuation of TEXT with MODEL (a Hugging Face\n"
            "checkpoint directory, GPTQ checkpoint or GGUF file). The new text\n"
            "is printed as it is generated; a stats line goes to stderr (unless\n"
            "--quiet).\n"
            "With --chat: an interactive chat. Each line read from standard\n"
            "input is a user message; the conversation is rendered with the\n"
            "model's chat template (ChatML when it has none; as lowbit serve's\n"
            "/v1/chat/completions) and the assistant's reply is streamed, one\n"
            "reply per line. -n limits each reply (default: the rest of the\n"
            "context). Works with a pipe as well as a terminal.\n"
            "\n"
            "      --chat               interactive chat (see above)\n"
            "      --system TEXT        system message for --chat\n"
            "  -p, --prompt TEXT        prompt (BOS added as the tokenizer's\n"
            "                           post-processor does); '-' reads it from\n"
            "                           standard input\n"
            "  -f, --file FILE          read the prompt from FILE\n"
            "      --truncate           a prompt longer than the context keeps its\n"
            "                           first token (BOS) and its last tokens, so\n"
            "                           that n-predict tokens (at least 1) still fit\n"
            "                           (llama-server's truncation); without it such\n"
            "                           a prompt is an error, as in llama-cli\n"
            "  -n, --n-predict N        max new tokens (default 128; -1 = until\n"
            "                           the context is full)\n"
            "      --temp T             temperature (default 0 = greedy)\n"
            "      --top-k K            keep the K most likely (default 0 = off)\n"
            "      --top-p P            nucleus sampling (default 1 = off)\n"
            "      --min-p P            drop p < P * p_max (default 0 = off)\n"
            "      --repeat-penalty R   repetition penalty (default 1 = off)\n"
            "      --repeat-last-n N    penalty window (default 64, -1 = all)\n"
            "      --presence-penalty X, --frequency-penalty X (default 0)\n"
            "      --seed S             PRNG seed (default 0; -1 = random, the\n"
            "                           seed used is printed to stderr / in --json)\n"
            "      --stop STR           stop when STR appears (repeatable)\n"
            "      --ignore-eos         do not stop at end-of-sequence tokens\n"
            "  -t, --threads N          threads (default: all CPUs)\n"
            CLI_LORA_USAGE
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

/* --chat: read user lines, keep the conversation, stream each reply.
 * Returns the exit code. */
static int run_chat(lb_context *ctx, lb_tokenizer *tok,
                    lb_generate_params *gp, const char **user_stops,
                    int n_user_stops, const char *system_msg) {
    const char *cmd = "run";
    lb_chat_prompt *cp = NULL;
    lb_status st = lb_chat_prompt_create(tok, &cp);
    if (st != LB_OK) return cli_fail(cmd, st);
    const char *stops[MAX_STOPS + 4];
    int n_stops = 0;
    for (int i = 0; i < n_user_stops; i++) stops[n_stops++] = user_stops[i];
    for (const char *const *s = lb_chat_prompt_stops(cp); *s; s++)
        stops[n_stops++] = *s;
    cJSON *msgs = cJSON_CreateArray();
    if (!msgs) {
        lb_chat_prompt_free(cp);
        fprintf(stderr, "lowbit run: out of memory\n");
        return 1;
    }
    if (system_msg) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", system_msg);
        cJSON_AddItemToArray(msgs, m);
    }
    run_stream rs = {!g_cli.json};
    gp->stop = stops;
    gp->n_stop = n_stops;
    gp->detok = (lb_detok){detok, tok};
    gp->on_token = on_token;
    gp->user = &rs;
    gp->cache_prompt = true; /* each turn re-uses the conversation so far */
    bool tty = isatty(0);
    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty && !g_cli.json) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0) continue;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", line);
        cJSON_AddItemToArray(msgs, m);
        char *mj = cJSON_PrintUnformatted(msgs);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        st = mj ? lb_chat_prompt_apply(cp, tok, mj, NULL, &ids, &n_ids)
                : lb_set_error(LB_ERR_NOMEM, "out of memory");
        free(mj);
        if (st == LB_OK && (int64_t)n_ids >= lb_context_n_ctx(ctx))
            st = lb_set_error(LB_ERR_RANGE,
                              "the conversation (%zu tokens) no longer fits "
                              "the context (%d); start again or use -c",
                              n_ids, (int)lb_context_n_ctx(ctx));
        lb_generate_result res;
        memset(&res, 0, sizeof res);
        if (st == LB_OK)
            st = lb_generate(ctx, ids, (int32_t)n_ids, gp, &res);
        free(ids);
        if (st != LB_OK) {
            lb_generate_result_free(&res);
            rc = cli_fail(cmd, st);
            break;
        }
        if (g_cli.json) {
            printf("{\"reply\": ");
            cli_json_string(stdout, res.text ? res.text : "");
            printf(", \"n_prompt\": %d, \"n_reused\": %d, \"n_gen\": %d, "
                   "\"stop_reason\": \"%s\"}\n",
                   (int)res.n_prompt, (int)res.n_reused, (int)res.n_tokens,
                   lb_stop_reason_name(res.stop_reason));
        } else {
            fputc('\n', stdout);
        }
        fflush(stdout);
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", res.text ? res.text : "");
        cJSON_AddItemToArray(msgs, m);
        lb_generate_result_free(&res);
    }
    free(line);
    cJSON_Delete(msgs);
    lb_chat_prompt_free(cp);
    return rc;
}

int cmd_run(int argc, char **argv) {
    const char *cmd = "run";
    const char *model_path = NULL, *prompt = NULL;
    const char *stops[MAX_STOPS];
    int n_stops = 0;
    long n_predict = 128, top_k = 0, threads = 0, n_ctx = 0, last_n = 64;
    double temp = 0, top_p = 1, min_p = 0, rep = 1, pres = 0, freq = 0;
    long long seed = 0;
    bool stream = true, ignore_eos = false, chat = false, n_set = false;
    bool truncate = false, random_seed = false;
    const char *prompt_file = NULL;
    char *prompt_buf = NULL;
    const char *system_msg = NULL;
    cli_lora lora = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        {
            const int lr = cli_lora_arg(&lora, cmd, argc, argv, &i);
            if (lr < 0) return 2;
            if (lr) continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
#define VAL() \
    do { if (!(v = cli_value(cmd, argc, argv, &i))) return 2; } while (0)
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            VAL();
            prompt = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            VAL();
            prompt_file = v;
        } else if (!strcmp(a, "--truncate")) {
            truncate = true;
        } else if (!strcmp(a, "--chat")) {
            chat = true;
        } else if (!strcmp(a, "--system")) {
            VAL();
            system_msg = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VAL();
            n_set = true;
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
            if (end == v || *end || seed < -1)
                return cli_usage_error(cmd, "--seed: expected an integer >= 0 "
                                       "or -1 (random), got '%s'", v);
            random_seed = seed == -1;
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
    if (prompt && prompt_file)
        return cli_usage_error(cmd, "give -p or -f, not both");
    if (!prompt && !prompt_file && !chat)
        return cli_usage_error(cmd, "missing -p TEXT (or -f FILE, -p - for stdin)");
    if ((prompt || prompt_file) && chat)
        return cli_usage_error(cmd, "-p/-f and --chat are exclusive");
    if (prompt_file || (prompt && !strcmp(prompt, "-"))) {
        /* a long prompt: from a file or standard input (64 MiB at most) */
        size_t len = 0;
        lb_status rs = prompt_file ? lb_read_file(prompt_file, (size_t)64 << 20, &prompt_buf, &len)
                                   : cli_read_stdin((size_t)64 << 20, &prompt_buf, &len);
        if (rs != LB_OK) return cli_fail(cmd, rs);
        if (strlen(prompt_buf) != len) {
            free(prompt_buf);
            fprintf(stderr, "lowbit run: the prompt contains a NUL byte\n");
            return 1;
        }
        prompt = prompt_buf;
    }
    if (random_seed) {
        uint64_t r = 0;
        FILE *ur = fopen("/dev/urandom", "rb");
        if (!ur || fread(&r, sizeof r, 1, ur) != 1)
            r = (uint64_t)lb_time_s() * 1000003u ^ (uint64_t)getpid();
        if (ur) fclose(ur);
        seed = (long long)(r >> 1); /* non-negative, reusable with --seed */
        if (!g_cli.quiet && !g_cli.json)
            fprintf(stderr, "lowbit run: --seed -1: using seed %lld\n", seed);
    }

    int rc = 1;
    lb_model *model = NULL;
    lb_tokenizer *tok = NULL;
    lb_context *ctx = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    lb_generate_result res;
    memset(&res, 0, sizeof res);
    cli_progress prog;
    lb_model_load_opts lo = {.progress = cli_progress_make(&prog)};
    lb_status st = lb_server_load_model(model_path, &lo, &model, &tok);
    cli_progress_done(&prog);
    if (st != LB_OK) {
        free(prompt_buf);
        return cli_fail(cmd, st);
    }
    const int32_t max_pos = model->config.max_position_embeddings;
    if (max_pos > 0 && n_ctx > max_pos) {
        fprintf(stderr, "lowbit run: --ctx %ld exceeds the model's context "
                "length %d (max_position_embeddings)\n", n_ctx, (int)max_pos);
        rc = 2;
        goto out;
    }
    lb_context_params cp = lb_context_default_params();
    cp.n_ctx = (int32_t)n_ctx;
    cp.n_threads = (int)threads;
    if ((st = lb_context_create(model, &cp, &ctx)) != LB_OK) {
        rc = cli_fail(cmd, st);
        goto out;
    }
    if (lora.n) {
        lb_lora_set ls;
        if ((st = cli_lora_load(&lora, model)) == LB_OK) {
            ls = cli_lora_set(&lora);
            st = lb_context_set_loras(ctx, &ls);
        }
        if (st != LB_OK) {
            rc = cli_fail(cmd, st);
            goto out;
        }
    }
    lb_generate_params gp = lb_generate_default_params();
    /* a chat reply runs to EOS (or the context) unless -n is given */
    gp.n_predict = chat && !n_set ? -1 : (int32_t)n_predict;
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
    if (chat) {
        rc = run_chat(ctx, tok, &gp, stops, n_stops, system_msg);
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
    {
        /* a prompt longer than the context: an error (llama-cli), or with
         * --truncate the first token and the last ones (llama-server) */
        const size_t n_ctx_eff = (size_t)lb_context_n_ctx(ctx);
        size_t room = gp.n_predict > 0 ? (size_t)gp.n_predict : 1;
        if (room >= n_ctx_eff) room = n_ctx_eff / 2;
        if (room < 1) room = 1;
        const size_t keep = n_ctx_eff - room;
        if (n_ids > keep) {
            if (!truncate || keep < 2) {
                fprintf(stderr, "lowbit run: error: the prompt is %zu tokens and the "
                        "context holds %zu with %zu for the reply (-c to enlarge it, "
                        "-n to shorten the reply, or --truncate to keep its first "
                        "token and its last %zu)\n",
                        n_ids, n_ctx_eff, room, keep > 1 ? keep - 1 : 0);
                goto out;
            }
            const size_t drop = n_ids - keep;
            memmove(ids + 1, ids + 1 + drop, (keep - 1) * sizeof *ids);
            if (!g_cli.quiet)
                fprintf(stderr, "lowbit run: --truncate: the prompt's %zu tokens do not "
                        "fit the context (%zu, %zu kept for the reply): kept the first "
                        "and the last %zu, dropped %zu\n",
                        n_ids, n_ctx_eff, room, keep - 1, drop);
            n_ids = keep;
        }
    }
    run_stream rs = {stream && !g_cli.json};
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
               "\"decode_tps\": %.3f, \"stop_reason\": \"%s\", \"seed\": %lld}\n",
               (int)res.n_prompt, (int)res.n_tokens, prefill_tps, decode_tps,
               lb_stop_reason_name(res.stop_reason), seed);
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
    free(prompt_buf);
    free(ids);
    lb_context_free(ctx);
    cli_lora_free(&lora);
    lb_tokenizer_free(tok);
    lb_model_free(model);
    return rc;
}
