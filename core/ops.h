// Everything in core: the tensor and all its operations.
#pragma once

#include "core/ops/conv.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/normalization.h"
#include "core/ops/optimizer_update.h"
#include "core/ops/recurrent.h"
#include "core/ops/reduce.h"
#include "core/ops/shape_ops.h"
#include "core/ops/softmax.h"
#include "core/random.h"
#include "core/tensor.h"
