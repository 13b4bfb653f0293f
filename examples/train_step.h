/* examples/train_step.h: the training programs' step, kept on the device (train_step.c).
 *
 *   train_stepper *t = train_stepper_create(s, use_graph);
 *   train_stepper_step(t, step);            // the batch in s->inputs, s->targets; queued
 *   if (train_stepper_full(t)) train_stepper_flush(t, numbers);   // waits, then each step's loss
 *
 * On CUDA with use_graph, the second step is captured as a CUDA graph and every later step
 * replays it (tapegrad/graph.h); a step never waits for the device. */
#ifndef TAPEGRAD_EXAMPLES_TRAIN_STEP_H
#define TAPEGRAD_EXAMPLES_TRAIN_STEP_H

#include "train_common.h"

typedef struct train_stepper train_stepper;

/* What a flushed step measured. */
typedef struct {
    int64_t step;    /* its number (1-based, as the CSV counts) */
    double loss;     /* the mean cross-entropy over the scored targets */
    double accuracy; /* of the arg-max over the scored targets; NaN when none was scored */
} train_step_numbers;

train_stepper *train_stepper_create(train_session *s, bool use_graph);
void train_stepper_free(train_stepper *t);
/* Queues the step numbered `step` on the batch in s->inputs and s->targets. */
tg_status train_stepper_step(train_stepper *t, int64_t step);
int train_stepper_pending(const train_stepper *t);
/* Whether the ring of steps waiting for their numbers is full (flush before the next step). */
bool train_stepper_full(const train_stepper *t);
/* Whether the steps are replayed from a CUDA graph. */
bool train_stepper_uses_graph(const train_stepper *t);
/* Waits for the queued steps and writes the numbers of the pending ones, oldest first,
 * into numbers (room for train_stepper_pending of them). Fails when a captured step found
 * a bad input (tg_device_check_errors). */
tg_status train_stepper_flush(train_stepper *t, train_step_numbers *numbers);

#endif
