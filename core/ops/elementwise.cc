#include "core/ops/elementwise.h"

#include <cmath>

#include "core/backend.h"
#include "core/ops/checks.h"
#include "core/ops/half_compute.h"

namespace tandem {

using ops_detail::check_compatible;
using ops_detail::check_floating;
using ops_detail::check_numeric;

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::relu_grad: return "relu_grad";
    case BinaryOp::gelu_grad: return "gelu_grad";
    case BinaryOp::eq: return "equal";
    case BinaryOp::ne: return "not_equal";
    case BinaryOp::lt: return "less";
    case BinaryOp::le: return "less_equal";
    case BinaryOp::gt: return "greater";
    case BinaryOp::ge: return "greater_equal";
  }
  return "binary";
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_name(op);
  check_compatible({&a, &b}, name);
  if (is_half(a.dtype())) {
    const Tensor y = binary(op, a.to(DType::f32), b.to(DType::f32));
    return is_comparison(op) ? y : y.to(a.dtype());
  }
  TANDEM_CHECK(is_comparison(op) || a.dtype() != DType::boolean || op == BinaryOp::mul ||
                   op == BinaryOp::maximum || op == BinaryOp::minimum,
               name, ": not defined for bool tensors (", a.description(), ", ", b.description(), ")");
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out(shape, is_comparison(op) ? DType::boolean : a.dtype(), a.device());
  backend_for(a.device(), name).binary(op, a, b, out);
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double b) {
  ops_detail::check_defined(a, binary_name(op));
  if (is_half(a.dtype())) {  // the scalar stays f32, as the computation
    const Tensor y = binary(op, a.to(DType::f32), scalar_tensor(b, DType::f32, a.device()));
    return is_comparison(op) ? y : y.to(a.dtype());
  }
  return binary(op, a, scalar_tensor(b, a.dtype(), a.device()));
}

Tensor unary(UnaryOp op, const Tensor& x, const char* name, bool floating_only, double p0 = 0, double p1 = 0) {
  if (x.defined() && is_half(x.dtype())) return unary(op, x.to(DType::f32), name, floating_only, p0, p1).to(x.dtype());
  if (floating_only) check_floating(x, name);
  else check_numeric(x, name);
  Tensor out(x.shape(), x.dtype(), x.device());
  backend_for(x.device(), name).unary(op, x, out, p0, p1);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::pow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::minimum, a, b); }
Tensor relu_grad(const Tensor& gy, const Tensor& y) { return binary(BinaryOp::relu_grad, gy, y); }
Tensor gelu_grad(const Tensor& gy, const Tensor& x) {
  if (gy.defined() && is_half(gy.dtype()))
    return ops_detail::narrow(gelu_grad(ops_detail::widen(gy), ops_detail::widen(x)), gy.dtype());
  check_floating(gy, "gelu_grad");
  return binary(BinaryOp::gelu_grad, gy, x);
}

// Scalar arithmetic on floats is one fused scale-and-shift pass; integers keep exact
// semantics through the binary kernels.
Tensor add(const Tensor& a, double b) {
  if (is_floating(a.dtype())) return unary(UnaryOp::scale_shift, a, "add", false, 1, b);
  return binary_scalar(BinaryOp::add, a, b);
}
Tensor sub(const Tensor& a, double b) {
  if (is_floating(a.dtype())) return unary(UnaryOp::scale_shift, a, "sub", false, 1, -b);
  return binary_scalar(BinaryOp::sub, a, b);
}
Tensor rsub(double a, const Tensor& b) { return unary(UnaryOp::rsub_scalar, b, "rsub", false, a); }
Tensor mul(const Tensor& a, double b) {
  if (is_floating(a.dtype())) return unary(UnaryOp::scale_shift, a, "mul", false, b, 0);
  return binary_scalar(BinaryOp::mul, a, b);
}
Tensor div(const Tensor& a, double b) { return binary_scalar(BinaryOp::div, a, b); }
Tensor rdiv(double a, const Tensor& b) { return unary(UnaryOp::rdiv_scalar, b, "rdiv", false, a); }
Tensor pow(const Tensor& a, double exponent) { return unary(UnaryOp::pow_scalar, a, "pow", false, exponent); }
Tensor maximum(const Tensor& a, double b) { return binary_scalar(BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, double b) { return binary_scalar(BinaryOp::minimum, a, b); }
Tensor scale_shift(const Tensor& x, double scale, double shift) {
  return unary(UnaryOp::scale_shift, x, "scale_shift", false, scale, shift);
}

Tensor neg(const Tensor& x) { return unary(UnaryOp::neg, x, "neg", false); }
Tensor abs(const Tensor& x) { return unary(UnaryOp::abs, x, "abs", false); }
Tensor square(const Tensor& x) { return unary(UnaryOp::square, x, "square", false); }
Tensor sign(const Tensor& x) { return unary(UnaryOp::sign, x, "sign", false); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::exp, x, "exp", true); }
Tensor log(const Tensor& x) { return unary(UnaryOp::log, x, "log", true); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::tanh, x, "tanh", true); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::sigmoid, x, "sigmoid", true); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::sqrt, x, "sqrt", true); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::relu, x, "relu", false); }
void relu_(Tensor& x) {
  if (x.defined() && is_half(x.dtype())) return ops_detail::narrow_into(x, relu(ops_detail::widen(x)));
  check_numeric(x, "relu_");
  backend_for(x.device(), "relu_").unary(UnaryOp::relu, x, x, 0, 0);  // element i reads only element i
}
Tensor gelu(const Tensor& x) { return unary(UnaryOp::gelu, x, "gelu", true); }
Tensor leaky_relu(const Tensor& x, double slope) { return unary(UnaryOp::leaky_relu, x, "leaky_relu", false, slope); }
Tensor clip(const Tensor& x, double low, double high) {
  TANDEM_CHECK(low <= high, "clip: low ", low, " > high ", high);
  return unary(UnaryOp::clip, x, "clip", false, low, high);
}

Tensor equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::eq, a, b); }
Tensor not_equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::ne, a, b); }
Tensor less(const Tensor& a, const Tensor& b) { return binary(BinaryOp::lt, a, b); }
Tensor less_equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::le, a, b); }
Tensor greater(const Tensor& a, const Tensor& b) { return binary(BinaryOp::gt, a, b); }
Tensor greater_equal(const Tensor& a, const Tensor& b) { return binary(BinaryOp::ge, a, b); }
Tensor equal(const Tensor& a, double b) { return binary_scalar(BinaryOp::eq, a, b); }
Tensor not_equal(const Tensor& a, double b) { return binary_scalar(BinaryOp::ne, a, b); }
Tensor less(const Tensor& a, double b) { return binary_scalar(BinaryOp::lt, a, b); }
Tensor less_equal(const Tensor& a, double b) { return binary_scalar(BinaryOp::le, a, b); }
Tensor greater(const Tensor& a, double b) { return binary_scalar(BinaryOp::gt, a, b); }
Tensor greater_equal(const Tensor& a, double b) { return binary_scalar(BinaryOp::ge, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_compatible({&a, &b}, "where");
  ops_detail::check_defined(cond, "where");
  TANDEM_CHECK(cond.dtype() == DType::boolean, "where: the condition must be bool, got ", cond.description());
  TANDEM_CHECK(cond.device() == a.device(), "where: condition on ", cond.device(), " but values on ", a.device());
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out(shape, a.dtype(), a.device());
  backend_for(a.device(), "where").where(cond, a, b, out);
  return out;
}

void add_(Tensor& dst, const Tensor& src) {
  check_compatible({&dst, &src}, "add_");
  if (is_half(dst.dtype())) return ops_detail::narrow_into(dst, add(ops_detail::widen(dst), ops_detail::widen(src)));
  TANDEM_CHECK(broadcast_shapes(dst.shape(), src.shape(), "add_") == dst.shape(), "add_: cannot add ",
               src.description(), " into ", dst.description(), " in place");
  // The kernel reads each element of dst before writing it, so dst can be its own operand; a src
  // sharing dst's storage (b[1:] += b[:-1]) is copied first, or it would read updated values.
  backend_for(dst.device(), "add_").binary(BinaryOp::add, dst, src.shares_storage_with(dst) ? src.clone() : src, dst);
}

void div_into_(Tensor& dst, const Tensor& src, double divisor) {
  check_compatible({&dst, &src}, "div_into_");
  if (is_half(dst.dtype())) return ops_detail::narrow_into(dst, div(ops_detail::widen(src), divisor));
  check_floating(src, "div_into_");
  TANDEM_CHECK(src.shape() == dst.shape(), "div_into_: ", src.description(), " into ", dst.description(),
               ": the shapes differ");
  TANDEM_CHECK(!src.shares_storage_with(dst) || src.raw_data() == dst.raw_data(), "div_into_: ",
               src.description(), " overlaps ", dst.description());
  // Dividing by a power of two is multiplying by its inverse, exactly (both round x / d once),
  // and a multiplication is several times cheaper.
  int exponent = 0;
  const bool power_of_two = std::frexp(divisor, &exponent) == 0.5;
  backend_for(dst.device(), "div_into_")
      .binary(power_of_two ? BinaryOp::mul : BinaryOp::div, src,
              scalar_tensor(power_of_two ? 1.0 / divisor : divisor, src.dtype(), src.device()), dst);
}

}  // namespace tandem
