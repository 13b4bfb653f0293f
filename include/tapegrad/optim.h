/* tapegrad/optim.h: optimizers (SGD with momentum, AdamW), parameter groups, global-norm
 * gradient clipping and learning-rate schedules over a tg_params store.
 *
 * An optimizer keeps its state (moment buffers, and an f32 master copy of bf16 or f16
 * parameters) in flat buffers laid out like the store's, so one step is one pass over
 * the parameters, the gradients and the state: one loop on the CPU, one kernel launch on
 * CUDA. A training step:
 *
 *   for (int micro = 0; micro < n; micro++) {       // gradient accumulation
 *       tg_tensor *loss = model_loss(...);           // the mean over one micro-batch
 *       tg_backward(tape, loss);                     // adds into the store's gradients
 *       tg_tape_reset(tape);
 *   }
 *   tg_optim_step(opt, n);                           // uses the mean: gradients / n
 *   tg_params_zero_grad(params);
 *
 * docs/training.md has the formulas, the groups' default rule and the schedules.
 */
#ifndef TAPEGRAD_OPTIM_H
#define TAPEGRAD_OPTIM_H

#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- learning-rate schedules --------------------------------------------------------- */

typedef enum {
    TG_SCHEDULE_CONSTANT = 0, /* factor 1 at every step */
    TG_SCHEDULE_COSINE = 1,   /* linear warm-up, then a half cosine down to a floor */
} tg_schedule_kind;

typedef struct {
    tg_schedule_kind kind;
    int64_t warmup_steps; /* steps 0 .. warmup_steps − 1 ramp up linearly */
    int64_t total_steps;  /* the cosine reaches the floor at this step and stays there */
    double min_factor;    /* the floor, as a fraction of the base learning rate, in [0, 1] */
} tg_schedule;

/* The factor on the base learning rate at step (0-based). With W warm-up and T total steps:
 *   step < W:       (step + 1) / W
 *   W ≤ step < T:   min + (1 − min) · ½ · (1 + cos(π · (step − W) / (T − W)))
 *   step ≥ T:       min
 * TG_SCHEDULE_CONSTANT uses the warm-up only (then 1); a NULL or invalid schedule, or a
 * negative step, gives NaN and sets the error (naming the field). */
TG_API double tg_schedule_factor(const tg_schedule *schedule, int64_t step);

/* ---- gradient norm and clipping ---------------------------------------------------------
 * The global L2 norm over every gradient of the store, summed in a fixed order (double,
 * in index order on the CPU; double per-block partials added in block order on CUDA), so
 * the same gradients always give the same norm. */
TG_API tg_status tg_params_grad_norm(tg_params *params, double *norm);
/* Scales all gradients by max_norm / norm when the norm exceeds max_norm (to exactly
 * max_norm, up to rounding); *norm_before (may be NULL) receives the norm before. max_norm
 * must be finite and > 0; a norm that is not finite leaves the gradients unchanged and
 * gives TG_ERR_STATE. */
TG_API tg_status tg_params_clip_grad_norm(tg_params *params, double max_norm, double *norm_before);

/* ---- optimizers ----------------------------------------------------------------------- */

typedef enum { TG_OPTIM_SGD = 0, TG_OPTIM_ADAMW = 1 } tg_optim_kind;

typedef struct {
    tg_optim_kind kind;
    double lr;           /* the base learning rate; the schedule and each group scale it */
    double weight_decay; /* of group 0 ("decay"); see the groups below */
    /* SGD: buf ← momentum·buf + g; p ← p − lr·(nesterov ? g + momentum·buf : buf), with
     * g = grad + weight_decay·p (classic L2 decay). momentum 0 is plain SGD. */
    double momentum;
    bool nesterov;
    /* AdamW: decoupled weight decay p ← p·(1 − lr·weight_decay), moments with bias
     * correction, p ← p − lr·m̂ / (√v̂ + eps). */
    double beta1, beta2, eps;
    double max_grad_norm; /* > 0: clip the (averaged) gradients' global norm to this */
    tg_schedule schedule; /* zero-initialised: constant */
} tg_optim_config;

/* Defaults: AdamW betas (0.9, 0.999), eps 1e-8, weight decay 0.01; SGD with the given
 * momentum, without Nesterov or decay. No clipping, constant schedule. */
TG_API tg_optim_config tg_adamw_config(double lr);
TG_API tg_optim_config tg_sgd_config(double lr, double momentum);

typedef struct tg_optim tg_optim;

/* An optimizer for every parameter the store holds now (add no parameters afterwards).
 * Its state lives on the store's device. A bf16 or f16 store gets an f32 master copy of
 * the parameters, taken now: the update runs on the master and rounds into the store. */
TG_API tg_optim *tg_optim_create(tg_params *params, const tg_optim_config *config);
TG_API void tg_optim_free(tg_optim *opt);

/* One update from the gradients in the store, which hold the sum over micro_batches
 * backward calls (each of a micro-batch mean): the step uses gradients / micro_batches,
 * so n micro-batches of m examples equal one batch of n·m. Clipping (when configured)
 * applies to that mean. Scaling, clipping and the update are one pass; the gradients
 * are not modified.
 *
 * With clipping on, a step whose gradient norm is not finite changes nothing (parameters,
 * state, step count) and is counted as skipped (without clipping the norm is not measured
 * and no step is skipped for it). On a CUDA store the step never waits for the device: the
 * norm, the clip factor, the learning rate of the schedule and the decision to skip are
 * worked out on the device, so the call returns TG_OK and tg_optim_skipped_steps tells
 * afterwards; this is what lets a whole training step be one CUDA graph (tapegrad/graph.h).
 * On the CPU the call also fails with TG_ERR_STATE, naming the norm. */
TG_API tg_status tg_optim_step(tg_optim *opt, int micro_batches);

/* Steps taken so far (the next step's 0-based schedule index). On CUDA these accessors read
 * the device's counters, so they wait for the queued work. A NULL opt sets the error and gives
 * −1 (the counts), NaN (the rates and norms) or NULL (the config). */
TG_API int64_t tg_optim_step_count(const tg_optim *opt);
/* Steps that changed nothing: a clipped norm that was not finite, or (in a captured CUDA
 * step) a bad input that the device found (tg_device_check_errors names it). */
TG_API int64_t tg_optim_skipped_steps(const tg_optim *opt);
/* The base learning rate times the schedule factor of the next step. */
TG_API double tg_optim_lr(const tg_optim *opt);
/* The gradient norm the last step measured (before clipping; NaN when not measured). */
TG_API double tg_optim_last_grad_norm(const tg_optim *opt);
TG_API const tg_optim_config *tg_optim_get_config(const tg_optim *opt);
/* Changes the base learning rate (and nothing else) from the next step on. This,
 * tg_optim_add_group and tg_optim_set_group update the device's copy of the configuration
 * (a copy that waits), so call them outside a CUDA graph capture; a graph captured before
 * reads the new values when it next runs. tg_optim_assign is not one of them: see there. */
TG_API tg_status tg_optim_set_lr(tg_optim *opt, double lr);
/* Takes the master copy again from the store (bf16/f16 stores; a no-op otherwise): after
 * parameters were changed by other means than the optimizer or tg_checkpoint_load. */
TG_API tg_status tg_optim_sync_master(tg_optim *opt);

/* ---- parameter groups ---------------------------------------------------------------------
 * Every parameter belongs to one group; a group scales the learning rate and has its own
 * weight decay. Two groups exist from the start:
 *   TG_OPTIM_GROUP_DECAY     lr_scale 1, the config's weight decay;
 *   TG_OPTIM_GROUP_NO_DECAY  lr_scale 1, no weight decay;
 * and a parameter starts in NO_DECAY when tg_optim_default_no_decay(name) says so, else in
 * DECAY. tg_optim_assign moves parameters by name pattern; the last call wins. */
#define TG_OPTIM_GROUP_DECAY 0
#define TG_OPTIM_GROUP_NO_DECAY 1
#define TG_OPTIM_MAX_GROUPS 16

typedef struct {
    double lr_scale;     /* multiplies the scheduled learning rate */
    double weight_decay; /* replaces the config's for this group */
} tg_optim_group;

/* The default rule (false, error set, for a NULL name), on the name's dot-separated parts:
 * the last part is "bias" or ends in "_bias", or is "A_log" or "D"; or any part contains
 * "norm" or "embed", or is "ln" or starts with "ln_" (biases, norm weights, SSM A_log and
 * D, embeddings). */
TG_API bool tg_optim_default_no_decay(const char *name);
/* A new group; returns its index, or −1 (with a message) when full or invalid. */
TG_API int tg_optim_add_group(tg_optim *opt, tg_optim_group group);
TG_API tg_status tg_optim_set_group(tg_optim *opt, int index, tg_optim_group group);
TG_API tg_status tg_optim_get_group(const tg_optim *opt, int index, tg_optim_group *group);
/* Moves every parameter whose whole name matches the glob pattern ('*' any text, dots
 * included; '?' one character; [...] a set) into the group. Matching no parameter is an
 * error (a misspelt pattern should not pass silently); *matched (may be NULL) gets the count.
 * The move takes effect when the next tg_optim_step rebuilds the table of groups (a copy
 * from the host, which a CUDA graph capture refuses); a graph captured before the call
 * keeps the table it was captured with, so capture the step again after an assign. */
TG_API tg_status tg_optim_assign(tg_optim *opt, const char *pattern, int group, size_t *matched);
/* The group of a parameter, or −1 (error set) when the store has no such name. */
TG_API int tg_optim_group_of(const tg_optim *opt, const char *name);

#ifdef __cplusplus
}
#endif
#endif
