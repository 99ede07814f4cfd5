#include "autograd/functions/pooling.h"

#include "autograd/function_node.h"
#include "core/ops/conv.h"

namespace tandem {
namespace functions {

namespace {

Pool2DParams make_params(std::int64_t ksize_y, std::int64_t ksize_x, std::int64_t stride_y, std::int64_t stride_x,
                         std::int64_t pad_y, std::int64_t pad_x, bool cover_all) {
  Pool2DParams p;
  p.kernel_h = ksize_y;
  p.kernel_w = ksize_x;
  p.stride_y = stride_y;
  p.stride_x = stride_x;
  p.pad_y = pad_y;
  p.pad_x = pad_x;
  p.cover_all = cover_all;
  return p;
}

// Keeps only the argmax indices (i64, the size of the output) for backward.
class MaxPooling2D : public FunctionNode {
 public:
  explicit MaxPooling2D(const Pool2DParams& params) : params_(params) {}
  std::string name() const override { return "max_pooling_2d"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    // The indices serve only backward: none when this application is not recorded (inference).
    auto result = tandem::max_pool2d(in[0], params_, recording());
    x_shape_ = in[0].shape();
    save_for_backward({result.second});
    return {result.first};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {tandem::max_pool2d_backward(grads[0], saved()[0], x_shape_, params_)};
  }

 private:
  Pool2DParams params_;
  Shape x_shape_;
};

// Linear in x: backward needs only the shapes.
class AveragePooling2D : public FunctionNode {
 public:
  explicit AveragePooling2D(const Pool2DParams& params) : params_(params) {}
  std::string name() const override { return "average_pooling_2d"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x_shape_ = in[0].shape();
    return {tandem::avg_pool2d(in[0], params_)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {tandem::avg_pool2d_backward(grads[0], x_shape_, params_)};
  }

 private:
  Pool2DParams params_;
  Shape x_shape_;
};

}  // namespace

Variable max_pooling_2d(const Variable& x, std::int64_t ksize_y, std::int64_t ksize_x, std::int64_t stride_y,
                        std::int64_t stride_x, std::int64_t pad_y, std::int64_t pad_x, bool cover_all) {
  return call<MaxPooling2D>({x}, make_params(ksize_y, ksize_x, stride_y, stride_x, pad_y, pad_x, cover_all))[0];
}

Variable max_pooling_2d(const Variable& x, std::int64_t ksize, std::optional<std::int64_t> stride, std::int64_t pad,
                        bool cover_all) {
  const std::int64_t s = stride.value_or(ksize);
  return max_pooling_2d(x, ksize, ksize, s, s, pad, pad, cover_all);
}

Variable average_pooling_2d(const Variable& x, std::int64_t ksize_y, std::int64_t ksize_x, std::int64_t stride_y,
                            std::int64_t stride_x, std::int64_t pad_y, std::int64_t pad_x) {
  return call<AveragePooling2D>({x}, make_params(ksize_y, ksize_x, stride_y, stride_x, pad_y, pad_x, false))[0];
}

Variable average_pooling_2d(const Variable& x, std::int64_t ksize, std::optional<std::int64_t> stride,
                            std::int64_t pad) {
  const std::int64_t s = stride.value_or(ksize);
  return average_pooling_2d(x, ksize, ksize, s, s, pad, pad);
}

}  // namespace functions
}  // namespace tandem
