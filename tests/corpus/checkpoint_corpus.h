/* tests/corpus/checkpoint_corpus.h: the model and values of the committed checkpoint corpus
 * (tests/data/checkpoints), shared by the program that wrote it and the test that reads it.
 * The model is the fuzz target's (tests/fuzz/fuzz_model.h); its values follow a formula, so
 * the test knows what the good file must load without a second copy of it. */
#ifndef TAPEGRAD_TESTS_CHECKPOINT_CORPUS_H
#define TAPEGRAD_TESTS_CHECKPOINT_CORPUS_H

#include "fuzz/fuzz_model.h"

#define CORPUS_STEP 12
#define CORPUS_CONFIG "{\"corpus\": 1}"
#define CORPUS_DIR TG_TEST_DATA_DIR "/checkpoints"

/* Element j of parameter i in the good file: exact in f32. */
static inline float corpus_value(size_t i, int64_t j) { return (float)(i + 1) * 0.25f - (float)j * 0.125f; }

/* The gradient element j of parameter i gets before the optimizer's one step. */
static inline float corpus_grad(size_t i, int64_t j) { return 0.5f - (float)((i * 7 + (size_t)j) % 5) * 0.25f; }

#endif
