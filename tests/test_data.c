/* Data sources (tapegrad/data.h) and the n-gram baseline (examples/char_ngram.h):
 * - the synthetic tasks: same seed → same batches, other seeds → other batches; every
 *   Selective Copying row holds exactly n_copy data tokens, in its targets in order;
 *   every Induction row holds two triggers and is scored on the token after the first;
 *   ids stay inside the vocabulary; data positions are uniform; bad arguments fail
 *   without touching the rng or the buffers;
 * - the text corpus: encode/decode round trips (UTF-8 and bytes) through a temporary
 *   file, a sorted vocabulary, split sizes, random windows whose targets are the inputs
 *   shifted by one, evaluation windows that score every character once, clear errors;
 * - the n-gram model: probabilities sum to one, the counts agree with a naive unigram,
 *   a periodic text is learnt and an i.i.d. one is not beaten. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */

#include "test_util.h"

#include "examples/char_ngram.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEED_FMT "(seed %llu)"
#define SEED ((unsigned long long)tt_seed())

/* Asserts that a call failed and that its message names fn and each NULL-terminated word. */
static void assert_fails(tg_status status, const char *fn, ...)
{
    cr_assert_neq(status, TG_OK, "%s should have failed", fn);
    cr_assert(strstr(tg_last_error(), fn), "the error should name %s, got: \"%s\"", fn, tg_last_error());
    va_list words;
    va_start(words, fn);
    for (const char *word = va_arg(words, const char *); word; word = va_arg(words, const char *))
        cr_assert(strstr(tg_last_error(), word), "%s: the error should mention \"%s\", got: \"%s\"", fn, word,
                  tg_last_error());
    va_end(words);
}

static int32_t *alloc_ids(int64_t n)
{
    int32_t *p = malloc((size_t)n * sizeof *p);
    cr_assert(p);
    return p;
}

static bool same_ids(const int32_t *a, const int32_t *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof *a) == 0; }

/* ---- the synthetic tasks: determinism --------------------------------------------------------- */

typedef tg_status (*task_fn)(const void *config, tg_rng *rng, int64_t batch, int64_t seq_len, int32_t *in,
                             int32_t *tgt);

static tg_status selective_copy(const void *c, tg_rng *rng, int64_t b, int64_t l, int32_t *in, int32_t *tgt)
{
    return tg_task_selective_copy_batch(c, rng, b, l, in, tgt);
}

static tg_status induction(const void *c, tg_rng *rng, int64_t b, int64_t l, int32_t *in, int32_t *tgt)
{
    return tg_task_induction_batch(c, rng, b, l, in, tgt);
}

/* One seed twice gives one batch; another seed another; and 2B rows at once are the rows
 * of two batches of B drawn in turn. */
static void check_determinism(const char *what, task_fn fn, const void *config, int64_t batch, int64_t seq_len)
{
    int64_t n = 2 * batch * seq_len;
    int32_t *in[3], *tgt[3];
    for (int i = 0; i < 3; i++) in[i] = alloc_ids(n), tgt[i] = alloc_ids(n);
    uint64_t seed = tg_rng_next(tt_rng());
    tg_rng r0, r1, r2;
    tg_rng_seed(&r0, seed);
    tg_rng_seed(&r1, seed);
    tg_rng_seed(&r2, seed + 1);
    cr_assert_eq(fn(config, &r0, 2 * batch, seq_len, in[0], tgt[0]), TG_OK, "%s: %s", what, tg_last_error());
    cr_assert_eq(fn(config, &r1, batch, seq_len, in[1], tgt[1]), TG_OK);
    cr_assert_eq(fn(config, &r1, batch, seq_len, in[1] + n / 2, tgt[1] + n / 2), TG_OK);
    cr_assert_eq(fn(config, &r2, 2 * batch, seq_len, in[2], tgt[2]), TG_OK);
    cr_assert(same_ids(in[0], in[1], n) && same_ids(tgt[0], tgt[1], n),
              "%s: the same seed gave different batches " SEED_FMT, what, SEED);
    cr_assert(!same_ids(in[0], in[2], n), "%s: seeds %llu and %llu gave the same inputs", what,
              (unsigned long long)seed, (unsigned long long)seed + 1);
    for (int i = 0; i < 3; i++) free(in[i]), free(tgt[i]);
}

Test(tasks, same_seed_same_batches_other_seed_other_batches)
{
    for (int trial = 0; trial < 5; trial++) {
        tg_selective_copy_config sc = {.vocab = tt_randint(4, 20), .n_copy = tt_randint(2, 16)};
        check_determinism("selective copying", selective_copy, &sc, tt_randint(1, 8),
                          2 * sc.n_copy + tt_randint(8, 300));
        tg_induction_config ic = {.vocab = tt_randint(4, 20), .score_all_positions = trial % 2};
        check_determinism("induction", induction, &ic, tt_randint(1, 8), tt_randint(16, 300));
    }
}

/* ---- Selective Copying -------------------------------------------------------------------------- */

/* Checks one row against the layout of data.h; returns how many data tokens it has. */
static void check_selective_copy_row(const tg_selective_copy_config *c, int64_t seq_len, const int32_t *in,
                                     const int32_t *tgt)
{
    int64_t m = c->n_copy, slots = seq_len - m, found = 0;
    for (int64_t t = 0; t < slots; t++) {
        cr_assert(in[t] >= 0 && in[t] <= c->vocab - 2, "a token before the markers is %d (vocab %lld) " SEED_FMT, in[t],
                  (long long)c->vocab, SEED);
        cr_assert_eq(tgt[t], TG_IGNORE_INDEX, "position %lld before the markers is scored " SEED_FMT, (long long)t,
                     SEED);
        if (in[t] == 0) continue;
        cr_assert(found < m, "more than n_copy = %lld data tokens " SEED_FMT, (long long)m, SEED);
        cr_assert_eq(tgt[slots + found], in[t], "marker %lld asks for %d, data token %lld is %d " SEED_FMT,
                     (long long)found, tgt[slots + found], (long long)found, in[t], SEED);
        found++;
    }
    cr_assert_eq(found, m, "%lld data tokens instead of %lld " SEED_FMT, (long long)found, (long long)m, SEED);
    for (int64_t i = 0; i < m; i++)
        cr_assert_eq(in[slots + i], c->vocab - 1, "slot %lld of the tail is not the marker " SEED_FMT,
                     (long long)(slots + i), SEED);
}

Test(selective_copy, every_row_has_the_layout)
{
    for (int trial = 0; trial < 20; trial++) {
        tg_selective_copy_config c = {.vocab = tt_randint(3, 40), .n_copy = tt_randint(1, 20)};
        int64_t batch = tt_randint(1, 16), seq_len = 2 * c.n_copy + (trial % 4 == 0 ? 0 : tt_randint(1, 200));
        int32_t *in = alloc_ids(batch * seq_len), *tgt = alloc_ids(batch * seq_len);
        cr_assert_eq(tg_task_selective_copy_batch(&c, tt_rng(), batch, seq_len, in, tgt), TG_OK, "%s", tg_last_error());
        for (int64_t b = 0; b < batch; b++) check_selective_copy_row(&c, seq_len, in + b * seq_len, tgt + b * seq_len);
        free(in), free(tgt);
    }
}

/* The paper's setting: 4096 noise slots, 16 tokens to copy, vocabulary 16. */
Test(selective_copy, paper_setting)
{
    tg_selective_copy_config c = {.vocab = 16, .n_copy = 16};
    int64_t batch = 4, seq_len = 4096 + 32;
    int32_t *in = alloc_ids(batch * seq_len), *tgt = alloc_ids(batch * seq_len);
    cr_assert_eq(tg_task_selective_copy_batch(&c, tt_rng(), batch, seq_len, in, tgt), TG_OK, "%s", tg_last_error());
    for (int64_t b = 0; b < batch; b++) check_selective_copy_row(&c, seq_len, in + b * seq_len, tgt + b * seq_len);
    free(in), free(tgt);
}

/* Each of the S = seq_len − n_copy slots holds data with probability n_copy / S, and each
 * data symbol is equally likely: counts over many rows stay within 6 standard deviations. */
Test(selective_copy, positions_and_symbols_are_uniform)
{
    tg_selective_copy_config c = {.vocab = 7, .n_copy = 3};
    const int64_t seq_len = 16, slots = seq_len - c.n_copy, rows = 40000;
    int32_t *in = alloc_ids(rows * seq_len), *tgt = alloc_ids(rows * seq_len);
    cr_assert_eq(tg_task_selective_copy_batch(&c, tt_rng(), rows, seq_len, in, tgt), TG_OK);
    int64_t at[16] = {0}, symbol[8] = {0};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < slots; t++)
            if (in[r * seq_len + t]) at[t]++, symbol[in[r * seq_len + t]]++;
    double p = (double)c.n_copy / (double)slots, sd = sqrt(rows * p * (1 - p));
    for (int64_t t = 0; t < slots; t++)
        cr_assert(fabs((double)at[t] - rows * p) < 6 * sd, "slot %lld holds data %lld times, expected %.0f ± %.0f",
                  (long long)t, (long long)at[t], rows * p, sd);
    double q = 1.0 / (double)(c.vocab - 2), total = (double)(rows * c.n_copy), sq = sqrt(total * q * (1 - q));
    for (int v = 1; v <= c.vocab - 2; v++)
        cr_assert(fabs((double)symbol[v] - total * q) < 6 * sq, "symbol %d appears %lld times, expected %.0f", v,
                  (long long)symbol[v], total * q);
    free(in), free(tgt);
}

/* ---- Induction Heads -------------------------------------------------------------------------- */

static void check_induction_row(const tg_induction_config *c, int64_t seq_len, const int32_t *in, const int32_t *tgt)
{
    const int32_t trigger = (int32_t)(c->vocab - 1);
    int64_t first = -1, triggers = 0;
    for (int64_t t = 0; t < seq_len; t++) {
        if (in[t] == trigger) {
            triggers++;
            if (first < 0) first = t;
        } else {
            cr_assert(in[t] >= 0 && in[t] <= c->vocab - 3, "token %d at %lld is not ordinary (vocab %lld) " SEED_FMT,
                      in[t], (long long)t, (long long)c->vocab, SEED);
        }
    }
    cr_assert_eq(triggers, 2, "%lld triggers instead of 2 " SEED_FMT, (long long)triggers, SEED);
    cr_assert_eq(in[seq_len - 1], trigger, "the row does not end with the trigger " SEED_FMT, SEED);
    cr_assert(first <= seq_len - 3, "the first trigger is at %lld of %lld " SEED_FMT, (long long)first,
              (long long)seq_len, SEED);
    cr_assert_eq(tgt[seq_len - 1], in[first + 1], "the scored target is %d, the token after the trigger %d " SEED_FMT,
                 tgt[seq_len - 1], in[first + 1], SEED);
    for (int64_t t = 0; t < seq_len - 1; t++) {
        int32_t want = c->score_all_positions ? in[t + 1] : TG_IGNORE_INDEX;
        cr_assert_eq(tgt[t], want, "target %lld is %d, expected %d " SEED_FMT, (long long)t, tgt[t], want, SEED);
    }
}

Test(induction, every_row_has_the_layout)
{
    for (int trial = 0; trial < 20; trial++) {
        tg_induction_config c = {.vocab = tt_randint(3, 30), .score_all_positions = trial % 3 == 0};
        int64_t batch = tt_randint(1, 16), seq_len = trial % 5 == 0 ? 3 : tt_randint(3, 400);
        int32_t *in = alloc_ids(batch * seq_len), *tgt = alloc_ids(batch * seq_len);
        cr_assert_eq(tg_task_induction_batch(&c, tt_rng(), batch, seq_len, in, tgt), TG_OK, "%s", tg_last_error());
        for (int64_t b = 0; b < batch; b++) check_induction_row(&c, seq_len, in + b * seq_len, tgt + b * seq_len);
        free(in), free(tgt);
    }
}

/* The evaluation lengths of the paper reach 2^20. */
Test(induction, longest_evaluation_length)
{
    tg_induction_config c = {.vocab = 16};
    int64_t seq_len = (int64_t)1 << 20;
    int32_t *in = alloc_ids(2 * seq_len), *tgt = alloc_ids(2 * seq_len);
    cr_assert_eq(tg_task_induction_batch(&c, tt_rng(), 2, seq_len, in, tgt), TG_OK, "%s", tg_last_error());
    for (int b = 0; b < 2; b++) check_induction_row(&c, seq_len, in + b * seq_len, tgt + b * seq_len);
    free(in), free(tgt);
}

/* The first trigger is uniform over [0, seq_len − 3], and the answer over the 14 ordinary
 * tokens of the paper's vocabulary (chance accuracy 1/14). */
Test(induction, trigger_position_and_answer_are_uniform)
{
    tg_induction_config c = {.vocab = 16};
    const int64_t seq_len = 12, rows = 60000, places = seq_len - 2, ordinary = c.vocab - 2;
    int32_t *in = alloc_ids(rows * seq_len), *tgt = alloc_ids(rows * seq_len);
    cr_assert_eq(tg_task_induction_batch(&c, tt_rng(), rows, seq_len, in, tgt), TG_OK);
    int64_t at[12] = {0}, answer[16] = {0};
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = 0;
        while (in[r * seq_len + t] != c.vocab - 1) t++;
        at[t]++;
        answer[tgt[r * seq_len + seq_len - 1]]++;
    }
    double p = 1.0 / (double)places, sd = sqrt(rows * p * (1 - p));
    for (int64_t t = 0; t < places; t++)
        cr_assert(fabs((double)at[t] - rows * p) < 6 * sd, "the trigger is at %lld in %lld rows, expected %.0f",
                  (long long)t, (long long)at[t], rows * p);
    double q = 1.0 / (double)ordinary, sq = sqrt(rows * q * (1 - q));
    for (int64_t v = 0; v < ordinary; v++)
        cr_assert(fabs((double)answer[v] - rows * q) < 6 * sq, "answer %lld in %lld rows, expected %.0f", (long long)v,
                  (long long)answer[v], rows * q);
    cr_assert_eq(answer[c.vocab - 2] + answer[c.vocab - 1], 0, "a special id was an answer");
    free(in), free(tgt);
}

/* ---- bad arguments ------------------------------------------------------------------------------- */

/* The call must fail, name fn and the word, and leave the rng and the buffers as they were. */
static void check_rejected(task_fn fn, const char *name, const void *config, int64_t batch, int64_t seq_len,
                           bool null_rng, const char *word)
{
    int32_t in[64], tgt[64];
    for (int i = 0; i < 64; i++) in[i] = tgt[i] = 12345;
    tg_rng rng, copy;
    tg_rng_seed(&rng, 7);
    copy = rng;
    tg_clear_error();
    assert_fails(fn(config, null_rng ? NULL : &rng, batch, seq_len, in, tgt), name, word, NULL);
    cr_assert(memcmp(&rng, &copy, sizeof rng) == 0, "%s advanced the rng on failure", name);
    for (int i = 0; i < 64; i++) cr_assert(in[i] == 12345 && tgt[i] == 12345, "%s wrote on failure", name);
}

Test(tasks, bad_arguments)
{
    const char *sc_name = "tg_task_selective_copy_batch", *ih_name = "tg_task_induction_batch";
    tg_selective_copy_config sc = {.vocab = 16, .n_copy = 4};
    check_rejected(selective_copy, sc_name, NULL, 1, 16, false, "config is NULL");
    check_rejected(selective_copy, sc_name, &sc, 1, 16, true, "rng is NULL");
    check_rejected(selective_copy, sc_name, &sc, 0, 16, false, "batch is 0");
    check_rejected(selective_copy, sc_name, &sc, 1, 7, false, "seq_len 7 is shorter than 2 · n_copy = 8");
    check_rejected(selective_copy, sc_name, &(tg_selective_copy_config){.vocab = 2, .n_copy = 4}, 1, 16, false,
                   "vocab 2 is too small");
    check_rejected(selective_copy, sc_name, &(tg_selective_copy_config){.vocab = 16, .n_copy = 0}, 1, 16, false,
                   "n_copy is 0");
    check_rejected(selective_copy, sc_name, &(tg_selective_copy_config){.vocab = (int64_t)1 << 40, .n_copy = 1}, 1, 16,
                   false, "int32");
    check_rejected(selective_copy, sc_name, &sc, INT64_MAX / 2, 16, false, "overflows");
    tg_induction_config ih = {.vocab = 16};
    check_rejected(induction, ih_name, NULL, 1, 16, false, "config is NULL");
    check_rejected(induction, ih_name, &ih, 1, 16, true, "rng is NULL");
    check_rejected(induction, ih_name, &ih, 1, 2, false, "seq_len 2 is too short");
    check_rejected(induction, ih_name, &ih, -3, 16, false, "batch is -3");
    check_rejected(induction, ih_name, &(tg_induction_config){.vocab = 2}, 1, 16, false, "vocab 2 is too small");
    int32_t buffer[8];
    assert_fails(tg_task_induction_batch(&ih, tt_rng(), 1, 8, NULL, buffer), ih_name, "inputs is NULL", NULL);
    assert_fails(tg_task_selective_copy_batch(&sc, tt_rng(), 1, 8, buffer, NULL), sc_name, "targets is NULL", NULL);
}

/* ---- the tensor forms --------------------------------------------------------------------------- */

Test(tasks, tensor_forms_match_the_buffer_forms)
{
    tg_tape *tape = tg_tape_create();
    int64_t batch = tt_randint(1, 6), seq_len = tt_randint(10, 80), shape[2] = {batch, seq_len};
    tg_tensor *in = tg_zeros(tape, TG_I32, TG_DEVICE_CPU, 2, shape),
              *tgt = tg_zeros(tape, TG_I32, TG_DEVICE_CPU, 2, shape);
    int32_t *want_in = alloc_ids(batch * seq_len), *want_tgt = alloc_ids(batch * seq_len);
    uint64_t seed = tg_rng_next(tt_rng());
    tg_rng a, b;
    tg_selective_copy_config sc = {.vocab = 10, .n_copy = 5};
    tg_induction_config ih = {.vocab = 10};
    for (int task = 0; task < 2; task++) {
        tg_rng_seed(&a, seed), tg_rng_seed(&b, seed);
        tg_status s1 = task ? tg_task_induction_fill(&ih, &a, in, tgt) : tg_task_selective_copy_fill(&sc, &a, in, tgt);
        tg_status s2 = task ? tg_task_induction_batch(&ih, &b, batch, seq_len, want_in, want_tgt)
                            : tg_task_selective_copy_batch(&sc, &b, batch, seq_len, want_in, want_tgt);
        cr_assert(s1 == TG_OK && s2 == TG_OK, "%s", tg_last_error());
        cr_assert(same_ids(tg_data(in), want_in, batch * seq_len) && same_ids(tg_data(tgt), want_tgt, batch * seq_len),
                  "task %d: the tensor form differs from the buffer form " SEED_FMT, task, SEED);
    }
    tg_tensor *floats = tg_zeros(tape, TG_F32, TG_DEVICE_CPU, 2, shape);
    assert_fails(tg_task_induction_fill(&ih, tt_rng(), floats, tgt), "tg_task_induction_fill", "i32 cpu", "f32", NULL);
    tg_tensor *other = tg_zeros(tape, TG_I32, TG_DEVICE_CPU, 2, (int64_t[]){batch, seq_len + 1});
    assert_fails(tg_task_selective_copy_fill(&sc, tt_rng(), in, other), "tg_task_selective_copy_fill",
                 "differ in shape", NULL);
    tg_tensor *flat = tg_zeros(tape, TG_I32, TG_DEVICE_CPU, 1, (int64_t[]){seq_len});
    assert_fails(tg_task_selective_copy_fill(&sc, tt_rng(), flat, flat), "tg_task_selective_copy_fill",
                 "(batch, seq_len)", NULL);
    assert_fails(
        tg_task_selective_copy_fill(&(tg_selective_copy_config){.vocab = 10, .n_copy = seq_len}, tt_rng(), in, tgt),
        "tg_task_selective_copy_fill", "shorter than 2 · n_copy", NULL);
    free(want_in), free(want_tgt);
    tg_tape_free(tape);
}

/* ---- the text corpus ----------------------------------------------------------------------------- */

/* Writes bytes to a new temporary file; returns its path (static storage, one at a time). */
static const char *temp_file(const void *bytes, size_t size)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/tg_test_data_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0, "mkstemp failed");
    cr_assert_eq(write(fd, bytes, size), (ssize_t)size);
    close(fd);
    return path;
}

/* Random UTF-8 text over an alphabet of 1-, 2-, 3- and 4-byte characters. */
static char *random_utf8(int64_t n_chars, size_t *size)
{
    static const char *const alphabet[] = {"a",
                                           "b",
                                           "Z",
                                           " ",
                                           "\n",
                                           ".",
                                           "\xc3\xa9" /* é */,
                                           "\xce\xbb" /* λ */,
                                           "\xe2\x82\xac" /* € */,
                                           "\xf0\x9f\x98\x80" /* 😀 */};
    int n_alphabet = (int)(sizeof alphabet / sizeof *alphabet);
    char *s = malloc((size_t)n_chars * 4 + 1);
    cr_assert(s);
    size_t used = 0;
    for (int64_t i = 0; i < n_chars; i++) {
        const char *c = alphabet[i < n_alphabet ? i : tg_rng_below(tt_rng(), n_alphabet)]; /* each at least once */
        memcpy(s + used, c, strlen(c));
        used += strlen(c);
    }
    *size = used;
    return s;
}

Test(text, utf8_round_trip_through_a_file)
{
    size_t size;
    int64_t n_chars = tt_randint(20, 3000);
    char *s = random_utf8(n_chars, &size);
    const char *path = temp_file(s, size);
    tg_text *text = tg_text_load(path, NULL);
    cr_assert(text, "%s", tg_last_error());
    remove(path);
    cr_assert_eq(tg_text_vocab_size(text), 10);
    int64_t n = tg_text_length(text, TG_TEXT_TRAIN) + tg_text_length(text, TG_TEXT_VAL);
    cr_assert_eq(n, n_chars, "%lld characters, %lld written", (long long)n, (long long)n_chars);
    for (int32_t id = 0; id < 10; id++) {
        cr_assert_eq(tg_text_id(text, tg_text_char(text, id)), id);
        if (id > 0) cr_assert_gt(tg_text_char(text, id), tg_text_char(text, id - 1), "the vocabulary is not sorted");
    }
    cr_assert_eq(tg_text_char(text, 9), 0x1F600, "the largest character should be U+1F600");
    cr_assert_eq(tg_text_id(text, 'q'), -1);
    /* Encoding the file's bytes gives the loaded ids; decoding them gives the bytes back. */
    int32_t *ids = alloc_ids((int64_t)size);
    int64_t n_ids = 0;
    cr_assert_eq(tg_text_encode(text, s, size, ids, (int64_t)size, &n_ids), TG_OK, "%s", tg_last_error());
    cr_assert_eq(n_ids, n);
    cr_assert(same_ids(ids, tg_text_ids(text, TG_TEXT_TRAIN), n), "encode differs from the loaded ids");
    size_t n_bytes = 0;
    cr_assert_eq(tg_text_decode(text, ids, n_ids, NULL, 0, &n_bytes), TG_OK);
    cr_assert_eq(n_bytes, size);
    char *back = malloc(size + 1);
    cr_assert_eq(tg_text_decode(text, ids, n_ids, back, size + 1, &n_bytes), TG_OK, "%s", tg_last_error());
    cr_assert(n_bytes == size && memcmp(back, s, size) == 0 && back[size] == '\0', "decode(encode(s)) != s");
    free(back), free(ids), free(s);
    tg_text_free(text);
}

Test(text, bytes_mode_reads_any_file)
{
    int64_t n = tt_randint(50, 2000);
    unsigned char *bytes = malloc((size_t)n);
    bool seen[256] = {false};
    int distinct = 0;
    for (int64_t i = 0; i < n; i++) {
        bytes[i] = (unsigned char)(i == 0 ? 0xFF : tg_rng_below(tt_rng(), 256)); /* 0xFF: never valid UTF-8 */
        distinct += !seen[bytes[i]], seen[bytes[i]] = true;
    }
    const char *path = temp_file(bytes, (size_t)n);
    tg_clear_error();
    cr_assert_null(tg_text_load(path, NULL), "invalid UTF-8 loaded as UTF-8");
    assert_fails(TG_ERR_INVALID, "tg_text_load", "not valid UTF-8 at byte 0", "TG_TEXT_BYTES", NULL);
    tg_text_options o = tg_text_defaults();
    o.unit = TG_TEXT_BYTES;
    tg_text *text = tg_text_load(path, &o);
    remove(path);
    cr_assert(text, "%s", tg_last_error());
    cr_assert_eq(tg_text_vocab_size(text), distinct);
    const int32_t *ids = tg_text_ids(text, TG_TEXT_TRAIN);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(tg_text_char(text, ids[i]), bytes[i], "byte %lld", (long long)i);
    char *back = malloc((size_t)n + 1);
    size_t n_bytes;
    cr_assert_eq(tg_text_decode(text, ids, n, back, (size_t)n + 1, &n_bytes), TG_OK);
    cr_assert(n_bytes == (size_t)n && memcmp(back, bytes, (size_t)n) == 0, "bytes do not round-trip");
    free(back), free(bytes);
    tg_text_free(text);
}

Test(text, split_sizes)
{
    size_t size;
    char *s = random_utf8(tt_randint(10, 5000), &size);
    for (int trial = 0; trial < 4; trial++) {
        tg_text_options o = tg_text_defaults();
        cr_assert_eq(o.val_fraction, 0.1);
        if (trial > 0) o.val_fraction = trial == 1 ? 0.0 : tg_rng_uniform(tt_rng()) * 0.99;
        tg_text *text = tg_text_from_memory(s, size, &o);
        cr_assert(text, "%s", tg_last_error());
        int64_t n_train = tg_text_length(text, TG_TEXT_TRAIN), n_val = tg_text_length(text, TG_TEXT_VAL);
        int64_t n = n_train + n_val;
        cr_assert_eq(n_val, (int64_t)floor((double)n * o.val_fraction), "val has %lld of %lld at fraction %g",
                     (long long)n_val, (long long)n, o.val_fraction);
        cr_assert_eq(tg_text_ids(text, TG_TEXT_VAL), tg_text_ids(text, TG_TEXT_TRAIN) + n_train,
                     "the validation ids should follow the training ids");
        tg_text_free(text);
    }
    free(s);
}

/* Each random window is a stretch of its split, its targets the inputs shifted by one. */
Test(text, random_windows_are_shifted_stretches_of_their_split)
{
    size_t size;
    char *s = random_utf8(tt_randint(300, 3000), &size);
    tg_text *text = tg_text_from_memory(s, size, NULL);
    cr_assert(text, "%s", tg_last_error());
    for (int split = TG_TEXT_TRAIN; split <= TG_TEXT_VAL; split++) {
        int64_t n = tg_text_length(text, split), batch = tt_randint(1, 8), seq_len = tt_randint(1, n - 1);
        const int32_t *ids = tg_text_ids(text, split);
        int32_t *in = alloc_ids(batch * seq_len), *tgt = alloc_ids(batch * seq_len);
        cr_assert_eq(tg_text_batch(text, split, tt_rng(), batch, seq_len, in, tgt), TG_OK, "%s", tg_last_error());
        for (int64_t b = 0; b < batch; b++) {
            const int32_t *row = in + b * seq_len, *next = tgt + b * seq_len;
            for (int64_t j = 0; j + 1 < seq_len; j++)
                cr_assert_eq(next[j], row[j + 1], "targets are not inputs shifted");
            bool found =
                false; /* some start s in the split has ids[s …] = row and ids[s + seq_len] = the last target */
            for (int64_t start = 0; !found && start + seq_len < n; start++)
                found = same_ids(ids + start, row, seq_len) && ids[start + seq_len] == next[seq_len - 1];
            cr_assert(found, "window %lld is not a stretch of the %s split " SEED_FMT, (long long)b,
                      split ? "val" : "train", SEED);
        }
        free(in), free(tgt);
    }
    /* A window that spans the whole split fits exactly, and can only start at 0 (16 draws
     * would show a start of 1, which reads past the split, with probability 1 − 2^−16);
     * one more character does not fit. */
    int64_t n_val = tg_text_length(text, TG_TEXT_VAL), rows = 16;
    const int32_t *val = tg_text_ids(text, TG_TEXT_VAL);
    int32_t *in = alloc_ids(rows * n_val), *tgt = alloc_ids(rows * n_val);
    cr_assert_eq(tg_text_batch(text, TG_TEXT_VAL, tt_rng(), rows, n_val - 1, in, tgt), TG_OK, "%s", tg_last_error());
    for (int64_t b = 0; b < rows; b++)
        cr_assert(same_ids(in + b * (n_val - 1), val, n_val - 1) && same_ids(tgt + b * (n_val - 1), val + 1, n_val - 1),
                  "row %lld is not the whole split", (long long)b);
    assert_fails(tg_text_batch(text, TG_TEXT_VAL, tt_rng(), 1, n_val, in, tgt), "tg_text_batch",
                 "fewer than one window", NULL);
    free(in), free(tgt), free(s);
    tg_text_free(text);
}

/* The evaluation windows score every character of the split but the first, once each and
 * in order, each with its own predecessor as input. */
Test(text, evaluation_windows_score_each_character_once)
{
    size_t size;
    char *s = random_utf8(tt_randint(100, 4000), &size);
    tg_text_options o = {.val_fraction = 0.3};
    tg_text *text = tg_text_from_memory(s, size, &o);
    cr_assert(text, "%s", tg_last_error());
    for (int split = TG_TEXT_TRAIN; split <= TG_TEXT_VAL; split++) {
        int64_t n = tg_text_length(text, split), seq_len = tt_randint(1, 100), batch = tt_randint(1, 5);
        const int32_t *ids = tg_text_ids(text, split);
        int64_t count = tg_text_window_count(text, split, seq_len);
        cr_assert_eq(count, (n - 1 + seq_len - 1) / seq_len);
        int32_t *in = alloc_ids(batch * seq_len), *tgt = alloc_ids(batch * seq_len);
        int64_t scored = 0, rows_total = 0;
        for (int64_t first = 0; first < count; first += batch) {
            int64_t rows = -1;
            cr_assert_eq(tg_text_windows(text, split, first, batch, seq_len, in, tgt, &rows), TG_OK, "%s",
                         tg_last_error());
            cr_assert_eq(rows, first + batch <= count ? batch : count - first);
            rows_total += rows;
            for (int64_t k = 0; k < batch * seq_len; k++) {
                if (tgt[k] == TG_IGNORE_INDEX) {
                    cr_assert_eq(in[k], 0, "a padding input is not 0");
                    continue;
                }
                cr_assert(scored + 1 < n, "more scored positions than characters");
                cr_assert(in[k] == ids[scored] && tgt[k] == ids[scored + 1],
                          "scored position %lld is not (character, next character)", (long long)scored);
                scored++;
            }
        }
        cr_assert_eq(scored, n - 1, "%lld positions scored, %lld characters in the split", (long long)scored,
                     (long long)n);
        cr_assert_eq(rows_total, count);
        assert_fails(tg_text_windows(text, split, count, batch, seq_len, in, tgt, NULL), "tg_text_windows", "outside",
                     NULL);
        free(in), free(tgt);
    }
    free(s);
    tg_text_free(text);
}

Test(text, bad_inputs)
{
    tg_clear_error();
    cr_assert_null(tg_text_load("/nonexistent/tapegrad/corpus.txt", NULL));
    assert_fails(TG_ERR_INVALID, "tg_text_load", "/nonexistent/tapegrad/corpus.txt", "cannot open", NULL);
    const char *path = temp_file("", 0);
    cr_assert_null(tg_text_load(path, NULL));
    assert_fails(TG_ERR_INVALID, "tg_text_load", path, "is empty", NULL);
    remove(path);
    const double bad_fractions[] = {1.0, -0.1, NAN};
    for (int i = 0; i < 3; i++) {
        tg_text_options o = {.val_fraction = bad_fractions[i]};
        cr_assert_null(tg_text_from_memory("abc", 3, &o));
        assert_fails(TG_ERR_INVALID, "tg_text_from_memory", "val_fraction", NULL);
    }
    cr_assert_null(tg_text_from_memory("abc", 3, &(tg_text_options){.unit = 7}));
    assert_fails(TG_ERR_INVALID, "tg_text_from_memory", "unit 7", NULL);
    cr_assert_null(tg_text_from_memory("a\xe2\x82", 3, NULL)); /* a truncated € */
    assert_fails(TG_ERR_INVALID, "tg_text_from_memory", "not valid UTF-8 at byte 1", NULL);
    cr_assert_null(tg_text_from_memory("a\xc0\xaf", 3, NULL)); /* an overlong '/' */
    assert_fails(TG_ERR_INVALID, "tg_text_from_memory", "not valid UTF-8 at byte 1", NULL);
    cr_assert_null(tg_text_from_memory("\xed\xa0\x80", 3, NULL)); /* a surrogate */
    assert_fails(TG_ERR_INVALID, "tg_text_from_memory", "not valid UTF-8 at byte 0", NULL);

    const char *corpus = "hello, world\n"; /* 13 characters: 12 train, 1 val at the default 0.1 */
    tg_text *text = tg_text_from_memory(corpus, strlen(corpus), NULL);
    cr_assert(text, "%s", tg_last_error());
    int32_t ids[64], in[64], tgt[64];
    int64_t n_ids;
    assert_fails(tg_text_encode(text, "hello?", 6, ids, 64, &n_ids), "tg_text_encode", "U+003F '?' at byte 5",
                 "not in the vocabulary", NULL);
    assert_fails(tg_text_encode(text, "hello", 5, ids, 3, &n_ids), "tg_text_encode", "capacity 3", NULL);
    char out[8];
    size_t n_bytes;
    int32_t bad_id[] = {0, 99};
    assert_fails(tg_text_decode(text, bad_id, 2, out, sizeof out, &n_bytes), "tg_text_decode", "ids[1] = 99", NULL);
    cr_assert_eq(tg_text_encode(text, corpus, strlen(corpus), ids, 64, &n_ids), TG_OK);
    assert_fails(tg_text_decode(text, ids, n_ids, out, sizeof out, &n_bytes), "tg_text_decode", "needs 13 bytes", NULL);
    assert_fails(tg_text_batch(text, TG_TEXT_TRAIN, tt_rng(), 2, 12, in, tgt), "tg_text_batch", "train split",
                 "12 characters", "seq_len + 1 = 13", NULL);
    assert_fails(tg_text_batch(text, TG_TEXT_TRAIN, NULL, 2, 4, in, tgt), "tg_text_batch", "rng is NULL", NULL);
    assert_fails(tg_text_batch(text, 5, tt_rng(), 2, 4, in, tgt), "tg_text_batch", "split 5", NULL);
    assert_fails(tg_text_batch(text, TG_TEXT_TRAIN, tt_rng(), 0, 4, in, tgt), "tg_text_batch", "batch 0", NULL);
    assert_fails(tg_text_windows(text, TG_TEXT_VAL, 0, 1, 4, in, tgt, NULL), "tg_text_windows", "val split",
                 "1 characters", NULL);
    cr_assert_eq(tg_text_window_count(text, TG_TEXT_TRAIN, 0), -1);
    tg_text_free(text);
}

/* ---- the n-gram baseline --------------------------------------------------------------------------- */

static int32_t *random_text_ids(int64_t n, int64_t vocab, int period)
{
    int32_t *ids = alloc_ids(n);
    for (int64_t i = 0; i < n; i++)
        ids[i] = period > 0 && i >= period ? ids[i - period] : (int32_t)tg_rng_below(tt_rng(), vocab);
    return ids;
}

/* Σ_w P(w | history) = 1 for both smoothings, at every order, for held-out histories. */
Test(ngram, probabilities_sum_to_one)
{
    int64_t vocab = tt_randint(2, 12), n = 3000;
    int32_t *ids = random_text_ids(n, vocab, 0);
    for (int i = 0; i < n; i++) ids[i] = i % 3 ? ids[i] : (int32_t)(ids[i] % 2); /* some skew: uneven counts */
    for (int order = 1; order <= 6; order++) {
        ngram_model *m = ngram_train(ids, 2000, vocab, order);
        cr_assert(m, "%s", tg_last_error());
        for (int trial = 0; trial < 50; trial++) {
            int64_t i = tt_randint(0, n - 1);
            double kn = 0, add = 0, alpha = pow(10, tg_rng_uniform(tt_rng()) * 4 - 3);
            for (int32_t w = 0; w < vocab; w++) { /* every candidate for position i, after its history */
                kn += ngram_prob_kn(m, ids, i, w);
                add += ngram_prob_add(m, ids, i, w, alpha);
            }
            cr_assert(fabs(kn - 1) < 1e-9 && fabs(add - 1) < 1e-9,
                      "order %d at %lld: Kneser-Ney sums to %.12f, add-alpha to %.12f " SEED_FMT, order, (long long)i,
                      kn, add, SEED);
        }
        ngram_free(m);
    }
    free(ids);
}

/* ---- a naive Kneser-Ney, straight from the formulas of examples/char_ngram.h ----
 * Every count is found by scanning the text, every sum by enumerating all V^k k-grams. */
typedef struct {
    const int32_t *ids;
    int64_t n, vocab;
    int order;
} naive_kn;

/* Occurrences of the k characters gram[0 … k) in ids[0 … n). */
static int64_t naive_count(const naive_kn *nk, const int32_t *gram, int k)
{
    int64_t c = 0;
    for (int64_t i = k - 1; i < nk->n; i++) {
        bool match = true;
        for (int j = 0; j < k && match; j++) match = nk->ids[i - k + 1 + j] == gram[j];
        c += match;
    }
    return c;
}

/* a_k(gram): its count at the top order, else the number of distinct characters before it. */
static int64_t naive_adjusted(const naive_kn *nk, const int32_t *gram, int k)
{
    if (k == nk->order) return naive_count(nk, gram, k);
    int32_t longer[NGRAM_MAX_ORDER + 1];
    memcpy(longer + 1, gram, (size_t)k * sizeof *gram);
    int64_t distinct = 0;
    for (int32_t x = 0; x < nk->vocab; x++) longer[0] = x, distinct += naive_count(nk, longer, k + 1) > 0;
    return distinct;
}

/* The k-gram number `index` in base V (first character most significant). */
static void naive_gram(const naive_kn *nk, int64_t index, int k, int32_t *gram)
{
    for (int j = k - 1; j >= 0; j--) gram[j] = (int32_t)(index % nk->vocab), index /= nk->vocab;
}

static void naive_discounts(const naive_kn *nk, int k, double d[4])
{
    int64_t n_r[5] = {0}, total = 1;
    int32_t gram[NGRAM_MAX_ORDER];
    for (int j = 0; j < k; j++) total *= nk->vocab;
    for (int64_t g = 0; g < total; g++) {
        naive_gram(nk, g, k, gram);
        int64_t a = naive_adjusted(nk, gram, k);
        if (a >= 1 && a <= 4) n_r[a]++;
    }
    double y = n_r[1] + 2 * n_r[2] > 0 ? (double)n_r[1] / (double)(n_r[1] + 2 * n_r[2]) : 0.5;
    for (int r = 1; r <= 3; r++) {
        double v = n_r[r] > 0 ? r - (r + 1) * y * (double)n_r[r + 1] / (double)n_r[r] : y;
        d[r] = fmin(fmax(v, 0), r);
    }
}

/* P_k(w | h), h the k − 1 characters history[0 … k − 1). */
static double naive_prob(const naive_kn *nk, const int32_t *history, int k, int32_t w)
{
    if (k == 0) return 1.0 / (double)nk->vocab;
    double lower = naive_prob(nk, history + 1, k - 1, w), d[4];
    int32_t gram[NGRAM_MAX_ORDER];
    memcpy(gram, history, (size_t)(k - 1) * sizeof *gram);
    double s = 0, gamma = 0, a_w = 0;
    naive_discounts(nk, k, d);
    for (int32_t x = 0; x < nk->vocab; x++) {
        gram[k - 1] = x;
        int64_t a = naive_adjusted(nk, gram, k);
        s += (double)a;
        if (a > 0) gamma += d[a >= 3 ? 3 : a];
        if (x == w) a_w = (double)a;
    }
    if (s == 0) return lower;
    return (a_w > 0 ? a_w - d[a_w >= 3 ? 3 : (int)a_w] : 0.0) / s + gamma / s * lower;
}

Test(ngram, kneser_ney_matches_a_naive_implementation)
{
    naive_kn nk = {.n = tt_randint(100, 400), .vocab = tt_randint(2, 4)};
    int32_t *ids = random_text_ids(nk.n + 50, nk.vocab, 0);
    for (int64_t i = 0; i < nk.n + 50; i++) ids[i] = i % 4 == 3 ? ids[i - 1] : ids[i]; /* some structure */
    nk.ids = ids;
    for (int order = 1; order <= 4; order++) {
        nk.order = order;
        ngram_model *m = ngram_train(ids, nk.n, nk.vocab, order);
        cr_assert(m, "%s", tg_last_error());
        for (int trial = 0; trial < 6; trial++) {
            int64_t i = tt_randint(order - 1, nk.n + 49);
            int32_t w = (int32_t)tg_rng_below(tt_rng(), nk.vocab);
            double got = ngram_prob_kn(m, ids, i, w), want = naive_prob(&nk, ids + i - order + 1, order, w);
            cr_assert(fabs(got - want) < 1e-12, "order %d, position %lld, w %d: %.15f, naive %.15f " SEED_FMT, order,
                      (long long)i, w, got, want, SEED);
        }
        ngram_free(m);
    }
    free(ids);
}

/* The unigram add-α loss equals its formula over counts made here. */
Test(ngram, unigram_counts_match_a_naive_count)
{
    int64_t vocab = tt_randint(2, 20), n = tt_randint(100, 5000), n_train = n * 9 / 10;
    int32_t *ids = random_text_ids(n, vocab, 0);
    int64_t count[20] = {0};
    for (int64_t i = 0; i < n_train; i++) count[ids[i]]++;
    double alpha = 0.5, want = 0;
    for (int64_t i = n_train; i < n; i++)
        want -= log((count[ids[i]] + alpha) / ((double)n_train + alpha * (double)vocab));
    want /= (double)(n - n_train);
    ngram_model *m = ngram_train(ids, n_train, vocab, 1);
    cr_assert(m, "%s", tg_last_error());
    double got = ngram_loss(m, ids, n_train, n, alpha);
    cr_assert(fabs(got - want) < 1e-12, "unigram add-alpha loss %.15f, naive %.15f", got, want);
    ngram_free(m);
    free(ids);
}

/* A text of period 4 is predictable from 4 characters: the 5-gram loss is near 0. An i.i.d.
 * uniform text is not: no order gets far below log V, and Kneser-Ney stays close to it. */
Test(ngram, learns_structure_and_not_noise)
{
    int64_t vocab = tt_randint(3, 6), n = 200000, n_train = n * 9 / 10;
    int32_t *periodic = random_text_ids(n, vocab, 4);
    ngram_model *m = ngram_train(periodic, n_train, vocab, 5);
    cr_assert(m, "%s", tg_last_error());
    double loss = ngram_loss(m, periodic, n_train, n, -1);
    cr_assert_lt(loss, 1e-3, "periodic text: 5-gram Kneser-Ney loss %g " SEED_FMT, loss, SEED);
    ngram_free(m);
    int32_t *noise = random_text_ids(n, vocab, 0);
    m = ngram_train(noise, n_train, vocab, 5);
    cr_assert(m, "%s", tg_last_error());
    loss = ngram_loss(m, noise, n_train, n, -1);
    double entropy = log((double)vocab);
    cr_assert(loss > entropy - 0.01 && loss < entropy + 0.05, "i.i.d. text: loss %g, entropy %g " SEED_FMT, loss,
              entropy, SEED);
    ngram_free(m);
    free(periodic), free(noise);
}
