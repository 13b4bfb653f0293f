/* tapegrad/rng.h: a seeded, portable random number generator (xoshiro256**).
 * The same seed gives the same integers and uniform doubles on every machine; normal
 * values also go through the C library's log and cos. */
#ifndef TAPEGRAD_RNG_H
#define TAPEGRAD_RNG_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t s[4];
} tg_rng;

/* A NULL rng sets the error: seeding does nothing, next returns 0, uniform and normal NaN. */
TG_API void tg_rng_seed(tg_rng *rng, uint64_t seed);
TG_API uint64_t tg_rng_next(tg_rng *rng);
TG_API double tg_rng_uniform(tg_rng *rng); /* [0, 1) */
TG_API double tg_rng_normal(tg_rng *rng);  /* mean 0, standard deviation 1 */
/* Uniform in [0, bound); −1 (error set) for a NULL rng or bound ≤ 0. */
TG_API int64_t tg_rng_below(tg_rng *rng, int64_t bound);

/* Fill any float tensor (any layout). low ≤ high and stddev ≥ 0, all finite; else
 * TG_ERR_INVALID and t is unchanged. A CPU tensor takes one or two draws per element
 * (uniform in [low, high)); a CUDA tensor is filled by cuRAND (Philox, float values,
 * uniform in (low, high]) seeded with one draw, so the same seed gives the same CUDA
 * tensor but not the values of a CPU one. */
TG_API tg_status tg_fill_uniform(tg_tensor *t, tg_rng *rng, double low, double high);
TG_API tg_status tg_fill_normal(tg_tensor *t, tg_rng *rng, double mean, double stddev);

#ifdef __cplusplus
}
#endif
#endif
