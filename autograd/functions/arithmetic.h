// Arithmetic with NumPy broadcasting; gradients are summed back to each input's shape.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable neg(const Variable& x);
Variable add(const Variable& x, double c);   // x + c
Variable mul(const Variable& x, double c);   // x * c
Variable rsub(double c, const Variable& x);  // c - x
Variable rdiv(double c, const Variable& x);  // c / x
Variable pow(const Variable& x, double exponent);

}  // namespace functions

inline Variable operator+(const Variable& a, const Variable& b) { return functions::add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return functions::sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return functions::mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return functions::div(a, b); }
inline Variable operator-(const Variable& x) { return functions::neg(x); }
inline Variable operator+(const Variable& x, double c) { return functions::add(x, c); }
inline Variable operator+(double c, const Variable& x) { return functions::add(x, c); }
inline Variable operator-(const Variable& x, double c) { return functions::add(x, -c); }
inline Variable operator-(double c, const Variable& x) { return functions::rsub(c, x); }
inline Variable operator*(const Variable& x, double c) { return functions::mul(x, c); }
inline Variable operator*(double c, const Variable& x) { return functions::mul(x, c); }
inline Variable operator/(const Variable& x, double c) { return functions::mul(x, 1.0 / c); }
inline Variable operator/(double c, const Variable& x) { return functions::rdiv(c, x); }

}  // namespace tandem
