/* tapegrad/nn.h: layers, and the Mamba language model built from them.
 *
 * A layer is a small struct of pointers to its parameters, which live in a tg_params
 * store under PyTorch-style names ("<prefix>.weight", "<prefix>.bias"). Initialising a
 * layer adds its parameters to the store and fills them; its forward is a short
 * composition of ops on a tape, so its backward is the ops' own. A layer runs on the
 * device its store is on.
 *
 * Initial values are drawn on the host from a tg_rng, parameter after parameter in the
 * order they are added, and then copied to the store: one seed gives the same
 * parameters, bit for bit, on every run and every device (rounded once to the store's
 * dtype).
 *
 * Failures are reported as ops report them: NULL or a status, and a message that starts
 * with the function's name (followed, for a failed op inside a forward, by that op's own
 * message). A failed forward leaves the tape exactly as it was.
 */
#ifndef TAPEGRAD_NN_H
#define TAPEGRAD_NN_H

#include "ops.h"
#include "params.h"
#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Linear: y = x·weightᵀ + bias (nn/layers.c) -------------------------------------- */
typedef struct {
    tg_tensor *weight; /* (out_features, in_features), as PyTorch stores it */
    tg_tensor *bias;   /* (out_features), or NULL */
} tg_nn_linear;

/* Adds "<prefix>.weight" and, when bias, "<prefix>.bias", both drawn as PyTorch's
 * nn.Linear draws them: uniform in ±1/√in_features. */
TG_API tg_status tg_nn_linear_init(tg_nn_linear *layer, tg_params *params, const char *prefix, int64_t in_features,
                                   int64_t out_features, bool bias, tg_dtype dtype, tg_rng *rng);
/* x (..., in_features) → (..., out_features). */
TG_API tg_tensor *tg_nn_linear_forward(tg_tape *tape, const tg_nn_linear *layer, tg_tensor *x);

/* ---- Embedding: rows of a (num_embeddings, dim) table --------------------------------- */
typedef struct {
    tg_tensor *weight; /* (num_embeddings, dim) */
} tg_nn_embedding;

/* Adds "<prefix>.weight", drawn from N(0, std²). */
TG_API tg_status tg_nn_embedding_init(tg_nn_embedding *layer, tg_params *params, const char *prefix,
                                      int64_t num_embeddings, int64_t dim, double std, tg_dtype dtype, tg_rng *rng);
/* ids: i32 of any shape S → (S..., dim). */
TG_API tg_tensor *tg_nn_embedding_forward(tg_tape *tape, const tg_nn_embedding *layer, tg_tensor *ids);

/* ---- RMSNorm over the last axis: y = x / √(mean(x²) + eps) · weight ------------------- */
typedef struct {
    tg_tensor *weight; /* (dim), initialised to ones */
    double eps;
} tg_nn_rmsnorm;

TG_API tg_status tg_nn_rmsnorm_init(tg_nn_rmsnorm *layer, tg_params *params, const char *prefix, int64_t dim,
                                    double eps, tg_dtype dtype);
TG_API tg_tensor *tg_nn_rmsnorm_forward(tg_tape *tape, const tg_nn_rmsnorm *layer, tg_tensor *x);

/* ---- Mamba (nn/mamba.c) ------------------------------------------------------------------
 * The language model of Gu & Dao (2023): an embedding, n_layer residual layers
 * h ← h + Mixer(RMSNorm(h)), a final RMSNorm and an LM head tied to the embedding.
 * The mixer (E = d_inner = expand·d_model, N = d_state, R = dt_rank, K = d_conv), on x (B, L, d_model):
 *   [xi; z] = in_proj(x)                                    (B, 2E, L), no bias
 *   u       = silu(causal_conv1d(xi) + conv bias)           depthwise, kernel K
 *   [dt_low; Bm; Cm] = x_proj(u)                            (B, R + 2N, L), no bias
 *   delta   = dt_proj.weight · dt_low                       (B, E, L); dt = softplus(delta + dt_proj.bias)
 *   y       = selective_scan(u, delta, A = −exp(A_log), Bm, Cm, D skip) · silu(z)
 *   out     = out_proj(y)                                   (B, L, d_model), no bias
 * docs/mamba.md lists the parameters, their initialisation and the memory a step keeps. */

/* What a mixer keeps of the conv output u and of delta between the forward and the backward,
 * and the model of each mixer's input RMSNorm(h) (docs/mamba.md, "Memory"). Recomputing them
 * costs one conv, one small product and one RMSNorm per layer in the backward and saves
 * (2·d_inner + d_model)·B·L elements per layer; the mixer's output, which no backward reads,
 * is then given back after the residual add too (B·L·d_model). Only CUDA gives the bytes
 * back (a CPU step's activations live in the tape's arena until the reset). */
typedef enum {
    TG_ACTIVATIONS_AUTO,      /* recompute on CUDA, keep on the CPU */
    TG_ACTIVATIONS_RECOMPUTE, /* recompute on every device */
    TG_ACTIVATIONS_KEEP,      /* keep them */
} tg_mamba_activations;

/* Zero fields take the default shown; tg_mamba_config_resolve fills them in. */
typedef struct {
    int64_t vocab_size;               /* required */
    int64_t d_model;                  /* required */
    int64_t n_layer;                  /* required */
    int64_t d_state;                  /* 0: 16 */
    int64_t expand;                   /* 0: 2 (d_inner = expand·d_model) */
    int64_t d_conv;                   /* 0: 4 */
    int64_t dt_rank;                  /* 0: ⌈d_model / 16⌉ */
    tg_dtype dtype;                   /* of every parameter: TG_F32 (0), TG_F64, TG_BF16 or TG_F16 */
    double eps;                       /* of the RMSNorms; 0: 1e-5 */
    double dt_min;                    /* dt at initialisation is log-uniform in [dt_min, dt_max]; 0: 1e-3 */
    double dt_max;                    /* 0: 0.1 */
    double dt_init_floor;             /* and at least this; 0: 1e-4 */
    double embedding_std;             /* 0: 0.02 */
    int64_t scan_chunk;               /* steps per recompute chunk of the selective scan's backward; 0: 64 */
    tg_mamba_activations activations; /* 0: TG_ACTIVATIONS_AUTO */
} tg_mamba_config;

/* Copies config with the defaults filled in; fails (naming the field) on a value out of
 * range, a non-float dtype or sizes whose products overflow. */
TG_API tg_status tg_mamba_config_resolve(const tg_mamba_config *config, tg_mamba_config *resolved);

/* The mixer: parameter names are relative to its prefix ("backbone.layers.0.mixer"). */
typedef struct {
    int64_t d_model, d_inner, d_state, d_conv, dt_rank, scan_chunk;
    tg_tensor *A_log;                 /* "A_log" (d_inner, d_state); A = −exp(A_log) */
    tg_tensor *D;                     /* "D" (d_inner): the skip y += D·u */
    tg_nn_linear in_proj;             /* "in_proj" d_model → 2·d_inner, no bias */
    tg_tensor *conv_weight;           /* "conv1d.weight" (d_inner, 1, d_conv), as PyTorch's Conv1d stores it */
    tg_tensor *conv_bias;             /* "conv1d.bias" (d_inner) */
    tg_nn_linear x_proj;              /* "x_proj" d_inner → dt_rank + 2·d_state, no bias */
    tg_nn_linear dt_proj;             /* "dt_proj" dt_rank → d_inner; its bias is added inside the softplus */
    tg_nn_linear out_proj;            /* "out_proj" d_inner → d_model, no bias */
    tg_mamba_activations activations; /* the config's */
} tg_mamba_mixer;

/* The recurrent state of one mixer between two pieces of a sequence. On input either
 * may be NULL (zeros); as output, both are tensors on the tape (copy or tg_detach them
 * to carry them past tg_tape_reset). Gradients flow through both. */
typedef struct {
    tg_tensor *conv; /* (B, d_inner, d_conv − 1): the convolution's last inputs (NULL when d_conv = 1) */
    tg_tensor *ssm;  /* (B, d_inner, d_state): the scan state h after the last step */
} tg_mamba_state;

/* Adds the mixer's parameters (in checkpoint order: A_log, D, in_proj, conv1d, x_proj,
 * dt_proj, out_proj) and initialises them as the reference does. config is resolved here (zero
 * fields take their defaults); a rejected config, store or name adds nothing. */
TG_API tg_status tg_mamba_mixer_init(tg_mamba_mixer *mixer, tg_params *params, const char *prefix,
                                     const tg_mamba_config *config, tg_rng *rng);
/* x (B, L, d_model) → (B, L, d_model). initial and final may be NULL. */
TG_API tg_tensor *tg_mamba_mixer_forward(tg_tape *tape, const tg_mamba_mixer *mixer, tg_tensor *x,
                                         const tg_mamba_state *initial, tg_mamba_state *final);

typedef struct {
    tg_nn_rmsnorm norm;   /* "backbone.layers.<i>.norm" */
    tg_mamba_mixer mixer; /* "backbone.layers.<i>.mixer" */
} tg_mamba_layer;

typedef struct {
    tg_mamba_config config;    /* resolved */
    tg_params *params;         /* the store holding every parameter (not owned) */
    tg_nn_embedding embedding; /* "backbone.embedding" (vocab_size, d_model); also the LM head */
    tg_mamba_layer *layers;    /* n_layer of them */
    tg_nn_rmsnorm norm_f;      /* "backbone.norm_f" */
} tg_mamba;

/* Adds every parameter to params and initialises them from rng. The store must hold no
 * parameter whose name starts with "backbone." (one model per store), and its parameters
 * must share config->dtype. The returned struct is freed with tg_mamba_free; the
 * parameters stay with the store. A rejected config or store adds nothing; running out of
 * memory part-way leaves the parameters added until then in the store. */
TG_API tg_mamba *tg_mamba_create(const tg_mamba_config *config, tg_params *params, tg_rng *rng);
TG_API void tg_mamba_free(tg_mamba *model);

/* ids: i32 (B, L) on the model's device → logits (B, L, vocab_size). initial and final,
 * when not NULL, are arrays of n_layer states (a piece of a longer sequence: pass the
 * previous piece's final states as this one's initial states). */
TG_API tg_tensor *tg_mamba_forward(tg_tape *tape, const tg_mamba *model, tg_tensor *ids, const tg_mamba_state *initial,
                                   tg_mamba_state *final);
/* The mean cross-entropy of the logits against targets (i32 (B, L)), skipping targets
 * equal to ignore_index. */
TG_API tg_tensor *tg_mamba_loss(tg_tape *tape, const tg_mamba *model, tg_tensor *ids, tg_tensor *targets,
                                int32_t ignore_index);

#ifdef __cplusplus
}
#endif
#endif
