/* lowbit serve — an OpenAI-compatible HTTP server (lowbit/server.h). */
#include "cli.h"
#include "cli_lora.h"

#include "lowbit/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit serve MODEL [options]\n"
            "\n"
            "Serve MODEL (a GGUF file, a GPTQ checkpoint or a Hugging Face\n"
            "checkpoint directory) over an OpenAI-compatible HTTP API:\n"
            "GET /health, GET /v1/models, POST /v1/completions,\n"
            "POST /v1/chat/completions (streaming with \"stream\": true).\n"
            "Prints 'listening on http://HOST:PORT' on stdout once ready;\n"
            "SIGINT/SIGTERM stop it gracefully.\n"
            "\n"
            "      --host H          address to bind (default 127.0.0.1)\n"
            "      --port P          port (default 8080; 0 = any free port)\n"
            "  -np, --parallel N     requests decoded concurrently, batched\n"
            "                        (default 1)\n"
            "  -c, --ctx N           context per request slot (default:\n"
            "                        min(model max, 4096))\n"
            "      --batch N         max tokens per scheduler step (prompt\n"
            "                        chunks + decode tokens; default 256)\n"
            "      --queue N         requests waiting beyond the slots before\n"
            "                        503 (default 64)\n"
            "      --max-body BYTES  request body limit (default 1048576)\n"
            "      --api-key KEY     require 'Authorization: Bearer KEY'\n"
            "                        (also read from LOWBIT_API_KEY)\n"
            "      --name NAME       model id reported (default: MODEL's\n"
            "                        base name)\n"
            "      --drain S         on shutdown, let requests finish for up\n"
            "                        to S seconds (default 5)\n"
            "  -t, --threads N       compute threads (default: all CPUs)\n"
            "      --lora ADAPTER    LoRA adapter (PEFT dir or LoRA .gguf), listed\n"
            "                        in /v1/models; requests pick adapters with\n"
            "                        \"lora\": [{\"id\"|\"name\", \"scale\"}] or\n"
            "                        \"model\": NAME (repeatable; default: all)\n"
            "      --lora-scale S    default scale of the preceding --lora\n"
            "      --max-conn N      live connections (default 256); a new\n"
            "                        one beyond it closes the oldest idle one\n"
            "      --max-conn-per-ip N  the same per client address (default:\n"
            "                        --max-conn / 2)\n"
            "      --idle-timeout S  close a connection without a request for\n"
            "                        S seconds (default 10)\n"
            "      --read-timeout S  a request's headers and body must arrive\n"
            "                        within S seconds (default 30)\n"
            "      --timeout S       close a socket that stalls for S seconds\n"
            "                        while a request or answer is in transit\n"
            "                        (default 60)\n"
            "      --special-in-content  let chat message text produce\n"
            "                        special tokens (e.g. <|im_end|>) as\n"
            "                        transformers does; default: plain text\n"
            "      --no-cache        serve a GPTQ checkpoint directory as it\n"
            "                        is, without its GGUF cache\n"
            "\n"
            "A GPTQ checkpoint directory is exported once to a GGUF cache,\n"
            "MODEL/lowbit-cache/model.gguf (or $XDG_CACHE_HOME/lowbit/ when\n"
            "MODEL is not writable), re-used while the checkpoint is unchanged\n"
            "and rebuilt when it changes; tokenizer, chat template and EOS\n"
            "ids still come from MODEL (docs/server.md).\n");
}

/* Progress that also stops the load (a first export can take minutes) on
 * SIGINT/SIGTERM: they are blocked, so a pending one is looked for. */
typedef struct serve_progress {
    lb_progress inner;
    const sigset_t *stop;
} serve_progress;

static bool serve_progress_cb(void *user, const char *stage, uint64_t done,
                              uint64_t total) {
    serve_progress *sp = user;
    sigset_t pend;
    if (sigpending(&pend) == 0)
        for (int sig = 1; sig < NSIG; sig++)
            if (sigismember(sp->stop, sig) == 1 && sigismember(&pend, sig) == 1)
                return false;
    return lb_progress_report(&sp->inner, stage, done, total);
}

static const char *base_name(const char *path, char *buf, size_t size) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(buf, size, "%.*s", (int)(n - b), path + b);
    return buf;
}

int cmd_serve(int argc, char **argv) {
    const char *cmd = "serve";
    const char *model_path = NULL, *name = NULL;
    lb_server_config cfg = lb_server_default_config();
    bool no_cache = false;
    cfg.api_key = getenv("LOWBIT_API_KEY");
    long v, drain = 5;
    cli_lora lora = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *s;
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
    do { if (!(s = cli_value(cmd, argc, argv, &i))) return 2; } while (0)
#define INT(lo, hi) \
    do { VAL(); if (!cli_parse_int(cmd, a, s, lo, hi, &v)) return 2; } while (0)
        if (!strcmp(a, "--host")) {
            VAL();
            cfg.host = s;
        } else if (!strcmp(a, "--port")) {
            INT(0, 65535);
            cfg.port = (int)v;
        } else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            INT(1, 256);
            cfg.n_parallel = (int)v;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            INT(2, 1L << 24);
            cfg.n_ctx = (int32_t)v;
        } else if (!strcmp(a, "--batch")) {
            INT(1, 65536);
            cfg.n_batch = (int32_t)v;
        } else if (!strcmp(a, "--queue")) {
            INT(0, 1L << 20);
            cfg.max_queue = (int)v;
        } else if (!strcmp(a, "--max-body")) {
            INT(64, 1L << 30);
            cfg.max_body_bytes = (size_t)v;
        } else if (!strcmp(a, "--api-key")) {
            VAL();
            cfg.api_key = s;
        } else if (!strcmp(a, "--name")) {
            VAL();
            name = s;
        } else if (!strcmp(a, "--drain")) {
            INT(0, 3600);
            drain = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            INT(1, 1024);
            cfg.n_threads = (int)v;
        } else if (!strcmp(a, "--no-cache")) {
            no_cache = true;
        } else if (!strcmp(a, "--max-conn")) {
            INT(1, 65536);
            cfg.max_connections = (int)v;
        } else if (!strcmp(a, "--max-conn-per-ip")) {
            INT(1, 65536);
            cfg.max_connections_per_ip = (int)v;
        } else if (!strcmp(a, "--idle-timeout")) {
            INT(1, 86400);
            cfg.idle_timeout_s = (unsigned)v;
        } else if (!strcmp(a, "--read-timeout")) {
            INT(1, 86400);
            cfg.read_timeout_s = (unsigned)v;
        } else if (!strcmp(a, "--timeout")) {
            INT(1, 86400);
            cfg.timeout_s = (unsigned)v;
        } else if (!strcmp(a, "--special-in-content")) {
            cfg.special_in_content = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option %s", a);
        } else if (!model_path) {
            model_path = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
#undef INT
#undef VAL
    }
    if (!model_path) return cli_usage_error(cmd, "missing MODEL");
    char namebuf[256];
    cfg.model_name = name ? name : base_name(model_path, namebuf, sizeof namebuf);

    /* SIGINT/SIGTERM are taken by sigwait below: block them before any
     * thread starts so that every thread inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    lb_model *model = NULL;
    lb_tokenizer *tok = NULL;
    cli_progress prog;
    serve_progress sp = {.inner = cli_progress_make(&prog), .stop = &set};
    lb_server_load_opts lo;
    lb_server_load_opts_default(&lo);
    lo.model.progress = (lb_progress){serve_progress_cb, &sp};
    lo.gguf_cache = !no_cache;
    lo.n_threads = cfg.n_threads;
    lb_status st = lb_server_load_model_ex(model_path, &lo, &model, &tok);
    cli_progress_done(&prog);
    if (st != LB_OK) return cli_fail(cmd, st);
    lb_server *srv = NULL;
    if ((st = cli_lora_load(&lora, model)) == LB_OK) {
        cfg.loras = cli_lora_set(&lora);
        st = lb_server_start(model, tok, &cfg, &srv);
    }
    if (st != LB_OK) {
        int rc = cli_fail(cmd, st);
        cli_lora_free(&lora);
        lb_tokenizer_free(tok);
        lb_model_free(model);
        return rc;
    }
    const char *host = cfg.host ? cfg.host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    printf("listening on http://%s%s%s:%d\n", v6 ? "[" : "", host,
           v6 ? "]" : "", lb_server_port(srv));
    fflush(stdout);
    if (!g_cli.quiet)
        fprintf(stderr,
                "lowbit serve: model '%s', %d slot(s), %s%s\n",
                cfg.model_name, cfg.n_parallel,
                cfg.api_key && cfg.api_key[0] ? "API key required" : "no API key",
                "; Ctrl-C to stop");
    int sig = 0;
    sigwait(&set, &sig);
    if (!g_cli.quiet)
        fprintf(stderr, "lowbit serve: %s, stopping (draining up to %lds)\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", drain);
    lb_server_stats stats;
    lb_server_get_stats(srv, &stats);
    lb_server_stop(srv, (unsigned)drain * 1000u);
    if (!g_cli.quiet)
        fprintf(stderr,
                "lowbit serve: %llu requests, %llu generations completed, "
                "%llu cancelled, %llu busy (503), %llu tokens generated\n",
                (unsigned long long)stats.requests,
                (unsigned long long)stats.completed,
                (unsigned long long)stats.cancelled,
                (unsigned long long)stats.rejected_busy,
                (unsigned long long)stats.tokens_generated);
    cli_lora_free(&lora);
    lb_tokenizer_free(tok);
    lb_model_free(model);
    return 0;
}
