/* examples/train_common.h: what the training programs (examples/train_*.c) share.
 *
 *   - command-line flags: a table per program on top of the common ones (--steps,
 *     --batch, --lr, --device, --ckpt, --resume, ...), --help, and messages that name
 *     the flag and the form it expects (exit code 2);
 *   - a session: the Mamba model on its device, AdamW with warm-up + cosine and
 *     clipping at 1.0, the tape, the data generator, the CSV log, the progress line
 *     and checkpoints (saved every --ckpt-every steps and at the end; --resume restores
 *     the step, the parameters, the optimizer and the data generator, so a resumed run
 *     continues bit for bit as if it had never stopped);
 *   - the step itself (train_step.c): on the device from start to end, replayed as one
 *     CUDA graph on a GPU (--graph), its loss and accuracy read back every few steps;
 *   - evaluation helpers: loss and accuracy in no-grad mode, and a stream that runs the
 *     model over a long sequence piece by piece, carrying its recurrent state.
 *
 * A program's main reads like this (examples/train_selective_copy.c is the whole of it):
 *
 *   int code = train_parse(&program, argc, argv);      // flags, --help, --resume's config
 *   if (code != TRAIN_GO) return code;
 *   train_session *s = train_open(&program, vocab_size);
 *   while (train_running(s)) {
 *       make_batch(&s->data_rng, s->inputs, s->targets);       // the program's data
 *       if (train_step(s) != TG_OK) return train_fail(s);       // forward, backward, AdamW
 *       if (train_eval_due(s)) ... train_record_eval(s, values); // optional
 *       if (train_end_step(s) != TG_OK) return train_fail(s);   // CSV, progress, checkpoint
 *   }
 *   return train_close(s);
 */
#ifndef TAPEGRAD_EXAMPLES_TRAIN_COMMON_H
#define TAPEGRAD_EXAMPLES_TRAIN_COMMON_H

#include <tapegrad.h>

#include <stdio.h>

/* ---- flags --------------------------------------------------------------------------- */

typedef enum {
    TRAIN_INT,    /* int64_t, a whole number in [min, max] */
    TRAIN_REAL,   /* double, a finite number in [min, max] */
    TRAIN_TEXT,   /* const char *, any text (a path) */
    TRAIN_DEVICE, /* tg_device: cpu, cuda or auto */
    TRAIN_CHOICE, /* int64_t: the index of one of the words in `arg` ("f32|bf16") */
} train_flag_kind;

/* What --resume does with a flag. The checkpoint's config holds every flag that is not
 * TRAIN_RUN_ONLY, as the text one would type. */
typedef enum {
    TRAIN_RUN_ONLY = 0, /* this run only (--device, --csv, ...): not saved */
    TRAIN_RESTORED,     /* the checkpoint's value, unless given on the command line */
    TRAIN_FIXED,        /* the checkpoint's value; giving another one is an error (model shape, task) */
} train_flag_resume;

typedef struct {
    const char *name; /* without the dashes: "seq-len" */
    train_flag_kind kind;
    void *value;     /* int64_t *, double *, const char ** or tg_device *, holding the default */
    const char *arg; /* the value's placeholder in --help: "N", "PATH" */
    const char *help;
    double min, max; /* the accepted range of a number */
    train_flag_resume resume;
    const char *default_text; /* shown in --help instead of the value (e.g. "5% of --steps") */
    bool given;               /* set by train_parse: the command line had this flag */
} train_flag;

/* The flags every training program has. */
typedef struct {
    /* the run's model and training (saved in checkpoints) */
    int64_t steps, batch, seq_len, layers, d_model, d_state, warmup, seed;
    int64_t precision; /* 0: f32, 1: bf16 (parameters stored in bf16, the optimizer's f32 master copy) */
    int64_t schedule;  /* after the warm-up: 0, a cosine to 10% of lr at --steps; 1, lr throughout */
    double lr, weight_decay;
    /* this run only */
    tg_device device;
    int64_t graph; /* 1: on CUDA, each step replays one CUDA graph (tapegrad/graph.h); 0: off */
    int64_t tf32;  /* 1: f32 matrix products on CUDA may use TF32 (tg_matmul_set_tf32); 0: off */
    const char *ckpt, *resume, *csv;
    int64_t ckpt_every, eval_every, stop_at, log_every;
} train_options;

/* Defaults for a small model: each program changes what suits its task before parsing. */
train_options train_defaults(void);

typedef struct {
    const char *name;    /* "train_selective_copy": messages start with it */
    const char *summary; /* a paragraph for --help */
    const char *example; /* an example command for --help */
    train_options *options;
    train_flag *flags; /* the program's own flags (may be NULL) */
    int n_flags;
    const char *const *eval_columns; /* the CSV's evaluation columns, NULL-terminated (may be NULL) */
} train_program;

/* train_parse's result when the program should go on; otherwise it returns the exit code. */
#define TRAIN_GO (-1)

/* Parses argv into program->options and the program's flags (--name VALUE or
 * --name=VALUE). --help prints the usage and returns 0; a bad flag or value prints a
 * message naming the flag and the expected form and returns 2. With --resume PATH, the
 * checkpoint's config supplies every saved flag the command line did not give (and a
 * fixed flag given with another value is an error). Otherwise returns TRAIN_GO. */
int train_parse(train_program *program, int argc, char **argv);
/* The same config step on its own, for a program that reads a checkpoint given by
 * another flag (train_char --sample with --ckpt). Returns TRAIN_GO or 2. */
int train_apply_checkpoint_config(train_program *program, const char *path);

/* Prints "<program>: <message>" and a pointer to --help on stderr; returns 2, the exit
 * code of a bad command line (for checks across flags, after train_parse). */
int train_usage_error(const train_program *program, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- the training session --------------------------------------------------------------- */

typedef struct train_session {
    const train_program *program;
    const train_options *options;
    tg_device device;  /* resolved: cpu or cuda */
    tg_params *params; /* on device */
    tg_mamba *model;
    tg_optim *optim;
    tg_tape *tape;
    tg_rng data_rng; /* draws the training batches; saved in checkpoints */
    int64_t step;    /* steps done (the checkpoint's step after --resume) */
    int32_t *inputs; /* (batch, seq_len) buffers for the program to fill */
    int32_t *targets;
    tg_dist *dist;             /* under mpirun, the ranks; each steps on its rows of the batch */
    struct train_state *state; /* the rest: metrics, CSV, progress (train_common.c) */
} train_session;

/* Builds the Mamba LM (vocab_size, --layers, --d-model) on --device, the optimizer
 * (AdamW, --lr with --warmup and then a cosine to 10% at --steps or a constant rate,
 * --weight-decay, clipping at 1.0), the tape and the data generator (seeded from --seed);
 * loads --resume; opens --csv (appending when resuming into an existing file); prints what
 * it built. NULL (with a message on stderr) on failure. */
train_session *train_open(const train_program *program, int64_t vocab_size);

/* Whether another step is to run: false at --steps, or at --stop-at (a run stopped there
 * saves its checkpoint and can be resumed). */
bool train_running(const train_session *s);

/* One training step on s->inputs and s->targets: forward, cross-entropy over the scored
 * targets (not TG_IGNORE_INDEX), backward, AdamW. The step is queued on the device; its
 * loss and accuracy (arg-max over the scored positions) are read back by train_end_step
 * when it next writes rows (a step that waited for its numbers would wait for the GPU). */
tg_status train_step(train_session *s);

/* Whether this step is an evaluation step (every --eval-every steps, and the last one). */
bool train_eval_due(const train_session *s);
/* Values for the evaluation columns of this step's CSV row, in program->eval_columns
 * order (NAN leaves a field empty), also shown on stderr. */
void train_record_eval(train_session *s, const double *values);

/* Ends the step: writes the CSV rows and the progress line of the steps run since the last
 * rows were written, when due (a full ring of steps, the end of a progress window, an
 * evaluation, a checkpoint, the last step, or a terminal's redraw), and saves the
 * checkpoint (every --ckpt-every steps and at the end of the run). Fails when a step
 * changed nothing (a gradient norm that was not finite, or a bad input). */
tg_status train_end_step(train_session *s);

/* Ends the run (final checkpoint, progress line, CSV closed), frees the session, and
 * returns the exit code: 0. */
int train_close(train_session *s);
/* Prints the library's last error and frees the session; returns the exit code: 1. */
int train_fail(train_session *s);
/* Frees the session (no messages, no checkpoint). */
void train_free(train_session *s);

/* Writes a line on stderr without tearing the progress line. printf-style. */
void train_note(const train_session *s, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- evaluation ----------------------------------------------------------------------------- */

/* Sums over the scored positions of the evaluated rows. */
typedef struct {
    double loss_sum; /* of the cross-entropy, in nats */
    int64_t scored;  /* positions whose target is not TG_IGNORE_INDEX */
    int64_t correct; /* of those, where the arg-max logit is the target */
} train_eval_sums;

/* Adds one batch (rows × len ids and targets on the host) to sums, in no-grad mode. */
tg_status train_eval_batch(train_session *s, const int32_t *inputs, const int32_t *targets, int64_t rows, int64_t len,
                           train_eval_sums *sums);

/* Draws n sequences of length len of a synthetic task into inputs and targets. */
typedef tg_status (*train_task_batch_fn)(const void *task, tg_rng *rng, int64_t n, int64_t len, int32_t *inputs,
                                         int32_t *targets);
/* Held-out loss and accuracy (values[0], values[1]) on `rows` sequences of --seq-len drawn
 * by make_batch, in batches of --batch. Their generator is seeded from --seed the same way
 * at every call, so every evaluation of a run scores the same sequences. */
tg_status train_evaluate_task(train_session *s, train_task_batch_fn make_batch, const void *task, int64_t rows,
                              double *values);

/* Runs the model over `rows` sequences given piece by piece, carrying the recurrent
 * state from one piece to the next, in no-grad mode: memory depends on the piece, not on
 * the whole length. Used to score the last position of very long sequences, and to
 * generate text one character at a time. */
typedef struct train_stream train_stream;
train_stream *train_stream_create(train_session *s, int64_t rows);
/* Feeds ids (rows × len, row-major) after what was fed before; last_logits (rows ×
 * vocab, may be NULL) receives the logits at the last position fed. */
tg_status train_stream_feed(train_stream *stream, const int32_t *ids, int64_t len, float *last_logits);
void train_stream_free(train_stream *stream);

/* Index of the largest of n values (the first on ties). */
int64_t train_argmax(const float *values, int64_t n);
/* Seconds on a monotonic clock. */
double train_seconds(void);

#endif
