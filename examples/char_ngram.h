/* examples/char_ngram.h: a character n-gram language model, the baseline a trained
 * character model must beat.
 *
 * Counts of every k-gram (k = 1 … order) of a training text give two smoothed estimates
 * of P(w | the previous order − 1 characters):
 *
 * - add-α: (c(h w) + α) / (c(h) + α·V) with the full history h — one parameter, α;
 * - interpolated modified Kneser-Ney (Chen & Goodman, 1998), with no free parameter:
 *     P_k(w | h) = (a_k(h w) − D_k(a)) / S_k(h) + γ_k(h) · P_{k−1}(w | h minus its oldest character),
 *     γ_k(h) = (D_k1·N1(h) + D_k2·N2(h) + D_k3·N3+(h)) / S_k(h),   P_0(w) = 1 / V,
 *   where a_k is the raw count at the top order and, below it, the continuation count
 *   N1+(• g) (how many distinct characters precede g: a history that is common only as
 *   part of a longer one then lends little mass); S_k(h) = Σ_w a_k(h w); N1, N2 and N3+
 *   count the w with a_k(h w) = 1, 2, ≥ 3; and the discounts come from the counts of
 *   counts n_r of a_k: Y = n1/(n1 + 2·n2), D_k1 = 1 − 2Y·n2/n1, D_k2 = 2 − 3Y·n3/n2,
 *   D_k3 = 3 − 4Y·n4/n3. A history never seen at order k passes P_{k−1} through. Since
 *   Σ_w (a − D(a)) = S − γ·S, every P_k sums to 1 over the vocabulary.
 *
 * A k-gram is a number in base V, its newest character the lowest digit, so the history
 * of a k-gram is key / V and its suffix (the (k−1)-gram without the oldest character) is
 * key mod V^(k−1). Counts live in open-addressing hash tables, one per order.
 *
 * Used by examples/char_ngram.c (the baseline figures) and tests/test_data.c. */
#ifndef TAPEGRAD_EXAMPLES_CHAR_NGRAM_H
#define TAPEGRAD_EXAMPLES_CHAR_NGRAM_H

#include <tapegrad.h>

#include <math.h>
#include <stdlib.h>

#define NGRAM_MAX_ORDER 8

/* ---- a hash table from uint64 keys to a few int64 values ---------------------------------- */

typedef struct {
    uint64_t *keys;  /* key + 1; 0 marks an empty slot */
    int64_t *values; /* width per slot */
    int64_t capacity, size;
    int width;
} ngram_table;

static inline uint64_t ngram_hash(uint64_t key)
{
    key ^= key >> 33; /* a 64-bit finaliser: neighbouring keys land far apart */
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    return key ^ (key >> 33);
}

static inline bool ngram_table_init(ngram_table *t, int width, int64_t capacity)
{
    *t = (ngram_table){.capacity = capacity, .width = width};
    t->keys = calloc((size_t)capacity, sizeof *t->keys);
    t->values = calloc((size_t)capacity * (size_t)width, sizeof *t->values);
    return t->keys && t->values;
}

static inline void ngram_table_free(ngram_table *t)
{
    free(t->keys);
    free(t->values);
}

/* The slot holding key, or the empty slot where it would go (capacity is a power of 2). */
static inline int64_t ngram_slot(const ngram_table *t, uint64_t key)
{
    int64_t mask = t->capacity - 1, i = (int64_t)(ngram_hash(key) & (uint64_t)mask);
    while (t->keys[i] != 0 && t->keys[i] != key + 1) i = (i + 1) & mask;
    return i;
}

/* The values of key, or NULL when it is absent. */
static inline const int64_t *ngram_find(const ngram_table *t, uint64_t key)
{
    int64_t i = ngram_slot(t, key);
    return t->keys[i] ? t->values + i * t->width : NULL;
}

/* The values of key, inserted as zeros when absent; NULL when memory runs out. */
static inline int64_t *ngram_insert(ngram_table *t, uint64_t key)
{
    if (2 * (t->size + 1) > t->capacity) { /* keep the load under one half */
        ngram_table bigger;
        if (!ngram_table_init(&bigger, t->width, 2 * t->capacity)) {
            ngram_table_free(&bigger);
            return NULL;
        }
        for (int64_t i = 0; i < t->capacity; i++) {
            if (!t->keys[i]) continue;
            int64_t j = ngram_slot(&bigger, t->keys[i] - 1);
            bigger.keys[j] = t->keys[i];
            for (int v = 0; v < t->width; v++) bigger.values[j * t->width + v] = t->values[i * t->width + v];
        }
        bigger.size = t->size;
        ngram_table_free(t);
        *t = bigger;
    }
    int64_t i = ngram_slot(t, key);
    if (!t->keys[i]) t->keys[i] = key + 1, t->size++;
    return t->values + i * t->width;
}

/* ---- the model ------------------------------------------------------------------------------ */

enum { GRAM_COUNT, GRAM_CONT, GRAM_WIDTH };                         /* per k-gram */
enum { HIST_RAW, HIST_SUM, HIST_N1, HIST_N2, HIST_N3, HIST_WIDTH }; /* per history */

typedef struct {
    int order;
    int64_t vocab;
    ngram_table grams[NGRAM_MAX_ORDER + 1];   /* [k]: k-grams → raw count, continuation count */
    ngram_table history[NGRAM_MAX_ORDER + 1]; /* [k]: (k−1)-grams → c(h), S_k(h), N1, N2, N3+ */
    double discount[NGRAM_MAX_ORDER + 1][4];  /* [k][r]: D_kr for a_k = r (r = 1, 2, 3+) */
} ngram_model;

static inline void ngram_free(ngram_model *m)
{
    if (!m) return;
    for (int k = 1; k <= m->order; k++) {
        ngram_table_free(&m->grams[k]);
        ngram_table_free(&m->history[k]);
    }
    free(m);
}

/* a_k(g): the raw count at the top order, the continuation count below it. */
static inline int64_t ngram_adjusted(const ngram_model *m, int k, const int64_t *gram)
{
    return k == m->order ? gram[GRAM_COUNT] : gram[GRAM_CONT];
}

/* The modified Kneser-Ney discounts of order k from the counts of counts of a_k. */
static inline void ngram_discounts(ngram_model *m, int k)
{
    int64_t n[5] = {0};
    const ngram_table *t = &m->grams[k];
    for (int64_t i = 0; i < t->capacity; i++) {
        int64_t a = t->keys[i] ? ngram_adjusted(m, k, t->values + i * t->width) : 0;
        if (a >= 1 && a <= 4) n[a]++;
    }
    double y = n[1] + 2 * n[2] > 0 ? (double)n[1] / (double)(n[1] + 2 * n[2]) : 0.5;
    for (int r = 1; r <= 3; r++) {
        /* D_r = r − (r + 1)·Y·n_{r+1}/n_r; tiny texts can lack some n_r: fall back to Y. */
        double d = n[r] > 0 ? r - (r + 1) * y * (double)n[r + 1] / (double)n[r] : y;
        m->discount[k][r] = d < 0 ? 0 : d > r ? r : d;
    }
}

/* Counts every k-gram of ids (k = 1 … order), then the continuation counts and the
 * per-history sums. NULL (with tg_last_error set) on bad arguments or no memory. */
static inline ngram_model *ngram_train(const int32_t *ids, int64_t n, int64_t vocab, int order)
{
    if (!ids || n < 1 || vocab < 1 || order < 1 || order > NGRAM_MAX_ORDER)
        return tg_set_error(TG_ERR_INVALID, "ngram_train: bad arguments (n %lld, vocab %lld, order %d)", (long long)n,
                            (long long)vocab, order),
               NULL;
    double keys = pow((double)vocab, order);
    if (keys >= 0x1p63)
        return tg_set_error(TG_ERR_INVALID, "ngram_train: vocab %lld ^ order %d does not fit 63-bit keys",
                            (long long)vocab, order),
               NULL;
    ngram_model *m = calloc(1, sizeof *m);
    bool ok = m != NULL;
    if (m) m->order = order, m->vocab = vocab;
    for (int k = 1; ok && k <= order; k++)
        ok = ngram_table_init(&m->grams[k], GRAM_WIDTH, 1024) && ngram_table_init(&m->history[k], HIST_WIDTH, 1024);
    /* Raw counts: the k-gram ending at i, for every i with k − 1 characters before it. */
    uint64_t power[NGRAM_MAX_ORDER + 1] = {1}; /* V^k */
    for (int k = 1; k <= order; k++) power[k] = power[k - 1] * (uint64_t)vocab;
    uint64_t key = 0; /* the last `order` characters, in base V */
    for (int64_t i = 0; ok && i < n; i++) {
        key = (key % power[order - 1]) * (uint64_t)vocab + (uint64_t)ids[i];
        for (int k = 1; ok && k <= order && k <= i + 1; k++) {
            int64_t *gram = ngram_insert(&m->grams[k], key % power[k]);
            if (gram) gram[GRAM_COUNT]++;
            ok = gram != NULL;
        }
    }
    /* Continuation counts: each distinct k-gram adds one to its (k−1)-suffix. */
    for (int k = 2; ok && k <= order; k++) {
        const ngram_table *t = &m->grams[k];
        for (int64_t i = 0; ok && i < t->capacity; i++) {
            if (!t->keys[i]) continue;
            int64_t *suffix = ngram_insert(&m->grams[k - 1], (t->keys[i] - 1) % power[k - 1]);
            if (suffix) suffix[GRAM_CONT]++;
            ok = suffix != NULL;
        }
    }
    /* Per-history sums over the characters that follow it. */
    for (int k = 1; ok && k <= order; k++) {
        ngram_discounts(m, k);
        const ngram_table *t = &m->grams[k];
        for (int64_t i = 0; ok && i < t->capacity; i++) {
            if (!t->keys[i]) continue;
            const int64_t *gram = t->values + i * t->width;
            int64_t a = ngram_adjusted(m, k, gram);
            int64_t *h = ngram_insert(&m->history[k], (t->keys[i] - 1) / (uint64_t)vocab);
            if (!h)
                ok = false;
            else {
                h[HIST_RAW] += gram[GRAM_COUNT];
                h[HIST_SUM] += a;
                if (a > 0) h[a == 1 ? HIST_N1 : a == 2 ? HIST_N2 : HIST_N3]++;
            }
        }
    }
    if (!ok) {
        ngram_free(m);
        return tg_set_error(TG_ERR_NOMEM, "ngram_train: out of memory"), NULL;
    }
    return m;
}

/* The key of the k−1 characters before position i of ids (fewer near the start: then
 * *have is how many there are). */
static inline uint64_t ngram_history_key(const ngram_model *m, const int32_t *ids, int64_t i, int k, int *have)
{
    uint64_t key = 0;
    *have = 0;
    for (int j = k - 1; j >= 1; j--) {
        if (i - j < 0) continue;
        key = key * (uint64_t)m->vocab + (uint64_t)ids[i - j];
        (*have)++;
    }
    return key;
}

/* Interpolated modified Kneser-Ney: P(ids[i] = w | ids[i − order + 1 … i − 1]). */
static inline double ngram_prob_kn(const ngram_model *m, const int32_t *ids, int64_t i, int32_t w)
{
    double p = 1.0 / (double)m->vocab;
    for (int k = 1; k <= m->order; k++) {
        int have;
        uint64_t h_key = ngram_history_key(m, ids, i, k, &have);
        if (have < k - 1) break; /* the text starts too close: stop at the longest history there is */
        const int64_t *h = ngram_find(&m->history[k], h_key);
        if (!h || h[HIST_SUM] == 0) continue; /* unseen history: P_k = P_{k−1} */
        const int64_t *gram = ngram_find(&m->grams[k], h_key * (uint64_t)m->vocab + (uint64_t)w);
        int64_t a = gram ? ngram_adjusted(m, k, gram) : 0;
        const double *d = m->discount[k];
        double s = (double)h[HIST_SUM];
        double gamma = (d[1] * (double)h[HIST_N1] + d[2] * (double)h[HIST_N2] + d[3] * (double)h[HIST_N3]) / s;
        double discounted = a > 0 ? (double)a - d[a >= 3 ? 3 : a] : 0.0;
        p = discounted / s + gamma * p;
    }
    return p;
}

/* Add-α with the history of order − 1 characters (uniform where it was never seen). */
static inline double ngram_prob_add(const ngram_model *m, const int32_t *ids, int64_t i, int32_t w, double alpha)
{
    int have, k = m->order;
    uint64_t h_key = ngram_history_key(m, ids, i, k, &have);
    if (have < k - 1) return 1.0 / (double)m->vocab;
    const int64_t *h = ngram_find(&m->history[k], h_key);
    const int64_t *gram = ngram_find(&m->grams[k], h_key * (uint64_t)m->vocab + (uint64_t)w);
    double c_hw = gram ? (double)gram[GRAM_COUNT] : 0.0, c_h = h ? (double)h[HIST_RAW] : 0.0;
    return (c_hw + alpha) / (c_h + alpha * (double)m->vocab);
}

/* Mean −log P of ids[start … end) in nats per character, each with its own history from
 * ids (which may reach before start). alpha < 0 selects Kneser-Ney, else add-α. */
static inline double ngram_loss(const ngram_model *m, const int32_t *ids, int64_t start, int64_t end, double alpha)
{
    double sum = 0;
    for (int64_t i = start; i < end; i++)
        sum -= log(alpha < 0 ? ngram_prob_kn(m, ids, i, ids[i]) : ngram_prob_add(m, ids, i, ids[i], alpha));
    return end > start ? sum / (double)(end - start) : 0.0;
}

#endif
