/* optim/internal.h: what io/checkpoint.c needs to see of an optimizer: its state buffers
 * (laid out like the store's data buffer) and its step counter. */
#ifndef TAPEGRAD_OPTIM_INTERNAL_H
#define TAPEGRAD_OPTIM_INTERNAL_H

#include "core/internal.h"
#include "tapegrad/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One flat state buffer: numel elements of dtype on the store's device. */
typedef struct {
    const char *name; /* "exp_avg", "exp_avg_sq", "momentum" or "master" */
    void *data;
    tg_dtype dtype;
} tg_optim_buffer;

#define TG_OPTIM_MAX_BUFFERS 3

/* Fills out[] with the optimizer's state buffers; returns how many. */
int tg_optim_buffers(const tg_optim *opt, tg_optim_buffer *out);
tg_params *tg_optim_params(const tg_optim *opt);
const char *tg_optim_kind_name(tg_optim_kind kind);
/* Sets the step counter (on CUDA, the device's: a copy that waits). */
tg_status tg_optim_set_step_count(tg_optim *opt, int64_t step);
/* Whether the store still has the parameters the optimizer was made for. */
bool tg_optim_matches_store(const char *op, const tg_optim *opt);

#ifdef __cplusplus
}
#endif
#endif
