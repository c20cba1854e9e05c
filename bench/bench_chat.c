/*
 * bench_chat — chat-template render time (lowbit/chat.h) for a 10-message
 * conversation (~2 KB of text, one assistant turn with a <think> block,
 * add_generation_prompt, enable_thinking=false) with the Qwen3 template
 * from ../shared/tokenizers/qwen3 (or $LB_SHARED), after one compile.
 * Target: well under 1 ms per render.
 *
 * Baselines measured in the same run: the ChatML fallback template on the
 * same messages (the least a Jinja render can cost: JSON input + a loop),
 * and cJSON parsing of the messages alone.
 *
 *   bench_chat [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lowbit/chat.h"

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (p && n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p) p[n > 0 ? n : 0] = 0;
    fclose(f);
    return p;
}

static const char *k_text =
    "Quantization maps floating-point weights to a small set of levels; GPTQ "
    "compensates the rounding error column by column using second-order "
    "information from calibration activations, so 4-bit models stay close to "
    "the original. ";

/* seconds per call of fn over at least min_time */
typedef void (*bench_fn)(void *);
static double time_it(bench_fn fn, void *ctx, double min_time) {
    int iters = 1;
    for (;;) {
        double t0 = lb_time_s();
        for (int i = 0; i < iters; i++) fn(ctx);
        double dt = lb_time_s() - t0;
        if (dt >= min_time) return dt / iters;
        iters = dt > 0 ? (int)(iters * (min_time / dt) * 1.2) + 1 : iters * 10;
    }
}

typedef struct {
    const lb_chat_template *t;
    const char *msgs, *extra;
    size_t len;
} render_ctx;

static void do_render(void *p) {
    render_ctx *c = p;
    char *out = NULL;
    size_t n = 0;
    if (lb_chat_template_render(c->t, c->msgs, c->extra, &out, &n) != LB_OK) {
        fprintf(stderr, "render failed: %s\n", lb_last_error());
        exit(1);
    }
    c->len = n;
    free(out);
}

static void do_parse(void *p) {
    render_ctx *c = p;
    cJSON_Delete(cJSON_Parse(c->msgs));
}

int main(int argc, char **argv) {
    double min_time = (argc > 1 && strcmp(argv[1], "--quick") == 0) ? 0.2 : 1.0;
    const char *root = getenv("LB_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer_config.json", root ? root : "../shared");
    char *cfg = read_text(path);
    if (!cfg) {
        fprintf(stderr, "bench_chat: cannot read %s (run from the project root)\n", path);
        return 77;
    }
    cJSON *cj = cJSON_Parse(cfg);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(cj, "chat_template");
    if (!cJSON_IsString(src)) {
        fprintf(stderr, "bench_chat: no chat_template in %s\n", path);
        return 1;
    }
    /* 10 messages: system, then user/assistant turns */
    cJSON *msgs = cJSON_CreateArray();
    for (int i = 0; i < 10; i++) {
        cJSON *m = cJSON_CreateObject();
        const char *role = i == 0 ? "system" : (i % 2 ? "user" : "assistant");
        char content[1024];
        snprintf(content, sizeof content, "%s%s[%d]", i == 6 ? "<think>\nLet me think.\n</think>\n\n" : "",
                 k_text, i);
        cJSON_AddStringToObject(m, "role", role);
        cJSON_AddStringToObject(m, "content", content);
        cJSON_AddItemToArray(msgs, m);
    }
    char *mj = cJSON_PrintUnformatted(msgs);
    const char *extra = "{\"add_generation_prompt\":true,\"enable_thinking\":false,\"eos_token\":\"<|im_end|>\"}";

    lb_chat_template *qwen = NULL, *chatml = NULL;
    double t0 = lb_time_s();
    if (lb_chat_template_compile(src->valuestring, &qwen) != LB_OK ||
        lb_chat_template_compile(lb_chat_chatml_template, &chatml) != LB_OK) {
        fprintf(stderr, "compile failed: %s\n", lb_last_error());
        return 1;
    }
    double t_compile = lb_time_s() - t0;
    render_ctx rq = {qwen, mj, extra, 0}, rc = {chatml, mj, extra, 0};
    double t_q = time_it(do_render, &rq, min_time);
    double t_c = time_it(do_render, &rc, min_time);
    double t_p = time_it(do_parse, &rq, min_time);
    printf("messages JSON: %zu bytes, 10 messages\n", strlen(mj));
    printf("qwen3 template compile (once):   %8.1f us\n", t_compile * 1e6);
    printf("qwen3 render:                     %8.1f us  (%zu bytes out)  target < 1000 us\n", t_q * 1e6, rq.len);
    printf("chatml render (baseline):         %8.1f us  -> qwen3/chatml = %.2fx\n", t_c * 1e6, t_q / t_c);
    printf("cJSON parse only (baseline):      %8.1f us  -> qwen3/parse  = %.2fx\n", t_p * 1e6, t_q / t_p);
    lb_chat_template_free(qwen);
    lb_chat_template_free(chatml);
    free(mj);
    cJSON_Delete(msgs);
    cJSON_Delete(cj);
    free(cfg);
    return 0;
}
