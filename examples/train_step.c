/* examples/train_step.c: how the training programs run a step (train_step.h).
 *
 * The batch goes into two tensors made once, outside the tape (ids and targets on the
 * device), so that the step itself only reads device memory. The step queues the forward,
 * the loss, the arg-max's hits, the backward and the AdamW update, and copies the loss and
 * the hits into a small tensor of its own. On CUDA the whole step is captured once as a
 * CUDA graph (after one step run directly, which sizes the allocator's blocks) and
 * replayed from then on: one launch per step instead of a few hundred. Nothing in a step
 * waits for the device; each step's loss and hits are copied into a ring of tensors,
 * which train_stepper_flush reads back when the program needs the numbers. Under a
 * launcher (tapegrad/dist.h: mpirun, or TG_WORLD_SIZE for GPUs) each rank runs the step on
 * its rows of the batch, and the ranks sum their gradients before the update (inside the
 * graph on GPUs) and their numbers when they are flushed. */
#include "train_step.h"

#include <math.h>
#include <stdlib.h>

#define RING 32 /* steps that can wait for their numbers */

struct train_stepper {
    train_session *s;
    bool use_graph;
    tg_tensor *ids, *targets; /* (batch, seq_len) i32 on the device */
    tg_tensor *metrics;       /* (3) f64: this step's loss, correct, scored */
    tg_tensor *ring[RING];    /* (3) f64 each: the metrics of steps not yet flushed */
    int64_t ring_step[RING];  /* the step number each slot holds */
    int pending;
    int64_t steps_run; /* steps this stepper ran (the first is never captured) */
    tg_graph *graph;
};

train_stepper *train_stepper_create(train_session *s, bool use_graph)
{
    train_stepper *t = calloc(1, sizeof *t);
    if (!t) {
        tg_set_error(TG_ERR_NOMEM, "train_stepper_create: out of memory");
        return NULL;
    }
    /* Under mpirun each rank steps on its rows of the batch (rank r: rows r·b … (r + 1)·b − 1). */
    const int64_t shape[2] = {s->options->batch / tg_dist_world_size(s->dist), s->options->seq_len}, three = 3;
    t->s = s;
    t->use_graph = use_graph && s->device == TG_DEVICE_CUDA;
    bool made = (t->ids = tg_tensor_new(TG_I32, s->device, 2, shape)) &&
                (t->targets = tg_tensor_new(TG_I32, s->device, 2, shape)) &&
                (t->metrics = tg_tensor_new(TG_F64, s->device, 1, &three));
    for (int i = 0; made && i < RING; i++) made = (t->ring[i] = tg_tensor_new(TG_F64, s->device, 1, &three)) != NULL;
    if (!made) {
        train_stepper_free(t);
        return NULL;
    }
    return t;
}

void train_stepper_free(train_stepper *t)
{
    if (!t) return;
    tg_graph_free(t->graph);
    tg_tensor_free(t->ids);
    tg_tensor_free(t->targets);
    tg_tensor_free(t->metrics);
    for (int i = 0; i < RING; i++) tg_tensor_free(t->ring[i]);
    free(t);
}

/* Queues one step on the tape's device: forward, loss, hits, backward, AdamW. */
static tg_status queue_step(train_stepper *t)
{
    train_session *s = t->s;
    tg_tape *tape = s->tape;
    tg_tensor *logits = tg_mamba_forward(tape, s->model, t->ids, NULL, NULL);
    tg_tensor *loss = logits ? tg_cross_entropy(tape, logits, t->targets, TG_IGNORE_INDEX) : NULL;
    tg_tensor *hits = loss ? tg_count_correct(tape, logits, t->targets, TG_IGNORE_INDEX) : NULL;
    tg_tensor *loss_slot = hits ? tg_slice(tape, t->metrics, 0, 0, 1, 1) : NULL;
    tg_tensor *hits_slot = loss_slot ? tg_slice(tape, t->metrics, 0, 1, 3, 1) : NULL;
    if (!hits_slot || tg_copy(loss_slot, loss) != TG_OK || tg_copy(hits_slot, hits) != TG_OK) return TG_ERR_INVALID;
    if (tg_backward(tape, loss) != TG_OK) return TG_ERR_INVALID;
    /* The ranks' gradients summed (in rank order), then their mean: N shards' step. */
    const int world = tg_dist_world_size(s->dist);
    if (tg_dist_allreduce_grads(s->dist, s->params) != TG_OK || tg_optim_step(s->optim, world) != TG_OK)
        return TG_ERR_INVALID;
    return tg_params_zero_grad(s->params);
}

/* Captures the step as a graph. The step queued during the capture has not run yet: the
 * replay that follows runs it. */
static tg_status capture(train_stepper *t)
{
    if (tg_graph_begin(t->s->device) != TG_OK) return TG_ERR_DEVICE;
    tg_status status = queue_step(t);
    tg_graph *graph = tg_graph_end(); /* ends the capture even after a failed step */
    tg_tape_reset(t->s->tape);
    if (status != TG_OK) {
        tg_graph_free(graph);
        return status;
    }
    if (!graph) return TG_ERR_DEVICE;
    t->graph = graph;
    return TG_OK;
}

tg_status train_stepper_step(train_stepper *t, int64_t step)
{
    train_session *s = t->s;
    if (t->pending == RING) return tg_set_error(TG_ERR_STATE, "train_stepper_step: flush the ring first");
    const int64_t first = tg_dist_rank(s->dist) * t->ids->shape[0] * t->ids->shape[1]; /* this rank's rows */
    tg_status status = tg_copy_from_host(t->ids, s->inputs + first, TG_I32);
    if (status == TG_OK) status = tg_copy_from_host(t->targets, s->targets + first, TG_I32);
    if (status == TG_OK && t->use_graph && !t->graph && t->steps_run >= 1) status = capture(t);
    if (status != TG_OK) return status;
    if (t->graph) {
        status = tg_graph_replay(t->graph);
    } else {
        status = queue_step(t);
        tg_tape_reset(s->tape);
    }
    if (status != TG_OK) return status;
    t->steps_run++;
    t->ring_step[t->pending] = step;
    return tg_copy(t->ring[t->pending++], t->metrics);
}

int train_stepper_pending(const train_stepper *t) { return t->pending; }

bool train_stepper_full(const train_stepper *t) { return t->pending == RING; }

bool train_stepper_uses_graph(const train_stepper *t) { return t->graph != NULL; }

/* The flushed steps' numbers over all ranks (each loss a mean over every scored target):
 * one sum of the ranks' (loss × scored, correct, scored) per step. */
static tg_status global_metrics(train_stepper *t, double (*m)[3], int n)
{
    if (tg_dist_world_size(t->s->dist) == 1) return TG_OK;
    for (int i = 0; i < n; i++) m[i][0] *= m[i][2];
    tg_status status = tg_dist_allreduce_sum(t->s->dist, &m[0][0], 3 * (int64_t)n);
    for (int i = 0; i < n; i++) m[i][0] = m[i][2] > 0 ? m[i][0] / m[i][2] : m[i][0];
    return status;
}

tg_status train_stepper_flush(train_stepper *t, train_step_numbers *numbers)
{
    /* waits for the queued steps (with the ranks' deadline under a launcher) */
    tg_status status = tg_dist_sync(t->s->dist);
    if (status == TG_OK) status = tg_device_check_errors(t->s->device);
    double m[RING][3];
    for (int i = 0; status == TG_OK && i < t->pending; i++) status = tg_copy_to_host(t->ring[i], m[i], TG_F64);
    if (status == TG_OK) status = global_metrics(t, m, t->pending);
    for (int i = 0; status == TG_OK && i < t->pending; i++)
        numbers[i] = (train_step_numbers){t->ring_step[i], m[i][0], m[i][2] > 0 ? m[i][1] / m[i][2] : NAN};
    t->pending = 0;
    return status;
}
