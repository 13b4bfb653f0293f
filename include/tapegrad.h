/* tapegrad.h: the whole public API. */
#ifndef TAPEGRAD_H
#define TAPEGRAD_H

#include "tapegrad/tensor.h"
#include "tapegrad/autograd.h"
#include "tapegrad/ops.h"
#include "tapegrad/params.h"
#include "tapegrad/rng.h"
#include "tapegrad/gradcheck.h"
#include "tapegrad/data.h"
#include "tapegrad/nn.h"
#include "tapegrad/optim.h"
#include "tapegrad/checkpoint.h"
#include "tapegrad/graph.h"
#include "tapegrad/dist.h"

#endif
