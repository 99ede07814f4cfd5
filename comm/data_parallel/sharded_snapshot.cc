#include "comm/data_parallel/sharded_snapshot.h"

#include <map>
#include <regex>

#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

// "optimizer/l1/W[0:512]/m" -> {"l1/W", 0, 512, "m"}.
struct Slice {
  std::string param, key;
  std::int64_t begin = 0, end = 0;
};
bool parse_slice(const std::string& name, Slice& out) {
  static const std::regex pattern(R"(^optimizer/(.+)\[(\d+):(\d+)\]/([^/]+)$)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return false;
  out.param = m[1];
  out.begin = std::stoll(m[2]);
  out.end = std::stoll(m[3]);
  out.key = m[4];
  return true;
}

}  // namespace

NamedTensors consolidate_sharded_snapshots(const std::vector<NamedTensors>& per_rank) {
  TANDEM_CHECK(!per_rank.empty(), "consolidate_sharded_snapshots: no snapshots");
  // The whole entries from rank 0: the model and the optimizer's counters checked equal on every
  // rank; the rest (an iterator's order, the trainer's state) is each rank's own.
  std::map<std::string, Tensor> shapes;  // model/<param>: where a parameter's shape comes from
  NamedTensors out;
  std::map<std::string, std::size_t> whole_index;
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& [name, tensor] : per_rank[r]) {
      Slice slice;
      if (parse_slice(name, slice)) continue;
      auto it = whole_index.find(name);
      if (r == 0) {
        whole_index[name] = out.size();
        out.emplace_back(name, tensor);
        if (name.rfind("model/", 0) == 0) shapes[name.substr(6)] = tensor;
        continue;
      }
      // The rest (an iterator's order, the trainer's state) is each rank's own: rank 0's is kept.
      if (name.rfind("model/", 0) != 0 && name.rfind("optimizer/", 0) != 0) continue;
      TANDEM_CHECK(it != whole_index.end(), "consolidate_sharded_snapshots: rank ", r, "'s snapshot has '", name,
                   "', rank 0's has not");
      const Tensor& first = out[it->second].second;
      TANDEM_CHECK(first.shape() == tensor.shape() && first.dtype() == tensor.dtype() &&
                       first.to_vector<double>() == tensor.to_vector<double>(),
                   "consolidate_sharded_snapshots: '", name, "' differs between rank 0 and rank ", r,
                   " (every rank saves it whole and equal)");
    }
  }
  // The slices, parameter by parameter and key by key, each element covered exactly once.
  struct Whole {
    Tensor flat;
    std::vector<int> owner;  // per element: the rank whose slice set it (-1: none yet)
    DType dtype;
  };
  std::map<std::pair<std::string, std::string>, Whole> wholes;
  std::vector<std::pair<std::string, std::string>> order;
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& [name, tensor] : per_rank[r]) {
      Slice s;
      if (!parse_slice(name, s)) continue;
      auto shape = shapes.find(s.param);
      TANDEM_CHECK(shape != shapes.end(), "consolidate_sharded_snapshots: '", name, "' is a slice of '", s.param,
                   "', which the snapshot's model has not");
      const std::int64_t numel = shape->second.numel();
      TANDEM_CHECK(s.begin < s.end && s.end <= numel && tensor.numel() == s.end - s.begin,
                   "consolidate_sharded_snapshots: '", name, "' (", tensor.description(), ") does not fit '", s.param,
                   "' of ", numel, " elements");
      const auto key = std::make_pair(s.param, s.key);
      auto [it, created] = wholes.try_emplace(key);
      if (created) {
        it->second.flat = zeros({numel}, tensor.dtype());
        it->second.owner.assign(static_cast<std::size_t>(numel), -1);
        it->second.dtype = tensor.dtype();
        order.push_back(key);
      }
      Whole& w = it->second;
      for (std::int64_t e = s.begin; e < s.end; ++e) {
        TANDEM_CHECK(w.owner[e] < 0, "consolidate_sharded_snapshots: element ", e, " of '", s.param, "/", s.key,
                     "' is in the slices of rank ", w.owner[e], " and rank ", r);
        w.owner[e] = static_cast<int>(r);
      }
      w.flat.slice_rows(s.begin, s.end).copy_(tensor.reshape({-1}).to(Device::cpu()));
    }
  }
  for (const auto& key : order) {
    Whole& w = wholes.at(key);
    for (std::size_t e = 0; e < w.owner.size(); ++e)
      TANDEM_CHECK(w.owner[e] >= 0, "consolidate_sharded_snapshots: element ", e, " of '", key.first, "/", key.second,
                   "' is in no rank's slice (a rank's snapshot is missing?)");
    out.emplace_back("optimizer/" + key.first + "/" + key.second, w.flat.reshape(shapes.at(key.first).shape()));
  }
  return out;
}

}  // namespace tandem
