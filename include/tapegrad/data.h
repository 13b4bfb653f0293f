/* tapegrad/data.h: training data on the CPU — the two synthetic tasks of the Mamba paper
 * (Selective Copying, Induction Heads) and a character-level text corpus.
 *
 * Every source fills caller-provided int32 buffers of shape (batch, seq_len), row-major:
 * `inputs` holds token ids and `targets` the id the model must predict at each position,
 * or TG_IGNORE_INDEX where nothing is scored. Pass TG_IGNORE_INDEX to tg_cross_entropy
 * so that those positions are left out of the mean. Randomness comes only from the
 * tg_rng passed in, so the same seed gives the same batches on every machine.
 * docs/data.md draws the token layouts.
 */
#ifndef TAPEGRAD_DATA_H
#define TAPEGRAD_DATA_H

#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The target of a position that is not scored (the usual value in other frameworks). */
#define TG_IGNORE_INDEX (-100)

/* ---- Selective Copying ----------------------------------------------------------------
 * A row of seq_len tokens: the first seq_len − n_copy slots are noise (id 0) except for
 * n_copy data tokens, drawn uniformly from 1 … vocab − 2, at positions drawn uniformly
 * (without repetition) among those slots; the last n_copy slots are markers (vocab − 1).
 * At the i-th marker the target is the i-th data token (in order of position); every
 * other target is TG_IGNORE_INDEX. The paper's setting is vocab 16, n_copy 16 and 4096
 * noise slots, that is seq_len = 4096 + 2·16 = 4128. */
typedef struct {
    int64_t vocab;  /* all ids, noise and marker included; ≥ 3 */
    int64_t n_copy; /* data tokens to copy; ≥ 1, and seq_len ≥ 2·n_copy */
} tg_selective_copy_config;

/* ---- Induction Heads -------------------------------------------------------------------
 * A row of seq_len tokens drawn uniformly from the ordinary ids 0 … vocab − 3, except: a
 * trigger (vocab − 1) at a uniformly drawn position p in [0, seq_len − 3], and a second
 * trigger at the last position. The target of the last position is the token at p + 1
 * (the one that followed the first trigger); every other target is TG_IGNORE_INDEX, or,
 * with score_all_positions, the next input token (language-model style: random tokens
 * are unpredictable, so this adds a constant to the loss). Id vocab − 2 is reserved and
 * never appears, so vocab 16 leaves 14 ordinary tokens, as in the paper. The paper trains
 * at seq_len 256 and evaluates from 2^6 to 2^20; any seq_len ≥ 3 works. */
typedef struct {
    int64_t vocab;            /* ≥ 3; the paper uses 16 */
    bool score_all_positions; /* default false: only the last position is scored */
} tg_induction_config;

/* Fill `batch` rows of `seq_len` tokens. On bad arguments nothing is written, the rng is
 * not advanced, and the message names the function and the offending values. */
TG_API tg_status tg_task_selective_copy_batch(const tg_selective_copy_config *config, tg_rng *rng, int64_t batch,
                                              int64_t seq_len, int32_t *inputs, int32_t *targets);
TG_API tg_status tg_task_induction_batch(const tg_induction_config *config, tg_rng *rng, int64_t batch, int64_t seq_len,
                                         int32_t *inputs, int32_t *targets);

/* The same, into two contiguous (batch, seq_len) TG_I32 tensors on the CPU. */
TG_API tg_status tg_task_selective_copy_fill(const tg_selective_copy_config *config, tg_rng *rng, tg_tensor *inputs,
                                             tg_tensor *targets);
TG_API tg_status tg_task_induction_fill(const tg_induction_config *config, tg_rng *rng, tg_tensor *inputs,
                                        tg_tensor *targets);

/* ---- character-level text ----------------------------------------------------------------
 * A whole file held in memory as ids. A character is a Unicode code point of UTF-8 text
 * (the default: "é" is one symbol, and decoded samples are valid UTF-8) or, with
 * TG_TEXT_BYTES, a byte (for files that are not UTF-8). For ASCII text the two agree. The
 * vocabulary is every character of the whole file, sorted by value: id i is the i-th
 * smallest. The last val_fraction of the characters (rounded down) form the validation
 * split, the rest the training split. */
typedef enum {
    TG_TEXT_UTF8 = 0,  /* characters are code points; invalid UTF-8 is an error */
    TG_TEXT_BYTES = 1, /* characters are bytes */
} tg_text_unit;

typedef enum {
    TG_TEXT_TRAIN = 0,
    TG_TEXT_VAL = 1,
} tg_text_split;

typedef struct {
    tg_text_unit unit;   /* default TG_TEXT_UTF8 */
    double val_fraction; /* in [0, 1); default 0.1 */
} tg_text_options;

typedef struct tg_text tg_text;

TG_API tg_text_options tg_text_defaults(void);
/* Reads a file (options may be NULL: defaults). NULL on failure: a missing or empty file, a
 * directory, invalid UTF-8 (the message gives the byte offset), a bad option. A FIFO or pipe
 * is read until its writer closes it; one that no writer holds open reads as empty. */
TG_API tg_text *tg_text_load(const char *path, const tg_text_options *options);
/* The same from memory (size bytes; need not be NUL-terminated). */
TG_API tg_text *tg_text_from_memory(const char *data, size_t size, const tg_text_options *options);
TG_API void tg_text_free(tg_text *text);

/* The queries below set the error for a NULL text or a split that does not exist, and give
 * -1 (NULL for tg_text_ids). */
TG_API int64_t tg_text_vocab_size(const tg_text *text);
/* Characters in a split (or -1 for a bad argument). */
TG_API int64_t tg_text_length(const tg_text *text, tg_text_split split);
/* A split's ids (tg_text_length of them); NULL for a bad argument. The splits are two
 * ranges of one array: the validation ids follow the training ids in memory. */
TG_API const int32_t *tg_text_ids(const tg_text *text, tg_text_split split);
/* The character (code point or byte) with this id, or -1 (error set) when id is out of range. */
TG_API int64_t tg_text_char(const tg_text *text, int32_t id);
/* The id of a character, or -1 (error set) when the file does not contain it. */
TG_API int32_t tg_text_id(const tg_text *text, int64_t character);

/* Text → ids. Writes at most `capacity` ids (`size` always suffices) and their count to
 * *n_ids. Fails, writing nothing, on a character outside the vocabulary (naming it and its
 * offset), in UTF-8 mode on invalid UTF-8, or when the ids would not fit. */
TG_API tg_status tg_text_encode(const tg_text *text, const char *str, size_t size, int32_t *ids, int64_t capacity,
                                int64_t *n_ids);
/* Ids → text, NUL-terminated. *n_bytes receives the length without the NUL. out may be
 * NULL to ask for the length only; otherwise capacity must exceed it (4·n_ids + 1 always
 * suffices). Fails on an id outside the vocabulary. */
TG_API tg_status tg_text_decode(const tg_text *text, const int32_t *ids, int64_t n_ids, char *out, size_t capacity,
                                size_t *n_bytes);

/* `batch` windows of the split at uniformly drawn starts: inputs are seq_len consecutive
 * ids, targets the same window shifted one ahead (each input's next character). The
 * split must hold at least seq_len + 1 characters. */
TG_API tg_status tg_text_batch(const tg_text *text, tg_text_split split, tg_rng *rng, int64_t batch, int64_t seq_len,
                               int32_t *inputs, int32_t *targets);

/* Sequential windows for evaluation: window w has inputs ids[w·seq_len …] and their next
 * characters as targets. The windows do not overlap and together score every character
 * of the split but the first exactly once, so the mean cross-entropy over their scored
 * positions is the split's loss per character (each window starts without context). The
 * last window may be short: its missing inputs are 0 and their targets TG_IGNORE_INDEX. */
TG_API int64_t tg_text_window_count(const tg_text *text, tg_text_split split, int64_t seq_len);
/* Fills rows with windows first, first + 1, …; rows past the last window are padding
 * (inputs 0, targets TG_IGNORE_INDEX). *n_rows (may be NULL) receives the real rows. */
TG_API tg_status tg_text_windows(const tg_text *text, tg_text_split split, int64_t first, int64_t batch,
                                 int64_t seq_len, int32_t *inputs, int32_t *targets, int64_t *n_rows);

#ifdef __cplusplus
}
#endif
#endif
