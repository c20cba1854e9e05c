/* lowbit eval — multiple-choice and rolling log-likelihood tasks scored as
 * lm-evaluation-harness scores them (lowbit/eval_task.h). */
#include "cli.h"

#include "lowbit/eval_task.h"
#include "lowbit/file.h"
#include "lowbit/model.h"
#include "lowbit/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: lowbit eval MODEL --task FILE.jsonl [options]\n"
            "\n"
            "  MODEL               HF or GPTQ checkpoint directory, or GGUF\n"
            "  --task FILE         JSON Lines task file: {\"context\", "
            "\"choices\", \"gold\"}\n"
            "                      (multiple choice; \"fewshot\": true for "
            "the few-shot pool)\n"
            "                      or {\"text\"} (rolling log-likelihood "
            "document)\n"
            "  --num-fewshot K     prepend the first K few-shot items "
            "(default 0)\n"
            "  --limit N           score only the first N items\n"
            "  --max-length N      lm-eval's max_length (default: the model's "
            "context\n"
            "                      length, at most 4096)\n"
            "  --add-bos           encode with special tokens (lm-eval "
            "add_bos_token=True)\n"
            "  --tokenizer PATH    another tokenizer (HF directory, "
            "tokenizer.json or GGUF)\n"
            "                      instead of the model's own\n"
            "  --gptq-mode M       GPTQ checkpoints: auto, f32, f16, fast\n"
            "  -t, --threads N     threads (default: all CPUs)\n"
            "\n"
            "Prints acc and acc_norm with their standard errors (choice "
            "items) and\n"
            "word_perplexity, byte_perplexity, bits_per_byte (documents); "
            "--json adds\n"
            "every request's log-likelihood.\n");
}

int cmd_eval(int argc, char **argv) {
    const char *cmd = "eval";
    const char *model = NULL, *task_path = NULL, *tok_path = NULL;
    long fewshot = 0, limit = 0, max_len = 0, threads = 0;
    bool add_bos = false;
    lb_model_load_opts lo = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--task")) {
            if (!(task_path = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(tok_path = cli_value(cmd, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--num-fewshot")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 0, 1000, &fewshot))
                return 2;
        } else if (!strcmp(a, "--limit")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 1, 1L << 40, &limit))
                return 2;
        } else if (!strcmp(a, "--max-length")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 2, 1 << 24, &max_len))
                return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, 1, 1024, &threads))
                return 2;
        } else if (!strcmp(a, "--add-bos")) {
            add_bos = true;
        } else if (!strcmp(a, "--gptq-mode")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
            if (!strcmp(v, "auto")) lo.gptq_mode = LB_GPTQ_LOAD_AUTO;
            else if (!strcmp(v, "f32")) lo.gptq_mode = LB_GPTQ_LOAD_F32;
            else if (!strcmp(v, "f16")) lo.gptq_mode = LB_GPTQ_LOAD_F16;
            else if (!strcmp(v, "fast")) lo.gptq_mode = LB_GPTQ_LOAD_FAST;
            else
                return cli_usage_error(cmd, "--gptq-mode: auto, f32, f16 or "
                                       "fast, got '%s'", v);
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error(cmd, "unknown option '%s'", a);
        } else if (!model) {
            model = a;
        } else {
            return cli_usage_error(cmd, "unexpected argument '%s'", a);
        }
    }
    if (!model) return cli_usage_error(cmd, "no model given");
    if (!task_path) return cli_usage_error(cmd, "no --task FILE given");

    /* the task first: a bad file fails before the model loads */
    char *raw = NULL;
    size_t n_raw = 0;
    lb_status st = lb_read_file(task_path, (size_t)1 << 32, &raw, &n_raw);
    if (st != LB_OK) return cli_fail(cmd, st);
    lb_task *task = NULL;
    st = lb_task_parse(raw, n_raw, task_path, &task);
    free(raw);
    if (st != LB_OK) return cli_fail(cmd, st);
    if (fewshot > task->n_fewshot) {
        fprintf(stderr, "lowbit eval: --num-fewshot %ld needs %ld few-shot "
                "items (lines with \"fewshot\": true); %s has %lld\n",
                fewshot, fewshot, task_path, (long long)task->n_fewshot);
        lb_task_free(task);
        return 2;
    }

    lb_model *m = NULL;
    lb_tokenizer *tok = NULL;
    lb_context *ctx = NULL;
    cli_progress lp;
    lo.progress = cli_progress_make(&lp);
    st = lb_model_load(model, &lo, &m);
    cli_progress_done(&lp);
    if (st == LB_OK) st = lb_tokenizer_load(tok_path ? tok_path : model, &tok);
    if (st == LB_OK && lb_tokenizer_n_vocab(tok) > m->config.vocab_size)
        st = lb_set_error(LB_ERR_FORMAT, "the tokenizer has %d tokens, the "
                          "model's vocabulary %d", (int)lb_tokenizer_n_vocab(tok),
                          (int)m->config.vocab_size);
    int32_t max_pos = m ? m->config.max_position_embeddings : 0;
    if (st == LB_OK) {
        if (!max_len) max_len = max_pos > 0 && max_pos < 4096 ? max_pos : 4096;
        if (max_pos > 0 && max_len > max_pos) {
            fprintf(stderr, "lowbit eval: --max-length %ld exceeds the "
                    "model's context length %d\n", max_len, (int)max_pos);
            lb_tokenizer_free(tok);
            lb_model_free(m);
            lb_task_free(task);
            return 2;
        }
        lb_context_params cp = lb_context_default_params();
        cp.n_ctx = (int32_t)max_len;
        cp.n_threads = (int)threads;
        st = lb_context_create(m, &cp, &ctx);
    }
    lb_eval_result r;
    memset(&r, 0, sizeof r);
    if (st == LB_OK) {
        lb_eval_params ep = lb_eval_default_params();
        ep.num_fewshot = (int32_t)fewshot;
        ep.limit = limit;
        ep.max_length = (int32_t)max_len;
        ep.add_bos = add_bos;
        cli_progress pp;
        ep.progress = cli_progress_make(&pp);
        st = lb_eval_task(ctx, tok, task, &ep, &r);
        cli_progress_done(&pp);
    }
    lb_context_free(ctx);
    lb_tokenizer_free(tok);
    lb_model_free(m);
    if (st != LB_OK) {
        lb_task_free(task);
        return cli_fail(cmd, st);
    }
    if (g_cli.json) {
        printf("{\"task\": ");
        cli_json_string(stdout, task_path);
        printf(", \"num_fewshot\": %ld, \"max_length\": %ld, "
               "\"choice_items\": %lld, \"documents\": %lld",
               fewshot, max_len, (long long)r.n_choice_items,
               (long long)r.n_docs);
        if (r.n_choice_items)
            printf(", \"acc\": %.10g, \"acc_stderr\": %.10g, \"acc_norm\": "
                   "%.10g, \"acc_norm_stderr\": %.10g",
                   r.acc, r.acc_stderr, r.acc_norm, r.acc_norm_stderr);
        if (r.n_docs)
            printf(", \"word_perplexity\": %.10g, \"byte_perplexity\": "
                   "%.10g, \"bits_per_byte\": %.10g, \"words\": %lld, "
                   "\"bytes\": %lld, \"tokens\": %lld",
                   r.word_perplexity, r.byte_perplexity, r.bits_per_byte,
                   (long long)r.words, (long long)r.bytes,
                   (long long)r.tokens);
        printf(", \"requests\": [");
        int64_t prev = -1, c = 0;
        for (int64_t i = 0; i < r.n_requests; i++) {
            int64_t it = r.req_item[i];
            c = it == prev ? c + 1 : 0;
            prev = it;
            printf("%s{\"line\": %lld, \"choice\": %lld, \"loglik\": %.10g, "
                   "\"is_greedy\": %s}",
                   i ? ", " : "", (long long)task->items[it].line,
                   (long long)c, r.loglik[i], r.greedy[i] ? "true" : "false");
        }
        printf("]}\n");
    } else {
        printf("task %s: %lld multiple-choice items, %lld documents, "
               "%ld-shot, max_length %ld\n",
               task_path, (long long)r.n_choice_items, (long long)r.n_docs,
               fewshot, max_len);
        if (r.n_choice_items) {
            printf("acc              %.4f +/- %.4f\n", r.acc, r.acc_stderr);
            printf("acc_norm         %.4f +/- %.4f\n", r.acc_norm,
                   r.acc_norm_stderr);
        }
        if (r.n_docs) {
            printf("word_perplexity  %.4f\n", r.word_perplexity);
            printf("byte_perplexity  %.4f\n", r.byte_perplexity);
            printf("bits_per_byte    %.4f\n", r.bits_per_byte);
        }
    }
    lb_eval_result_free(&r);
    lb_task_free(task);
    return 0;
}
