/*
 * Task-file parser and text helpers of lowbit eval (lowbit/eval_task.h),
 * and the KL base row codec (lowbit/kld.h), against values worked out by
 * hand from their sources: Python's len(str) and re.split(r"\s+"), and
 * perplexity.cpp's uint16 encoding (scale = (max - min)/65535, min =
 * max(min logit, max - 16), codes rounded half to even).
 */
#include "th.h"

#include "lowbit/eval_task.h"
#include "lowbit/kld.h"

static void test_words_and_chars(void) {
    /* len(re.split(r"\s+", s)) */
    TH_CHECK_INT(lb_count_words("", 0), 1);
    TH_CHECK_INT(lb_count_words("a", 1), 1);
    TH_CHECK_INT(lb_count_words(" a ", 3), 3);
    TH_CHECK_INT(lb_count_words("a  b\tc\n\nd", 10), 4);
    /* U+00A0, U+3000, U+001F are \s for Python str; U+200B is not */
    const char *u = "a\xc2\xa0" "b\xe3\x80\x80" "c\x1f" "d\xe2\x80\x8b" "e";
    TH_CHECK_INT(lb_count_words(u, strlen(u)), 4);
    /* len(str): code points */
    TH_CHECK_INT(lb_utf8_length("caf\xc3\xa9", 5), 4);
    TH_CHECK_INT(lb_utf8_length("\xf0\x9f\x99\x82!", 5), 2);
    TH_CHECK_INT(lb_utf8_length("", 0), 0);
}

static void test_parse(void) {
    const char *f =
        "{\"context\": \"A\", \"choices\": [\"x\", \"y\\u00e9\"], \"gold\": 1}\r\n"
        "\n"
        "   \n"
        "{\"text\": \"doc one\", \"id\": 7}\n"
        "{\"context\": \"\", \"choices\": [\"p\", \"q\", \"r\"], \"gold\": 0, "
        "\"fewshot\": true}";
    lb_task *t = NULL;
    TH_CHECK(lb_task_parse(f, strlen(f), "t.jsonl", &t) == LB_OK);
    if (!t) return;
    TH_CHECK_INT(t->n_items, 3);
    TH_CHECK(t->n_choice == 1 && t->n_rolling == 1 && t->n_fewshot == 1);
    TH_CHECK_INT(t->items[0].line, 1);
    TH_CHECK_INT(t->items[1].line, 4);
    TH_CHECK_INT(t->items[2].line, 5);
    TH_CHECK(!strcmp(t->items[0].choices[1], "y\xc3\xa9"));
    TH_CHECK(t->items[0].gold == 1 && t->items[2].fewshot);
    TH_CHECK(t->items[1].kind == LB_TASK_ROLLING &&
             !strcmp(t->items[1].text, "doc one"));
    lb_task_free(t);

    static const struct { const char *in, *msg; } bad[] = {
        {"{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"gold\":2}",
         "t.jsonl:1: \"gold\" 2 outside the 2 choices (0..1)"},
        {"\n{\"context\":\"a\",\"choices\":[\"b\",\"\"],\"gold\":0}",
         "t.jsonl:2: choice 1 is empty"},
        {"{\"context\":\"a\",\"gold\":0}", "t.jsonl:1: \"choices\" missing"},
        {"{\"choices\":[\"b\",\"c\"],\"gold\":0}", "t.jsonl:1: \"context\" missing"},
        {"{\"context\":\"a\",\"choices\":[\"b\",\"c\"]}", "t.jsonl:1: \"gold\" missing"},
        {"{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"gold\":\"0\"}",
         "t.jsonl:1: \"gold\" must be an integer"},
        /* beyond int64: refused before any conversion (fuzz_task, UBSan) */
        {"{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"gold\":1.8e59}",
         "t.jsonl:1: \"gold\" must be an integer"},
        {"{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"gold\":-1e300}",
         "t.jsonl:1: \"gold\" must be an integer"},
        {"[1]", "t.jsonl:1: a JSON object expected"},
        {"{\"text\":\"a\",\"gold\":0}", "t.jsonl:1: both \"text\""},
        {"{\"context\":\"a\",\"choices\":[\"b\",\"c\"],\"gold\":0,\"fewshot\":1}",
         "t.jsonl:1: \"fewshot\" must be true or false"},
        {"", "t.jsonl: no item to score"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = NULL;
        lb_status st = lb_task_parse(bad[i].in, strlen(bad[i].in), "t.jsonl", &t);
        TH_CHECK_MSG(st == LB_ERR_FORMAT && !t, "case %zu", i);
        TH_CHECK_MSG(strstr(lb_last_error(), bad[i].msg) != NULL, "case %zu: %s",
                     i, lb_last_error());
    }
    /* an embedded NUL byte is refused, naming the line */
    const char nul[] = "{\"text\":\"a\"}\n{\"text\":\"b\0\"}";
    TH_CHECK(lb_task_parse(nul, sizeof nul - 1, "t.jsonl", &t) == LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "t.jsonl:2: NUL byte") != NULL);
}

static void test_kl_row_codec(void) {
    /* max 1, min = max(-20, 1 - 16) = -15, scale = 16/65535 */
    const float logits[5] = {0.0f, -16.0f, -20.0f, 1.0f, -15.0f};
    uint16_t row[2 * 3 + 4];
    memset(row, 0xAB, sizeof row);
    double nll = lb_kl_encode_row(logits, 5, 0, row);
    float scale, minlp;
    memcpy(&scale, row, 4);
    memcpy(&minlp, row + 2, 4);
    TH_CHECK(scale == 16.0f / 65535.f);
    double lse = 0;
    for (int i = 0; i < 5; i++) lse += exp((double)logits[i] - 1.0);
    lse = log(lse);
    TH_CHECK_NEAR(minlp, -15.0 - 1.0 - lse, 1e-6);
    TH_CHECK_NEAR(nll, 1.0 + lse, 1e-6);
    /* (0 - -15) * 65535/16 = 61439.06 -> 61439; below or at min -> 0;
     * max -> 65535; the odd vocabulary's pad is 0 */
    TH_CHECK_INT(row[4 + 0], 61439);
    TH_CHECK_INT(row[4 + 1], 0);
    TH_CHECK_INT(row[4 + 2], 0);
    TH_CHECK_INT(row[4 + 3], 65535);
    TH_CHECK_INT(row[4 + 4], 0);
    TH_CHECK_INT(row[4 + 5], 0);
    /* min = max - 16 = -16; a logit 2.5 steps above it: code 2 or 3
     * (the float product decides), a logit below it: 0 */
    const float t2[3] = {0.0f, -20.0f, -16.0f + 2.5f * (16.0f / 65535.f)};
    uint16_t r2[2 * 2 + 4];
    lb_kl_encode_row(t2, 3, 0, r2);
    TH_CHECK(r2[4 + 1] == 0);
    TH_CHECK(r2[4 + 2] == 2 || r2[4 + 2] == 3);
    /* all logits equal: scale 0, every code 0 */
    const float flat[2] = {3.0f, 3.0f};
    uint16_t r3[2 * 1 + 4];
    lb_kl_encode_row(flat, 2, 1, r3);
    memcpy(&scale, r3, 4);
    TH_CHECK(scale == 0.0f && r3[4] == 0 && r3[5] == 0);

    /* the model against its own base: KL ~ 0 (the codes' rounding: 1.5e-4
     * in log p), same top token, PPLs equal for tokens above the floor */
    lb_kl_stats s;
    memset(&s, 0, sizeof s);
    for (int k = 0; k < 20; k++)
        TH_CHECK(lb_kl_add(&s, logits, 5, 16.0f / 65535.f, minlp,
                           (const uint8_t *)(row + 4), k % 2 ? 3 : 0) == LB_OK);
    lb_kl_summary o;
    TH_CHECK(lb_kl_summarize(&s, &o) == LB_OK);
    TH_CHECK(fabs(o.kld) < 1e-3 && o.same_top == 1.0);
    TH_CHECK_NEAR(o.ppl, o.ppl_base, 1e-3 * o.ppl);
    TH_CHECK(lb_kl_add(&s, logits, 5, 1, 0, (const uint8_t *)(row + 4), 5) ==
             LB_ERR_INVALID_ARG);
    lb_kl_stats_free(&s);
}

static void test_kl_base_parse(void) {
    /* n_ctx 4, n_vocab 3, 1 chunk: 1 row of 8 uint16 */
    uint8_t f[20 + 16 + 16];
    memset(f, 0, sizeof f);
    memcpy(f, "_logits_", 8);
    int32_t h[3] = {4, 3, 1};
    memcpy(f + 8, h, 12);
    lb_kl_base b;
    TH_CHECK(lb_kl_base_parse(f, sizeof f, "b", &b) == LB_OK);
    TH_CHECK(b.n_ctx == 4 && b.n_vocab == 3 && b.rows_per_chunk == 1 && b.nv == 8);
    lb_kl_base_close(&b);
    TH_CHECK(lb_kl_base_parse(f, sizeof f - 1, "b", &b) == LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "(truncated)") != NULL);
    f[0] = 'x';
    TH_CHECK(lb_kl_base_parse(f, sizeof f, "b", &b) == LB_ERR_FORMAT);
    TH_CHECK(strstr(lb_last_error(), "does not look like") != NULL);
    f[0] = '_';
    int32_t huge[3] = {1 << 30, 1 << 30, 1 << 30};
    memcpy(f + 8, huge, 12);
    lb_status st = lb_kl_base_parse(f, sizeof f, "b", &b);
    TH_CHECK(st == LB_ERR_OVERFLOW || st == LB_ERR_FORMAT);
}

int main(void) {
    TH_RUN(test_words_and_chars);
    TH_RUN(test_parse);
    TH_RUN(test_kl_row_codec);
    TH_RUN(test_kl_base_parse);
    return th_report();
}
