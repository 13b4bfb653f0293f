/* tapegrad/params.h: a model's parameters in one contiguous buffer.
 *
 * Every parameter's data sits in one buffer and every gradient in a second one with
 * the same layout, so zeroing, clipping and the optimizer step are single passes over
 * flat memory. Parameters are leaves that always require gradients; backward adds
 * into their ->grad, and tg_params_zero_grad clears all of them at once.
 *
 * The buffers grow as parameters are added (tensors stay valid: they refer to the
 * store's storage, not to raw addresses; the pointers tg_params_data and tg_params_grad
 * gave before do not), so build the model first, then train.
 */
#ifndef TAPEGRAD_PARAMS_H
#define TAPEGRAD_PARAMS_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_params tg_params;

TG_API tg_params *tg_params_create(tg_device device);
TG_API void tg_params_free(tg_params *params);
/* A new zero-filled parameter, owned by the store; the name is copied (used in messages and
 * checkpoints). The name must be new to the store, non-empty, valid UTF-8 without control
 * characters below 0x20, not "__metadata__" and not start with "optim." (so that a checkpoint
 * can always hold it); the dtype a float one, the store's; the shape 1 to TG_MAX_DIMS sizes,
 * each ≥ 1, that fit. Otherwise NULL, error set. */
TG_API tg_tensor *tg_params_add(tg_params *params, const char *name, tg_dtype dtype, int ndim, const int64_t *shape);
/* For a NULL store, an index past the end or a name the store lacks, the queries below set
 * the error and give 0 or NULL. */
TG_API size_t tg_params_count(const tg_params *params);
TG_API tg_tensor *tg_params_get(const tg_params *params, size_t index);
TG_API tg_tensor *tg_params_find(const tg_params *params, const char *name);
/* Total elements over all parameters. */
TG_API int64_t tg_params_numel(const tg_params *params);
TG_API tg_status tg_params_zero_grad(tg_params *params);
/* The flat data and gradient buffers (all parameters share one dtype per store). */
TG_API void *tg_params_data(tg_params *params);
TG_API void *tg_params_grad(tg_params *params);

/* Plain SGD over the whole store: p ← p − lr · grad (lr must be finite: else TG_ERR_INVALID
 * and nothing changes). */
TG_API tg_status tg_params_sgd_step(tg_params *params, double lr);

#ifdef __cplusplus
}
#endif
#endif
