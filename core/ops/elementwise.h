// Element-wise operations with NumPy broadcasting. Operands must share dtype and device:
// tandem never promotes silently (convert with Tensor::to(dtype)). Scalars take the tensor's
// dtype. Comparisons return bool tensors.
#pragma once

#include "core/tensor.h"

namespace tandem {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // integer division truncates; by zero is an error
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// ReLU's backward from its output y: gy where y > 0, else 0 (the gradient at 0 is 0, as in Chainer).
Tensor relu_grad(const Tensor& gy, const Tensor& y);
// GELU's backward (the tanh form) from its input x: gy * gelu'(x), one pass. Floating only.
Tensor gelu_grad(const Tensor& gy, const Tensor& x);

Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor rsub(double a, const Tensor& b);  // a - b
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor rdiv(double a, const Tensor& b);  // a / b
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);
Tensor scale_shift(const Tensor& x, double scale, double shift);  // scale * x + shift

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
// GELU in its tanh form (GPT-2's): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). Floating only.
Tensor gelu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double slope);
Tensor clip(const Tensor& x, double low, double high);

Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
Tensor equal(const Tensor& a, double b);
Tensor not_equal(const Tensor& a, double b);
Tensor less(const Tensor& a, double b);
Tensor less_equal(const Tensor& a, double b);
Tensor greater(const Tensor& a, double b);
Tensor greater_equal(const Tensor& a, double b);

// cond ? a : b, element-wise; cond is bool; all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// In place: x = max(x, 0). For an output nothing else can see yet (functions::relu of a
// temporary, autograd/functions/activation.h), which then needs no second buffer.
void relu_(Tensor& x);
// In place: dst += src (src broadcast to dst's shape). Used to accumulate gradients.
void add_(Tensor& dst, const Tensor& src);
// dst = src / divisor, written into dst's memory (e.g. a view of a larger buffer): one pass, where
// dst.copy_(div(src, divisor)) makes two. src has dst's shape, dtype and device; floating only.
void div_into_(Tensor& dst, const Tensor& src, double divisor);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return rsub(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return rdiv(a, b); }

}  // namespace tandem
