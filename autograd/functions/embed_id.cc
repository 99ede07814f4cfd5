#include "autograd/functions/embed_id.h"

#include "autograd/function_node.h"
#include "core/ops.h"
#include "core/ops/indexing.h"

namespace tandem {
namespace functions {

namespace {

class EmbedID : public FunctionNode {
 public:
  explicit EmbedID(std::optional<std::int64_t> ignore_label) : ignore_label_(ignore_label) {}
  std::string name() const override { return "embed_id"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& ids = in[0];
    const Tensor& W = in[1];
    TANDEM_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, "embed_id: ids must be i32 or i64, got ",
                 ids.description());
    TANDEM_CHECK(W.dim() == 2, "embed_id: W must be 2-D [V, D], got ", W.description());
    TANDEM_CHECK(is_floating(W.dtype()), "embed_id: W must be floating, got ", W.description());
    TANDEM_CHECK(ids.device() == W.device(), "embed_id: ids on ", ids.device(), " but W on ", W.device());
    w_shape_ = W.shape();
    save_for_backward({ids});
    return {take_rows(W, ids, ignore_label_, "embed_id")};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    if (!needs_input_grad(1)) return {Tensor(), Tensor()};
    const Tensor& ids = saved()[0];
    Tensor gW = zeros(w_shape_, gy[0].dtype(), gy[0].device());
    index_add_rows_(gW, ids, gy[0], ignore_label_, "embed_id");
    return {Tensor(), gW};
  }

 private:
  std::optional<std::int64_t> ignore_label_;
  Shape w_shape_;
};

}  // namespace

Variable embed_id(const Variable& x, const Variable& W, std::optional<std::int64_t> ignore_label) {
  return call<EmbedID>({x, W}, ignore_label)[0];
}

}  // namespace functions
}  // namespace tandem
