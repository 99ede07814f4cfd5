#include "training/digests.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "autograd/function_node.h"
#include "core/error.h"
#include "core/hash.h"

namespace tandem {

namespace {

std::string shape_text(const Tensor& t) {
  std::ostringstream s;
  s << dtype_name(t.dtype()) << '[';
  for (std::size_t i = 0; i < t.shape().size(); ++i) s << (i ? "," : "") << t.shape()[i];
  s << ']';
  return s.str();
}

void make_folders(const std::string& path) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (::mkdir(path.substr(0, i).c_str(), 0755) != 0 && errno != EEXIST)
        TANDEM_FAIL("DigestRecorder: cannot make the folder ", path.substr(0, i), ": ", std::strerror(errno));
    }
  }
}

// One line of a record: step, phase, index, what, shape, digest (tab-separated).
struct Line {
  std::int64_t step = 0;
  std::string phase, index, what, shape, digest;
  std::string text;  // the whole line
  bool same_tensor(const Line& o) const {
    return step == o.step && phase == o.phase && index == o.index && what == o.what && shape == o.shape;
  }
};

std::vector<Line> read_record(const std::string& path) {
  std::ifstream in(path);
  TANDEM_CHECK(in.good(), "compare_digest_records: cannot read ", path);
  std::vector<Line> lines;
  for (std::string text; std::getline(in, text);) {
    std::vector<std::string> fields;
    std::istringstream split(text);
    for (std::string f; std::getline(split, f, '\t');) fields.push_back(f);
    TANDEM_CHECK(fields.size() == 6, "compare_digest_records: ", path, ": line ", lines.size() + 1,
                 " is not 'step phase index what shape digest': '", text, "'");
    Line l;
    l.step = std::stoll(fields[0]);
    l.phase = fields[1], l.index = fields[2], l.what = fields[3], l.shape = fields[4], l.digest = fields[5];
    l.text = text;
    lines.push_back(std::move(l));
  }
  return lines;
}

// The ranks with a record in `dir`, by rank.
std::map<int, std::string> records_in(const std::string& dir) {
  std::map<int, std::string> found;
  for (int rank = 0; rank < 4096; ++rank) {
    const std::string path = dir + "/digests.rank" + std::to_string(rank) + ".tsv";
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) found[rank] = path;
    else if (rank > 0 && found.empty()) break;
  }
  return found;
}

}  // namespace

std::uint64_t tensor_digest(const Tensor& tensor) {
  Fnv1a64 h;
  h.mix(static_cast<std::uint64_t>(tensor.dtype()));
  for (std::int64_t e : tensor.shape()) h.mix(static_cast<std::uint64_t>(e));
  const Tensor host = tensor.to(Device::cpu());
  const auto* bytes = static_cast<const unsigned char*>(host.raw_data());
  const std::size_t n = host.nbytes();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h.mix(word);
  }
  for (; i < n; ++i) h.mix(bytes[i]);
  return h.digest();
}

DigestRecorder::DigestRecorder(const std::string& dir, int rank) {
  make_folders(dir);
  path_ = dir + "/digests.rank" + std::to_string(rank) + ".tsv";
  out_.open(path_, std::ios::trunc);
  TANDEM_CHECK(out_.good(), "DigestRecorder: cannot write ", path_);
}

void DigestRecorder::write(const char* phase, const std::string& what, const Tensor& tensor) {
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(tensor_digest(tensor)));
  std::lock_guard<std::mutex> lock(mutex_);
  out_ << step_ << '\t' << phase << '\t' << index_++ << '\t' << what << '\t' << shape_text(tensor) << '\t' << digest
       << '\n';
}

void DigestRecorder::begin_step(std::int64_t step, Link& model) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step_ = step;
    index_ = 0;
    names_.clear();
  }
  model_ = &model;
  names_refreshed_ = false;
  for (const auto& [name, param] : model.namedparams()) {
    names_[param.node().get()] = name;
    write("param", name, param.data());
  }
  observing_.reset();  // a step that threw left it set
  observing_ = set_tensor_observer(this);
}

void DigestRecorder::end_step(Link& model) {
  observing_.reset();
  for (const auto& [name, param] : model.namedparams())
    if (param.grad().defined()) write("grad", name, param.grad());
  out_.flush();
}

std::string DigestRecorder::parameters_of(const std::vector<std::shared_ptr<VariableNode>>& nodes) const {
  std::string names;
  for (const auto& node : nodes) {
    const auto it = names_.find(node.get());
    if (it != names_.end()) names += (names.empty() ? "" : ", ") + it->second;
  }
  return names.empty() ? "" : " (" + names + ")";
}

void DigestRecorder::forward_done(const FunctionNode& function, const std::vector<Variable>& inputs,
                                  const std::vector<Tensor>& outputs) {
  std::vector<std::shared_ptr<VariableNode>> nodes;
  for (const Variable& v : inputs) {
    nodes.push_back(v.node());
    // A parameter made by this step's forward (a lazy Linear's W): named from the model once.
    if (!names_refreshed_ && v.is_leaf() && v.requires_grad() && !names_.count(v.node().get())) {
      names_refreshed_ = true;
      for (const auto& [name, param] : model_->namedparams()) names_[param.node().get()] = name;
    }
  }
  const std::string params = parameters_of(nodes);
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined()) write("forward", function.name() + " output " + std::to_string(i) + params, outputs[i]);
}

void DigestRecorder::backward_done(const FunctionNode& function, const std::vector<Tensor>& grad_inputs) {
  const auto& inputs = function.inputs();
  for (std::size_t i = 0; i < grad_inputs.size(); ++i) {
    if (!grad_inputs[i].defined()) continue;
    const std::string param = i < inputs.size() ? parameters_of({inputs[i]}) : "";
    write("backward", function.name() + " grad of input " + std::to_string(i) + param, grad_inputs[i]);
  }
}

std::string compare_digest_records(const std::string& dir_a, const std::string& dir_b) {
  const std::map<int, std::string> a = records_in(dir_a), b = records_in(dir_b);
  TANDEM_CHECK(!a.empty(), "compare_digest_records: no digests.rank<R>.tsv in ", dir_a);
  TANDEM_CHECK(!b.empty(), "compare_digest_records: no digests.rank<R>.tsv in ", dir_b);
  std::ostringstream report;
  for (const auto& [rank, path] : a)
    if (!b.count(rank)) report << "rank " << rank << " has a record in " << dir_a << " only\n";
  for (const auto& [rank, path] : b)
    if (!a.count(rank)) report << "rank " << rank << " has a record in " << dir_b << " only\n";
  if (!report.str().empty()) return report.str();

  // Each rank's first differing line; then the earliest step among them.
  struct First {
    int rank;
    std::int64_t step;
    std::string text;
  };
  std::vector<First> firsts;
  for (const auto& [rank, path] : a) {
    const std::vector<Line> x = read_record(path), y = read_record(b.at(rank));
    const std::size_t n = std::min(x.size(), y.size());
    std::size_t i = 0;
    while (i < n && x[i].same_tensor(y[i]) && x[i].digest == y[i].digest) ++i;
    if (i == n && x.size() == y.size()) continue;
    std::ostringstream d;
    if (i == n) {
      const Line& more = x.size() > n ? x[n] : y[n];
      d << "rank " << rank << ": " << (x.size() > n ? dir_a : dir_b) << " goes on where the other ends: step "
        << more.step << " " << more.phase << " #" << more.index << " " << more.what << " " << more.shape;
      firsts.push_back({rank, more.step, d.str()});
    } else if (!x[i].same_tensor(y[i])) {
      d << "rank " << rank << ": the runs took different paths at step " << x[i].step << ":\n  A: " << x[i].text
        << "\n  B: " << y[i].text;
      firsts.push_back({rank, std::min(x[i].step, y[i].step), d.str()});
    } else {
      d << "rank " << rank << ": step " << x[i].step << " " << x[i].phase << " #" << x[i].index << " " << x[i].what
        << " " << x[i].shape << ": " << x[i].digest << " against " << y[i].digest;
      firsts.push_back({rank, x[i].step, d.str()});
    }
  }
  if (firsts.empty()) return "";
  std::int64_t step = firsts.front().step;
  for (const First& f : firsts) step = std::min(step, f.step);
  report << "first difference at step " << step << "\n";
  for (const First& f : firsts)
    if (f.step == step) report << f.text << "\n";
  for (const First& f : firsts)
    if (f.step != step) report << "(later) " << f.text << "\n";
  return report.str();
}

}  // namespace tandem
