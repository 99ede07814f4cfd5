#include "layers/links/linear.h"

#include "autograd/functions/array.h"
#include "autograd/functions/linalg.h"

namespace tandem {

Linear::Linear(std::int64_t in_size, std::int64_t out_size, LinearOptions options)
    : in_size_(in_size), out_size_(out_size), options_(std::move(options)) {
  TANDEM_CHECK(out_size > 0 && (in_size > 0 || in_size == -1), "Linear: sizes must be positive (in_size -1 = "
               "inferred), got in_size ", in_size, ", out_size ", out_size);
  if (!options_.initialW) options_.initialW = initializers::lecun_normal();
  if (!options_.initial_bias) options_.initial_bias = initializers::zero();
  add_uninitialized_param("W");
  if (in_size > 0) initialize_W(in_size);
  if (!options_.nobias) add_param("b", options_.initial_bias({out_size}, options_.dtype));
}

void Linear::initialize_W(std::int64_t in_size) {
  in_size_ = in_size;
  initialize_param("W", options_.initialW({out_size_, in_size}, options_.dtype));
}

void Linear::check_loaded_shape(const std::string& name, const Shape& shape) {
  if (name != "W") return;
  TANDEM_CHECK(shape.size() == 2 && shape[0] == out_size_ && shape[1] > 0, "Linear: W must be [out_size, in_size] = [",
               out_size_, ", in_size], got ", shape);
  in_size_ = shape[1];
}

Variable Linear::forward(const Variable& x) {
  if (!param_initialized("W")) {
    TANDEM_CHECK(x.dim() >= 2, "Linear: input must be [N, features...], got ", x.description());
    initialize_W(shape_numel(Shape(x.shape().begin() + 1, x.shape().end())));
  }
  return functions::linear(x, param("W"), options_.nobias ? Variable() : param("b"), options_.activation);
}

Variable forward_last_axis(Link& link, const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() >= 1, link.type_name(), ": input must have a feature axis, got ",
               x.defined() ? x.description() : std::string("undefined"));
  if (x.dim() == 2) return link.forward(x);
  const Shape& shape = x.shape();
  Variable y = link.forward(functions::reshape(x, {-1, shape.back()}));
  Shape out(shape.begin(), shape.end() - 1);
  out.push_back(y.shape()[1]);
  return functions::reshape(y, out);
}

}  // namespace tandem
