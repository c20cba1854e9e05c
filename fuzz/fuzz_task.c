/*
 * fuzz_task.c — libFuzzer harness for lowbit eval's task files
 * (src/eval/task.c: JSON Lines -> lb_task). Checks: no crash/leak/hang; a
 * failure sets a message; an accepted task satisfies the documented rules
 * (2..64 non-empty choices, gold in range, non-empty documents, counts
 * that add up, lines increasing); the UTF-8 helpers stay in bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lowbit/eval_task.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    const char *s = (const char *)data;
    int64_t w = lb_count_words(s, size), u = lb_utf8_length(s, size);
    if (w < 1 || u < 0 || (uint64_t)u > size) abort();
    lb_task *t = NULL;
    lb_status st = lb_task_parse(s, size, "fuzz.jsonl", &t);
    if (st != LB_OK) {
        if (t || !lb_last_error()[0]) abort();
        return 0;
    }
    int64_t nc = 0, nr = 0, nf = 0, prev = 0;
    for (int64_t i = 0; i < t->n_items; i++) {
        const lb_task_item *it = &t->items[i];
        if (it->line <= prev) abort();
        prev = it->line;
        if (it->kind == LB_TASK_ROLLING) {
            if (!it->text || !it->text[0] || it->fewshot) abort();
            nr++;
            continue;
        }
        if (it->n_choices < 2 || it->n_choices > LB_TASK_MAX_CHOICES) abort();
        if (it->gold < 0 || it->gold >= it->n_choices || !it->context) abort();
        for (int32_t c = 0; c < it->n_choices; c++)
            if (!it->choices[c] || !it->choices[c][0]) abort();
        if (it->fewshot) nf++;
        else nc++;
    }
    if (nc != t->n_choice || nr != t->n_rolling || nf != t->n_fewshot) abort();
    if (nc + nr == 0) abort();
    lb_task_free(t);
    return 0;
}
