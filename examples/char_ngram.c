/* examples/char_ngram.c: the validation loss of character n-gram models, the baseline a
 * trained character model must beat (the model is in examples/char_ngram.h).
 *
 *   ./char_ngram [text file] [max order]       (defaults: data/kjv.txt, 5)
 *
 * The file is loaded as tapegrad's text corpus (tapegrad/data.h): the first 90% of its
 * characters train, the last 10% are scored, each character with the order − 1
 * characters before it as history (the first few reach back into the training text).
 * For each order 1 … max it prints the loss in nats per character of
 *   - interpolated modified Kneser-Ney, whose discounts come from the training counts;
 *   - add-α, with α tuned on the validation text itself (so that figure is optimistic).
 * On the King James Bible (scripts/get-kjv.sh) the 5-gram figures are 1.312 (Kneser-Ney)
 * and 1.368 (add-α); docs/data.md has the whole table. */
#include "char_ngram.h"

#include <stdio.h>
#include <time.h>

static int fail(const char *what)
{
    fprintf(stderr, "char_ngram: %s: %s\n", what, tg_last_error());
    return 1;
}

/* Minimises the add-α loss over log10 α in [−5, 1] by golden-section search (the loss
 * is smooth and has one minimum in α). */
static double best_add_alpha(const ngram_model *m, const int32_t *ids, int64_t start, int64_t end, double *loss)
{
    const double g = 0.6180339887498949;
    double lo = -5, hi = 1, x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
    double f1 = ngram_loss(m, ids, start, end, pow(10, x1)), f2 = ngram_loss(m, ids, start, end, pow(10, x2));
    for (int it = 0; it < 30; it++) {
        if (f1 < f2) { /* the minimum is left of x2 */
            hi = x2, x2 = x1, f2 = f1, x1 = hi - g * (hi - lo);
            f1 = ngram_loss(m, ids, start, end, pow(10, x1));
        } else {
            lo = x1, x1 = x2, f1 = f2, x2 = lo + g * (hi - lo);
            f2 = ngram_loss(m, ids, start, end, pow(10, x2));
        }
    }
    double x = f1 < f2 ? x1 : x2;
    *loss = f1 < f2 ? f1 : f2;
    return pow(10, x);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "data/kjv.txt";
    int max_order = argc > 2 ? atoi(argv[2]) : 5;
    if (max_order < 1 || max_order > NGRAM_MAX_ORDER) {
        fprintf(stderr, "char_ngram: max order must be in 1 … %d\n", NGRAM_MAX_ORDER);
        return 1;
    }
    tg_text *text = tg_text_load(path, NULL);
    if (!text) return fail("load");
    const int32_t *ids = tg_text_ids(text, TG_TEXT_TRAIN); /* the whole text: val follows train */
    int64_t n_train = tg_text_length(text, TG_TEXT_TRAIN), n_val = tg_text_length(text, TG_TEXT_VAL);
    int64_t vocab = tg_text_vocab_size(text);
    printf("%s: %lld characters, vocab %lld; train %lld, val %lld (the last 10%%)\n", path,
           (long long)(n_train + n_val), (long long)vocab, (long long)n_train, (long long)n_val);
    printf("order  Kneser-Ney  add-alpha (alpha tuned on val)   nats/char\n");
    for (int order = 1; order <= max_order; order++) {
        clock_t start = clock();
        ngram_model *m = ngram_train(ids, n_train, vocab, order);
        if (!m) return fail("train");
        double kn = ngram_loss(m, ids, n_train, n_train + n_val, -1), add;
        double alpha = best_add_alpha(m, ids, n_train, n_train + n_val, &add);
        printf("%5d  %10.4f  %9.4f (alpha %.3g)   [%lld distinct %d-grams, %.1f s]\n", order, kn, add, alpha,
               (long long)m->grams[order].size, order, (double)(clock() - start) / CLOCKS_PER_SEC);
        ngram_free(m);
    }
    tg_text_free(text);
    return 0;
}
