// Where two runs part: a digest of every parameter, gradient and activation of every step, per
// rank, and a comparison that names the first step, rank, layer and tensor that differ.
//
// Recording: TANDEM_DIGESTS=<dir> (read when a StandardUpdater is made) or
// StandardUpdater::record_digests(dir). Each rank writes <dir>/digests.rank<R>.tsv (R: the
// launcher's rank, 0 alone), one line a tensor, in the order the step computed them:
//
//   step  phase  index  what  shape  digest
//
//   param     every parameter at the step's start, by its path ("predictor/l1/W")
//   forward   each function's outputs, in the order they ran: "linear output 0 (predictor/l1/W,
//             predictor/l1/b)": the function, which output, the parameters it read
//   backward  each gradient a backward computed: "linear grad of input 1 (predictor/l1/W)"
//   grad      every parameter's gradient as the optimizer receives it
//
// The digest is FNV-1a over the tensor's bytes (core/hash.h): bit-identical tensors, equal
// digests. It costs a pass over every tensor: a debugging aid, off by default.
//
// Comparing: `bazel run //tools:compare_digests -- <dir A> <dir B>` (compare_digest_records).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "autograd/tensor_observer.h"
#include "layers/link.h"

namespace tandem {

class DigestRecorder : public TensorObserver {
 public:
  // Writes <dir>/digests.rank<rank>.tsv (the folder is made when missing; the file starts anew).
  DigestRecorder(const std::string& dir, int rank);

  // Digests the model's parameters and observes every function until end_step.
  void begin_step(std::int64_t step, Link& model);
  // Digests the parameters' gradients and stops observing.
  void end_step(Link& model);

  void forward_done(const FunctionNode& function, const std::vector<Variable>& inputs,
                    const std::vector<Tensor>& outputs) override;
  void backward_done(const FunctionNode& function, const std::vector<Tensor>& grad_inputs) override;

  const std::string& path() const { return path_; }

 private:
  void write(const char* phase, const std::string& what, const Tensor& tensor);
  std::string parameters_of(const std::vector<std::shared_ptr<VariableNode>>& nodes) const;

  std::string path_;
  std::ofstream out_;
  std::mutex mutex_;
  std::int64_t step_ = 0, index_ = 0;
  std::unordered_map<const VariableNode*, std::string> names_;  // parameters by node, this step
  Link* model_ = nullptr;
  bool names_refreshed_ = false;
  std::shared_ptr<void> observing_;
};

// The digest of a tensor's contents (its dtype and shape included).
std::uint64_t tensor_digest(const Tensor& tensor);

// Compares two folders of digest records, rank by rank: "" when they are identical, else a
// report that names the first step where they differ and, for each rank that differs there, its
// first differing tensor (phase, index, what, shape and both digests), or where one record has
// lines the other lacks (the runs took different paths).
std::string compare_digest_records(const std::string& dir_a, const std::string& dir_b);

}  // namespace tandem
