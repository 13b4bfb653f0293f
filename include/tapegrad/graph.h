/* tapegrad/graph.h: a whole training step captured once as a CUDA graph and replayed.
 *
 * A step of a small model launches a few hundred kernels, each of which costs the host
 * a few microseconds; replaying the step as one CUDA graph costs one launch. Between
 * tg_graph_begin and tg_graph_end the library records the device work that the host code
 * queues (forward, backward, clipping, the optimizer) instead of running it; tg_graph_replay
 * then runs it, as often as wanted, with no host code in between:
 *
 *   tg_tensor *ids = tg_tensor_new(TG_I32, TG_DEVICE_CUDA, 2, shape);   // inputs outside the tape
 *   tg_graph *graph = NULL;
 *   for (int step = 0; step < n_steps; step++) {
 *       tg_copy_from_host(ids, next_batch(), TG_I32);                   // before the replay
 *       if (!graph && step >= 1) {                                      // after a warm-up step
 *           tg_graph_begin(TG_DEVICE_CUDA);
 *           run_step(tape);                                             // recorded, not run
 *           graph = tg_graph_end();
 *           tg_tape_reset(tape);
 *           if (!graph) fail(tg_last_error());
 *       }
 *       if (graph) tg_graph_replay(graph); else { run_step(tape); tg_tape_reset(tape); }
 *   }
 *   tg_graph_free(graph);
 *
 * What a captured step may do: launch kernels and device-to-device copies, and allocate
 * from the library's allocator (the graph keeps every block it touched, so its replays
 * find the same addresses and nothing else takes them). What it may not do: wait for the
 * device (a copy to the host, tg_item, tg_synchronize) or copy from the host — such a
 * call fails, and with it the capture, which tg_graph_end reports. Inputs therefore live
 * in tensors made outside the tape, filled before each replay; results that outlive the
 * step are copied into such tensors inside it. Every tensor the step reads or writes
 * outside the tape (parameters, optimizer state, inputs) must outlive the graph.
 *
 * A replay repeats the captured work exactly: the same kernels on the same addresses, so
 * the same shapes. A step of another shape needs a graph of its own. Values that change
 * from step to step without new host code live on the device: the optimizer's step count,
 * learning rate and clipping decision (tapegrad/optim.h), so a replayed step gives the
 * same parameters, bit for bit, as the same step run directly.
 *
 * Checks that would wait for the device run on it during a capture: an embedding id or a
 * cross-entropy target out of range is recorded on the device, the optimizer step that
 * follows changes nothing, and tg_device_check_errors reports it.
 *
 * Only the CUDA device has graphs; a CPU step has no launches to save.
 */
#ifndef TAPEGRAD_GRAPH_H
#define TAPEGRAD_GRAPH_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_graph tg_graph;

/* Starts recording the calling thread's device work. Fails on a device other than CUDA,
 * in a build without CUDA, and while a capture runs on the calling thread (a capture on
 * another thread is not seen: the allocator keeps one capture's record, so capture from
 * one thread at a time). */
TG_API tg_status tg_graph_begin(tg_device device);
/* Ends the recording and makes the graph; NULL with a message when the capture failed
 * (the message names the call that broke it where the library saw it). */
TG_API tg_graph *tg_graph_end(void);
/* Queues one run of the graph (it does not wait for it). */
TG_API tg_status tg_graph_replay(tg_graph *graph);
/* The graph's nodes: kernel launches, copies and memsets (0, error set, for NULL). */
TG_API size_t tg_graph_node_count(const tg_graph *graph);
/* Frees the graph; the device memory it kept goes back to the allocator. NULL is fine. */
TG_API void tg_graph_free(tg_graph *graph);
/* Whether a capture is running on the calling thread. */
TG_API bool tg_graph_capturing(void);

/* Waits for the device and reports the first bad input a captured step's kernels found
 * since the last call (TG_ERR_INVALID, the message naming the op, the position and the
 * value), clearing it; TG_OK when there was none. On the CPU, and without CUDA, TG_OK. */
TG_API tg_status tg_device_check_errors(tg_device device);

#ifdef __cplusplus
}
#endif
#endif
