/* tapegrad/checkpoint.h: training checkpoints in one safetensors file.
 *
 * A checkpoint holds the parameters (tensors named like them), the optimizer's state
 * ("optim.exp_avg.<name>", "optim.exp_avg_sq.<name>", "optim.momentum.<name>",
 * "optim.master.<name>"), and in "__metadata__" the training step, the optimizer's step,
 * a generator's state, a JSON config text, a format version and a CRC-32 of the whole file.
 * Python's `safetensors` reads it as is. docs/training.md describes the format.
 *
 * Saving is atomic: the file is written under a temporary name in the target's directory,
 * flushed to disk, and renamed over the target, so a crash leaves either the old file or
 * the new one (and perhaps a stray ".<name>.tmp.XXXXXX" beside it, which a later save of the
 * same target removes once it is an hour old), never a torn one.
 *
 * Loading checks everything (layout, JSON, dtypes, shapes, offsets, names against the
 * model, metadata, the checksum) before it changes anything: a truncated, corrupt or
 * mismatched file is answered with an error naming the file and the problem, and the
 * model, the optimizer and the info are left as they were. */
#ifndef TAPEGRAD_CHECKPOINT_H
#define TAPEGRAD_CHECKPOINT_H

#include "optim.h"
#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version 2 files carry a CRC-32 of the whole file; version 1 files (a CRC of the data
 * only) still load. */
#define TG_CHECKPOINT_FORMAT_VERSION 2

typedef struct {
    int64_t step; /* the training step to resume at (the caller's counter) */
    tg_rng rng;   /* e.g. the generator that draws the batches; all zero: none saved (no
                   * seeded generator has that state, which would give only zeros) */
    /* A JSON text describing the run (model sizes, hyperparameters). Saving: NULL saves
     * "{}". Loading: a new copy, which the caller frees with tg_checkpoint_info_clear
     * (loading overwrites *info whole and frees nothing: clear an earlier one first). */
    char *config;
} tg_checkpoint_info;

/* Saves params (and optim's state when optim is not NULL; it must belong to params) with
 * the info (NULL: step 0, a zero rng state, "{}") to path. */
TG_API tg_status tg_checkpoint_save(const char *path, tg_params *params, const tg_optim *optim,
                                    const tg_checkpoint_info *info);

/* Loads a checkpoint into params (every parameter must be in the file, with its dtype and
 * shape, and the file must hold no other tensor), into optim when not NULL (the file must
 * hold state of the same kind for every parameter; when optim is NULL the file's optimizer
 * state is ignored), and into info when not NULL. */
TG_API tg_status tg_checkpoint_load(const char *path, tg_params *params, tg_optim *optim, tg_checkpoint_info *info);
/* The same from bytes in memory; `name` stands for the file in messages. */
TG_API tg_status tg_checkpoint_load_buffer(const void *bytes, size_t size, const char *name, tg_params *params,
                                           tg_optim *optim, tg_checkpoint_info *info);
/* Reads only the info (step, rng, config) after checking the file's layout and metadata
 * (not the checksum: only the header is read): to build the model a checkpoint's config
 * describes before loading into it. info->config is a new copy, as for loading. */
TG_API tg_status tg_checkpoint_read_info(const char *path, tg_checkpoint_info *info);
/* Frees info->config and sets it to NULL (a NULL info sets the error). */
TG_API void tg_checkpoint_info_clear(tg_checkpoint_info *info);

#ifdef __cplusplus
}
#endif
#endif
