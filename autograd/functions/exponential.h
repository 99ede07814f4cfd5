// Exponentials, logarithms and powers.
#pragma once

#include "autograd/variable.h"

namespace tandem {
namespace functions {

Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable sqrt(const Variable& x);
Variable square(const Variable& x);

}  // namespace functions
}  // namespace tandem
