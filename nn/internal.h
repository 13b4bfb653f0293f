/* nn/internal.h: what the layers in nn/ share. */
#ifndef TAPEGRAD_NN_INTERNAL_H
#define TAPEGRAD_NN_INTERNAL_H

#include "core/internal.h"
#include "tapegrad/rng.h"

/* Longest parameter name a layer makes ("backbone.layers.123.mixer.dt_proj.weight" is 41). */
enum { TG_NN_NAME_MAX = 256 };

/* Whether a layer may add "<prefix>.<suffix>" for each suffix, all of dtype: a float dtype the
 * store holds (or any, for an empty store), and names that fit, are valid and are free. Checked
 * before the first one is added, so that a refused init adds nothing. */
bool tg_nn_check_new_params(const char *fn, const tg_params *params, const char *prefix, tg_dtype dtype,
                            const char *const *suffixes, int n);

/* Adds "<prefix>.<suffix>" (or "<suffix>" for an empty prefix) to params. On failure the
 * message names fn and the parameter. */
tg_tensor *tg_nn_add_param(const char *fn, tg_params *params, const char *prefix, const char *suffix, tg_dtype dtype,
                           int ndim, const int64_t *shape);

/* Initial values, drawn on the host in row-major order and copied to t's device, so a
 * seed gives the same values everywhere. */
tg_status tg_nn_fill_uniform(const char *fn, tg_tensor *t, tg_rng *rng, double low, double high);
tg_status tg_nn_fill_normal(const char *fn, tg_tensor *t, tg_rng *rng, double mean, double std);
/* t ← values (numel(t) doubles, row-major), rounded once to t's dtype. */
tg_status tg_nn_fill_values(const char *fn, tg_tensor *t, const double *values);
/* A host buffer of n doubles for the fills (NULL and a message naming fn when it fails). */
double *tg_nn_host_buffer(const char *fn, int64_t n);

/* For a forward that failed part-way: rewinds the tape to mark and puts "fn: where: " in
 * front of the failing op's message. Returns NULL. */
tg_tensor *tg_nn_fail(tg_tape *tape, tg_tape_mark mark, const char *fn, const char *where);

#endif
