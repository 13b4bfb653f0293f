/* core/rng.c: xoshiro256** seeded through splitmix64; Gaussian values by Box–Muller. */
#include "internal.h"
#include "tapegrad/rng.h"

#ifdef TG_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

#include <math.h>

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tg_rng_seed(tg_rng *rng, uint64_t seed)
{
    if (!rng) {
        tg_set_error(TG_ERR_INVALID, "tg_rng_seed: rng is NULL");
        return;
    }
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tg_rng_next(tg_rng *rng)
{
    if (!rng) {
        tg_set_error(TG_ERR_INVALID, "tg_rng_next: rng is NULL");
        return 0;
    }
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tg_rng_uniform(tg_rng *rng)
{
    if (!rng) {
        tg_set_error(TG_ERR_INVALID, "tg_rng_uniform: rng is NULL");
        return NAN;
    }
    return (double)(tg_rng_next(rng) >> 11) * 0x1.0p-53;
}

double tg_rng_normal(tg_rng *rng)
{
    if (!rng) {
        tg_set_error(TG_ERR_INVALID, "tg_rng_normal: rng is NULL");
        return NAN;
    }
    double u1 = 1.0 - tg_rng_uniform(rng); /* (0, 1]: log is finite */
    double u2 = tg_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

int64_t tg_rng_below(tg_rng *rng, int64_t bound)
{
    if (!rng || bound <= 0) {
        if (!rng)
            tg_set_error(TG_ERR_INVALID, "tg_rng_below: rng is NULL");
        else
            tg_set_error(TG_ERR_INVALID, "tg_rng_below: bound must be > 0, not %lld", (long long)bound);
        return -1;
    }
    /* Rejection keeps the result exactly uniform. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % (uint64_t)bound;
    uint64_t x;
    do x = tg_rng_next(rng);
    while (x >= limit);
    return (int64_t)(x % (uint64_t)bound);
}

static tg_status fill_random(const char *op, tg_tensor *t, tg_rng *rng, double a, double b, bool normal)
{
    if (!tg_check_float(op, "t", t)) return tg_last_status();
    if (!rng) return tg_set_error(TG_ERR_INVALID, "%s: rng is NULL", op);
    if (normal && !(isfinite(a) && isfinite(b) && b >= 0))
        return tg_set_error(TG_ERR_INVALID, "%s: mean (%g) must be finite and stddev (%g) finite and >= 0", op, a, b);
    if (!normal && !(isfinite(a) && isfinite(b) && a <= b))
        return tg_set_error(TG_ERR_INVALID, "%s: low (%g) and high (%g) must be finite with low <= high", op, a, b);
    if (t->device != TG_DEVICE_CPU) {
#ifdef TG_HAVE_CUDA
        /* cuRAND, seeded from this generator: the same seed gives the same tensor. */
        return tg_cuda_fill_random(t, tg_rng_next(rng), normal, a, b);
#else
        return tg_error_no_kernel(op, t->device);
#endif
    }
    int64_t n = tg_numel(t);
    for (int64_t i = 0; i < n; i++)
        tg_set_flat(t, i, normal ? a + b * tg_rng_normal(rng) : a + (b - a) * tg_rng_uniform(rng));
    return TG_OK;
}

tg_status tg_fill_uniform(tg_tensor *t, tg_rng *rng, double low, double high)
{
    return fill_random("tg_fill_uniform", t, rng, low, high, false);
}

tg_status tg_fill_normal(tg_tensor *t, tg_rng *rng, double mean, double stddev)
{
    return fill_random("tg_fill_normal", t, rng, mean, stddev, true);
}
