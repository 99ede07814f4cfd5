// The differentiable communication functions (namespace tandem::functions, like the others).
#pragma once

#include "comm/functions/collectives.h"
#include "comm/functions/multi_node_batch_normalization.h"
#include "comm/tensor_parallel/parallel_dropout.h"
#include "comm/tensor_parallel/parallel_region.h"
#include "comm/functions/point_to_point.h"
#include "comm/functions/pseudo_connect.h"
#include "comm/tensor_parallel/vocab_parallel_cross_entropy.h"
