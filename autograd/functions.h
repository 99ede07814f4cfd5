// All differentiable functions. Users write `namespace F = tandem::F;` and then F::relu(x),
// F::linear(x, W, b), F::softmax_cross_entropy(y, t), as in Chainer.
#pragma once

#include "autograd/engine.h"
#include "autograd/function_node.h"
#include "autograd/functions/activation.h"
#include "autograd/functions/arithmetic.h"
#include "autograd/functions/attention.h"
#include "autograd/functions/array.h"
#include "autograd/functions/convolution.h"
#include "autograd/functions/deconvolution.h"
#include "autograd/functions/embed_id.h"
#include "autograd/functions/evaluation.h"
#include "autograd/functions/exponential.h"
#include "autograd/functions/linalg.h"
#include "autograd/functions/loss.h"
#include "autograd/functions/n_step_lstm.h"
#include "autograd/functions/noise.h"
#include "autograd/functions/normalization.h"
#include "autograd/functions/pooling.h"
#include "autograd/functions/reduction.h"
#include "autograd/functions/rows.h"
#include "autograd/functions/softmax.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/variable.h"

namespace tandem {
namespace F = functions;
}  // namespace tandem
