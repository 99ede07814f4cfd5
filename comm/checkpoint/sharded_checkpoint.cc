#include "comm/checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "layers/serializers/npz.h"

namespace tandem {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

std::int64_t product(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  return n;
}

std::vector<std::int64_t> extents(const Shape& shape) { return std::vector<std::int64_t>(shape); }

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

// A string the ranks send each other: "ok\n<json>" or "error\n<message>".
std::string ok(const Json& json) { return "ok\n" + json.dump(); }
std::string error(const std::string& message) { return "error\n" + message; }
bool is_error(const std::string& text) { return text.compare(0, 6, "error\n") == 0; }
Json payload(const std::string& text) { return Json::parse(text.substr(3)); }

// Every rank's "ok"/"error" gathered at rank 0, the errors joined (rank 0), "" when none.
std::string joined_errors(const std::vector<std::string>& records) {
  std::string out;
  for (std::size_t r = 0; r < records.size(); ++r)
    if (is_error(records[r]))
      out += (out.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + records[r].substr(6));
  return out;
}

// Rank 0 decides (a function returning the text to broadcast, or throwing: an error); every
// rank receives the outcome and throws the same error.
std::string decided_at_rank0(Communicator& comm, const std::function<std::string()>& decide) {
  std::string outcome;
  if (comm.rank() == 0) {
    try {
      outcome = decide();
    } catch (const std::exception& e) { outcome = error(e.what()); }
  }
  outcome = comm.bcast_obj(outcome, 0);
  if (is_error(outcome)) throw Error(outcome.substr(6));
  return outcome;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in, "cannot read '", path, "': ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// ---- describing pieces, and what rank 0 makes of them -----------------------------------------

// What a rank says about one of its pieces (the digest only where replicas are compared).
Json describe(const ShardEntry& e, const std::string& digest) {
  return {{"n", e.name},         {"d", dtype_name(e.value.dtype())},
          {"b", extents(e.box)}, {"a", e.split_axis},
          {"i", e.split_index},  {"c", e.split_count},
          {"s", e.begin},        {"e", e.end},
          {"h", digest},         {"o", e.origin}};
}

// A rank's own checks of its entries, before anything is sent.
void check_entries(const std::vector<ShardEntry>& entries, const char* operation) {
  std::set<std::string> seen;
  for (const ShardEntry& e : entries) {
    TANDEM_CHECK(!e.name.empty(), operation, ": an entry without a name");
    TANDEM_CHECK(e.value.defined(), operation, ": '", e.name, "' has no tensor");
    const std::int64_t box = product(e.box), end = e.end < 0 ? box : e.end;
    TANDEM_CHECK(0 <= e.begin && e.begin <= end && end <= box, operation, ": '", e.name, "': elements [", e.begin, ", ",
                 end, ") are outside its box ", e.box);
    TANDEM_CHECK(e.value.numel() == end - e.begin, operation, ": '", e.name, "' is ", e.value.description(),
                 " for elements [", e.begin, ", ", end, ") of its box ", e.box);
    TANDEM_CHECK(e.split_axis < 0 || (e.split_axis < static_cast<int>(e.box.size()) && e.split_count >= 1 &&
                                      0 <= e.split_index && e.split_index < e.split_count),
                 operation, ": '", e.name, "': split ", e.split_index, " of ", e.split_count, " along axis ",
                 e.split_axis, " of a box ", e.box);
    const std::string key =
        e.name + "@" + std::to_string(e.split_axis < 0 ? 0 : e.split_index) + "@" + std::to_string(e.begin);
    TANDEM_CHECK(seen.insert(key).second, operation, ": '", e.name, "' is given twice for the same elements");
  }
}

struct Described {
  int rank = 0;
  std::size_t index = 0;  // in the rank's entries
  std::string name;
  DType dtype = DType::f32;
  Shape box;
  int axis = -1, split_index = 0, count = 1;
  std::int64_t begin = 0, end = 0;
  std::string digest, origin;
};

std::vector<Described> described(const std::vector<std::string>& records) {
  std::vector<Described> all;
  for (std::size_t r = 0; r < records.size(); ++r) {
    const Json list = payload(records[r]);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Json& j = list[i];
      Described d;
      d.rank = static_cast<int>(r);
      d.index = i;
      d.name = j["n"];
      d.dtype = dtype_by_name(j["d"].get<std::string>(), "checkpoint");
      d.box = j["b"].get<std::vector<std::int64_t>>();
      d.axis = j["a"];
      d.split_index = j["i"];
      d.count = j["c"];
      d.begin = j["s"];
      d.end = j["e"].get<std::int64_t>() < 0 ? product(d.box) : j["e"].get<std::int64_t>();
      d.digest = j["h"];
      d.origin = j["o"];
      all.push_back(d);
    }
  }
  return all;
}

// Each piece's place in its tensor: the boxes of a split laid side by side along its axis.
std::vector<ShardPlacement> resolve(const std::vector<Described>& all, const char* operation) {
  std::map<std::string, std::vector<std::size_t>> by_name;
  for (std::size_t k = 0; k < all.size(); ++k) by_name[all[k].name].push_back(k);
  std::vector<ShardPlacement> out(all.size());
  for (const auto& [name, members] : by_name) {
    const Described& first = all[members.front()];
    const auto who = [&](const Described& d) { return "rank " + std::to_string(d.rank); };
    for (std::size_t k : members) {
      const Described& d = all[k];
      TANDEM_CHECK(d.dtype == first.dtype, operation, ": '", name, "' is ", dtype_name(first.dtype), " on ", who(first),
                   " but ", dtype_name(d.dtype), " on ", who(d));
      TANDEM_CHECK(d.axis == first.axis && d.count == first.count && d.box.size() == first.box.size(), operation, ": '",
                   name, "' is split differently on ", who(first), " (", first.count, " along axis ", first.axis,
                   " of ", first.box, ") and ", who(d), " (", d.count, " along axis ", d.axis, " of ", d.box, ")");
      for (std::size_t a = 0; a < d.box.size(); ++a)
        TANDEM_CHECK(static_cast<int>(a) == d.axis || d.box[a] == first.box[a], operation, ": '", name, "' has box ",
                     first.box, " on ", who(first), " but ", d.box, " on ", who(d));
    }
    Shape global = first.box;
    std::vector<std::int64_t> offset_of(static_cast<std::size_t>(std::max(first.count, 1)), 0);
    if (first.axis >= 0) {
      std::vector<std::int64_t> extent(first.count, -1);
      std::vector<int> holder(first.count, -1);
      for (std::size_t k : members) {
        const Described& d = all[k];
        auto& e = extent[d.split_index];
        TANDEM_CHECK(e < 0 || e == d.box[d.axis], operation, ": piece ", d.split_index, " of '", name, "' is ", e,
                     " wide along axis ", d.axis, " on rank ", holder[d.split_index], " but ", d.box[d.axis], " on ",
                     who(d));
        e = d.box[d.axis];
        holder[d.split_index] = d.rank;
      }
      std::int64_t at = 0;
      for (int i = 0; i < first.count; ++i) {
        TANDEM_CHECK(extent[i] >= 0, operation, ": '", name, "' is split in ", first.count, " along axis ", first.axis,
                     " but no rank holds piece ", i);
        offset_of[i] = at;
        at += extent[i];
      }
      global[first.axis] = at;
    }
    for (std::size_t k : members) {
      const Described& d = all[k];
      ShardPlacement& p = out[k];
      p.global = global;
      p.offsets.assign(global.size(), 0);
      if (d.axis >= 0) p.offsets[d.axis] = offset_of[d.split_index];
      p.box = d.box;
      p.begin = d.begin;
      p.end = d.end;
      p.check(std::string(operation) + ": '" + name + "'");
    }
  }
  return out;
}

// Rank 0's plan: which rank writes which piece where, and the manifest without the digests.
struct Plan {
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> writes;  // per rank: (entry, byte offset)
  CheckpointManifest manifest;
};

Plan plan_save(const std::vector<std::string>& records, std::int64_t step) {
  const std::vector<Described> all = described(records);
  const std::vector<ShardPlacement> placed = resolve(all, "save_sharded_checkpoint");
  Plan plan;
  const int ranks = static_cast<int>(records.size());
  plan.writes.resize(ranks);
  plan.manifest.step = step;
  plan.manifest.ranks = ranks;
  for (int r = 0; r < ranks; ++r)
    plan.manifest.files.push_back({"rank" + std::to_string(r) + ".bin", 0, kCheckpointBlockBytes, {}});
  // The distinct pieces of each tensor, with their holders.
  std::map<std::string, std::map<std::string, std::vector<std::size_t>>> pieces;
  for (std::size_t k = 0; k < all.size(); ++k) pieces[all[k].name][placed[k].str()].push_back(k);
  struct Distinct {
    std::int64_t bytes;
    std::string name, where;
    const std::vector<std::size_t>* holders;
  };
  std::vector<Distinct> distinct;
  for (const auto& [name, places] : pieces) {
    CheckpointTensor& tensor = plan.manifest.tensors[name];
    const std::size_t any = places.begin()->second.front();
    tensor.dtype = all[any].dtype;
    tensor.shape = placed[any].global;
    std::int64_t held = 0;
    for (const auto& [where, holders] : places) {
      const Described& a = all[holders.front()];
      for (std::size_t k : holders) {
        TANDEM_CHECK(all[k].origin == a.origin, "save_sharded_checkpoint: '", name, "' ", where, " comes from ",
                     a.origin, " on rank ", a.rank, " and from ", all[k].origin, " on rank ", all[k].rank,
                     ": two different tensors under one name (name the layers of each stage uniquely)");
        TANDEM_CHECK(all[k].digest == a.digest, "save_sharded_checkpoint: '", name, "' ", where,
                     " differs between rank ", a.rank, " and rank ", all[k].rank,
                     ": the checkpoint keeps one copy of it, so every rank must hold the same values (state that "
                     "each rank keeps for itself cannot go into a checkpoint of the whole job)");
      }
      held += placed[holders.front()].numel();
      distinct.push_back({placed[holders.front()].numel() * static_cast<std::int64_t>(dtype_size(tensor.dtype)), name,
                          where, &holders});
    }
    TANDEM_CHECK(held == product(tensor.shape), "save_sharded_checkpoint: the ranks' pieces of '", name, "' hold ",
                 held, " of its ", product(tensor.shape), " elements (", tensor.shape,
                 "): a piece is missing, or two pieces overlap");
  }
  // Writers: the largest pieces first, each to the holder with the fewest bytes so far (ties: the
  // lowest rank), so that the ranks' files come out about equal.
  std::sort(distinct.begin(), distinct.end(), [](const Distinct& a, const Distinct& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : std::tie(a.name, a.where) < std::tie(b.name, b.where);
  });
  std::vector<std::int64_t> load(ranks, 0);
  std::vector<std::vector<std::pair<const Distinct*, std::size_t>>> mine(ranks);
  for (const Distinct& d : distinct) {
    std::size_t writer = d.holders->front();
    for (std::size_t k : *d.holders)
      if (load[all[k].rank] < load[all[writer].rank]) writer = k;
    load[all[writer].rank] += d.bytes;
    mine[all[writer].rank].emplace_back(&d, writer);
  }
  // Each file in name order.
  for (int r = 0; r < ranks; ++r) {
    std::sort(mine[r].begin(), mine[r].end(), [](const auto& a, const auto& b) {
      return std::tie(a.first->name, a.first->where) < std::tie(b.first->name, b.first->where);
    });
    std::int64_t at = 0;
    for (const auto& [d, k] : mine[r]) {
      plan.writes[r].emplace_back(all[k].index, at);
      plan.manifest.tensors[d->name].chunks.push_back({r, at, placed[k]});
      at += d->bytes;
    }
  }
  for (int r = 0; r < ranks; ++r) plan.manifest.files[r].bytes = load[r];
  return plan;
}

// ---- reading pieces ---------------------------------------------------------------------------

// Reads a checkpoint's files a block at a time, each block checked against its digest once
// and kept while it is among the last few read (pieces that share a block read it once).
class BlockReader {
 public:
  BlockReader(std::string directory, const CheckpointManifest& manifest)
      : directory_(std::move(directory)), manifest_(manifest), fds_(manifest.files.size(), -1) {}
  ~BlockReader() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }

  // Copies bytes [from, to) of file `f` to `out`.
  void read(int f, std::int64_t from, std::int64_t to, char* out) {
    const std::int64_t B = manifest_.files[f].block_bytes;
    for (std::int64_t block = from / B; block * B < to; ++block) {
      const std::string& bytes = cached(f, block);
      const std::int64_t lo = std::max(from, block * B), hi = std::min(to, block * B + B);
      std::memcpy(out + (lo - from), bytes.data() + (lo - block * B), static_cast<std::size_t>(hi - lo));
    }
  }

  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  static constexpr std::size_t kKeep = 8;

  const std::string& cached(int f, std::int64_t block) {
    for (auto& [key, bytes] : cache_)
      if (key == std::make_pair(f, block)) return bytes;
    if (cache_.size() == kKeep) cache_.erase(cache_.begin());
    cache_.emplace_back(std::make_pair(f, block), load(f, block));
    return cache_.back().second;
  }

  std::string load(int f, std::int64_t block) {
    const CheckpointFile& file = manifest_.files[f];
    const std::string path = directory_ + "/" + file.path;
    if (fds_[f] < 0) {
      fds_[f] = ::open(path.c_str(), O_RDONLY);
      TANDEM_CHECK(fds_[f] >= 0, "cannot open '", path, "': ", std::strerror(errno));
      const off_t size = ::lseek(fds_[f], 0, SEEK_END);
      TANDEM_CHECK(size == file.bytes, "'", path, "' has ", static_cast<long long>(size),
                   " bytes, the manifest records ", file.bytes, ": the file changed after the checkpoint was saved");
    }
    const std::int64_t at = block * file.block_bytes, size = std::min(file.block_bytes, file.bytes - at);
    std::string bytes(static_cast<std::size_t>(size), '\0');
    std::int64_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fds_[f], bytes.data() + done, static_cast<std::size_t>(size - done), at + done);
      if (n < 0 && errno == EINTR) continue;
      TANDEM_CHECK(n > 0, "cannot read '", path, "' at byte ", at + done, ": ",
                   n == 0 ? "unexpected end of file" : std::strerror(errno));
      done += n;
    }
    bytes_read_ += size;
    const std::uint64_t digest = checkpoint_block_digest(bytes.data(), bytes.size());
    TANDEM_CHECK(digest == file.digests[block], "'", path, "': block ", block, " (bytes ", at, " to ", at + size,
                 ") does not match its digest in the manifest (", digest_hex(digest), ", recorded ",
                 digest_hex(file.digests[block]), "): the file changed or was damaged after the checkpoint was saved");
    return bytes;
  }

  std::string directory_;
  const CheckpointManifest& manifest_;
  std::vector<int> fds_;
  std::vector<std::pair<std::pair<int, std::int64_t>, std::string>> cache_;  // oldest first
  std::int64_t bytes_read_ = 0;
};

// Fills pieces of the checkpoint's tensors (host memory): every chunk's elements that a piece
// needs, read in the order they lie in the files.
class PieceReader {
 public:
  PieceReader(const std::string& directory, const CheckpointManifest& manifest)
      : manifest_(manifest), reader_(directory, manifest) {}

  void add(const std::string& name, const ShardPlacement& target, void* data) {
    const CheckpointTensor& tensor = manifest_.tensors.at(name);
    const std::int64_t element = static_cast<std::int64_t>(dtype_size(tensor.dtype));
    pieces_.push_back({name, target, data, 0});
    for (const CheckpointChunk& chunk : tensor.chunks) {
      // The chunk's elements this piece needs: only their span is read.
      std::int64_t lo = -1, hi = -1;
      for_each_shared_run(chunk.placement, target, [&](std::int64_t s, std::int64_t, std::int64_t n) {
        if (lo < 0) lo = s;
        hi = s + n;
      });
      if (lo >= 0)
        tasks_.push_back({pieces_.size() - 1, &chunk, element, chunk.at + lo * element, chunk.at + hi * element});
    }
  }

  // Returns the bytes read (whole blocks).
  std::int64_t run() {
    std::sort(tasks_.begin(), tasks_.end(), [](const Task& a, const Task& b) {
      return std::make_pair(a.chunk->file, a.from) < std::make_pair(b.chunk->file, b.from);
    });
    std::string bytes;
    for (const Task& task : tasks_) {
      Piece& piece = pieces_[task.piece];
      bytes.resize(static_cast<std::size_t>(task.to - task.from));
      reader_.read(task.chunk->file, task.from, task.to, bytes.data());
      const std::int64_t first = (task.from - task.chunk->at) / task.element;
      for_each_shared_run(task.chunk->placement, piece.target, [&](std::int64_t s, std::int64_t t, std::int64_t n) {
        std::memcpy(static_cast<char*>(piece.data) + t * task.element, bytes.data() + (s - first) * task.element,
                    n * task.element);
        piece.copied += n;
      });
    }
    for (const Piece& piece : pieces_)
      TANDEM_CHECK(piece.copied == piece.target.numel(), "the checkpoint holds ", piece.copied, " of the ",
                   piece.target.numel(), " elements of '", piece.name, "' ", piece.target.str());
    return reader_.bytes_read();
  }

 private:
  struct Piece {
    std::string name;
    ShardPlacement target;
    void* data;
    std::int64_t copied;
  };
  struct Task {
    std::size_t piece;
    const CheckpointChunk* chunk;
    std::int64_t element, from, to;  // bytes [from, to) of the chunk's file
  };
  const CheckpointManifest& manifest_;
  BlockReader reader_;
  std::vector<Piece> pieces_;
  std::vector<Task> tasks_;
};

// The step of a complete checkpoint's directory name "step_<N>", or -1 for any other name.
std::int64_t step_of(const std::string& base) {
  if (base.size() <= 5 || base.size() > 23 || base.rfind("step_", 0) != 0 ||
      base.find_first_not_of("0123456789", 5) != std::string::npos)
    return -1;
  return std::stoll(base.substr(5));
}

}  // namespace

std::string checkpoint_directory(const std::string& root, std::int64_t step) {
  return root + "/step_" + std::to_string(step);
}

// ---- saving -----------------------------------------------------------------------------------

SavingCheckpoint::SavingCheckpoint(Communicator& comm, std::string root, std::int64_t step,
                                   const std::vector<ShardEntry>& entries, std::map<std::string, std::string> info,
                                   CheckpointSaveOptions options)
    : root_(std::move(root)), step_(step), options_(options), rank_(comm.rank()) {
  partial_ = checkpoint_directory(root_, step_) + ".partial";
  // 1. Describe, plan at rank 0, learn the plan.
  std::string mine;
  try {
    check_entries(entries, "save_sharded_checkpoint");
    Json list = Json::array();
    for (const ShardEntry& e : entries) {
      std::string digest;
      if (e.check_replicas) {
        const Tensor host = e.value.to(Device::cpu());
        digest = digest_hex(checkpoint_block_digest(host.raw_data(), host.nbytes()));
      }
      list.push_back(describe(e, digest));
    }
    mine = ok(list);
  } catch (const std::exception& e) { mine = error(e.what()); }
  const std::vector<std::string> records = comm.gather_obj(mine, 0);
  const std::string plan_text = decided_at_rank0(comm, [&] {
    const std::string errors = joined_errors(records);
    TANDEM_CHECK(errors.empty(), "save_sharded_checkpoint: ", errors);
    Plan plan = plan_save(records, step_);
    plan.manifest.info = std::move(info);
    manifest_ = plan.manifest;
    // The directory every rank writes into, empty (a save of this step cut short left files).
    fs::create_directories(root_);
    fs::remove_all(partial_);
    fs::create_directories(partial_);
    Json writes = Json::array();
    for (const auto& list : plan.writes) writes.push_back(list);
    return ok(writes);
  });
  std::size_t total = 0;
  for (const auto& [index, at] : payload(plan_text)[rank_].get<std::vector<std::pair<std::size_t, std::int64_t>>>()) {
    TANDEM_CHECK(static_cast<std::size_t>(at) == total, "save_sharded_checkpoint: internal error: piece at byte ", at,
                 ", expected ", total);
    held_.push_back(entries[index].value.to(Device::cpu()));
    pieces_.emplace_back(static_cast<const char*>(held_.back().raw_data()), held_.back().nbytes());
    total += held_.back().nbytes();
  }
  if (options_.staging) {  // the file's image, copied now; the tensors may change after this
    char* image = options_.staging->reserve(total);
    std::size_t at = 0;
    for (const auto& [data, bytes] : pieces_) {
      std::memcpy(image + at, data, bytes);
      at += bytes;
    }
    pieces_.assign(1, {image, total});
    held_.clear();
  }
}

void SavingCheckpoint::write() {
  const std::string path = partial_ + "/rank" + std::to_string(rank_) + ".bin";
  int fd = -1;
  try {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    TANDEM_CHECK(fd >= 0, "cannot create '", path, "': ", std::strerror(errno));
    std::vector<std::uint64_t> digests;
    std::string block;
    block.reserve(kCheckpointBlockBytes);
    const auto flush = [&] {
      digests.push_back(checkpoint_block_digest(block.data(), block.size()));
      std::size_t done = 0;
      while (done < block.size()) {
        const ssize_t n = ::write(fd, block.data() + done, block.size() - done);
        if (n < 0 && errno == EINTR) continue;
        TANDEM_CHECK(n > 0, "cannot write '", path, "': ", std::strerror(errno));
        done += static_cast<std::size_t>(n);
      }
      block.clear();
    };
    std::int64_t at = 0;
    for (auto [data, left] : pieces_) {
      at += static_cast<std::int64_t>(left);
      while (left > 0) {
        const std::size_t n = std::min(left, static_cast<std::size_t>(kCheckpointBlockBytes) - block.size());
        block.append(data, n);
        data += n;
        left -= n;
        if (block.size() == static_cast<std::size_t>(kCheckpointBlockBytes)) flush();
      }
    }
    if (!block.empty()) flush();
    TANDEM_CHECK(::fsync(fd) == 0, "cannot sync '", path, "': ", std::strerror(errno));
    ::close(fd);
    fd = -1;
    bytes_ = at;
    Json hex = Json::array();
    for (std::uint64_t d : digests) hex.push_back(digest_hex(d));
    outcome_ = ok({{"bytes", at}, {"digests", hex}});
  } catch (const std::exception& e) {
    if (fd >= 0) ::close(fd);
    outcome_ = error(e.what());
  }
}

std::string SavingCheckpoint::commit(Communicator& comm) {
  pieces_.clear();  // the tensors are done with (freed here, on the caller's thread)
  held_.clear();
  const std::vector<std::string> records = comm.gather_obj(outcome_, 0);
  const std::string final_dir = checkpoint_directory(root_, step_);
  decided_at_rank0(comm, [&] {
    const std::string errors = joined_errors(records);
    TANDEM_CHECK(errors.empty(), "save_sharded_checkpoint: the checkpoint of step ", step_, " is incomplete (",
                 partial_, " is not committed; the previous checkpoint stays the newest): ", errors);
    for (std::size_t r = 0; r < records.size(); ++r) {
      const Json result = payload(records[r]);
      CheckpointFile& file = manifest_.files[r];
      TANDEM_CHECK(result["bytes"].get<std::int64_t>() == file.bytes, "save_sharded_checkpoint: rank ", r, " wrote ",
                   result["bytes"].get<std::int64_t>(), " bytes, the plan has ", file.bytes);
      for (const Json& d : result["digests"]) file.digests.push_back(std::stoull(d.get<std::string>(), nullptr, 16));
    }
    write_file_atomically(partial_ + "/" + kCheckpointManifestName, format_checkpoint_manifest(manifest_));
    sync_directory(partial_);
    fs::remove_all(final_dir);  // the same step saved again (a resumed run)
    fs::rename(partial_, final_dir);
    sync_directory(root_);
    // The newest checkpoint is the one committed last (a run resumed from an older one saves
    // lower steps than some already there, which are then of another history).
    write_file_atomically(root_ + "/" + kLatestCheckpointName, "step_" + std::to_string(step_) + "\n");
    sync_directory(root_);
    if (options_.keep > 0) {
      // This history's older checkpoints beyond the newest `keep` (this one included) go.
      std::vector<std::pair<std::int64_t, fs::path>> older;
      for (const auto& item : fs::directory_iterator(root_)) {
        const std::int64_t step = step_of(item.path().filename().string());
        if (step >= 0 && step < step_ && fs::exists(item.path() / kCheckpointManifestName))
          older.emplace_back(step, item.path());
      }
      std::sort(older.begin(), older.end());
      for (std::size_t i = 0; i + options_.keep < older.size() + 1; ++i) fs::remove_all(older[i].second);
    }
    return ok(Json::object());
  });
  return final_dir;
}

std::string save_sharded_checkpoint(Communicator& comm, const std::string& root, std::int64_t step,
                                    const std::vector<ShardEntry>& entries,
                                    const std::map<std::string, std::string>& info,
                                    const CheckpointSaveOptions& options) {
  SavingCheckpoint saving(comm, root, step, entries, info, options);
  saving.write();
  return saving.commit(comm);
}

// ---- loading ----------------------------------------------------------------------------------

std::string latest_sharded_checkpoint(Communicator& comm, const std::string& root) {
  const std::string found = decided_at_rank0(comm, [&] {
    // The one committed last, when the pointer names a complete checkpoint; else the highest step.
    std::ifstream pointer(root + "/" + kLatestCheckpointName);
    std::string named;
    if (pointer >> named && step_of(named) >= 0 && fs::exists(fs::path(root) / named / kCheckpointManifestName))
      return ok(root + "/" + named);
    std::int64_t best = -1;
    std::error_code ignored;
    if (fs::is_directory(root, ignored)) {
      for (const auto& item : fs::directory_iterator(root)) {
        const std::int64_t step = step_of(item.path().filename().string());
        if (step >= 0 && fs::exists(item.path() / kCheckpointManifestName)) best = std::max(best, step);
      }
    }
    return ok(best < 0 ? "" : checkpoint_directory(root, best));
  });
  return payload(found).get<std::string>();
}

CheckpointManifest read_checkpoint_manifest(const std::string& directory) {
  const std::string path = directory + "/" + kCheckpointManifestName;
  return parse_checkpoint_manifest(read_text(path), path);
}

CheckpointManifest read_sharded_checkpoint_manifest(Communicator& comm, const std::string& directory) {
  const std::string path = directory + "/" + kCheckpointManifestName;
  const std::string text = decided_at_rank0(comm, [&] { return ok(read_text(path)); });
  return parse_checkpoint_manifest(payload(text).get<std::string>(), path);
}

Tensor read_checkpoint_tensor(const std::string& directory, const CheckpointManifest& manifest,
                              const std::string& name) {
  const auto it = manifest.tensors.find(name);
  TANDEM_CHECK(it != manifest.tensors.end(), "read_checkpoint_tensor: ", directory, " has no tensor '", name, "'");
  Tensor out(it->second.shape, it->second.dtype);
  PieceReader reader(directory, manifest);
  reader.add(name, ShardPlacement::whole(it->second.shape), out.raw_data());
  reader.run();
  return out;
}

CheckpointLoadStats load_sharded_checkpoint(Communicator& comm, const std::string& directory,
                                            const CheckpointManifest& manifest, std::vector<ShardEntry>& requests,
                                            const CheckpointLoadOptions& options) {
  std::string mine;
  try {
    check_entries(requests, "load_sharded_checkpoint");
    Json list = Json::array();
    for (const ShardEntry& e : requests) list.push_back(describe(e, ""));
    mine = ok(list);
  } catch (const std::exception& e) { mine = error(e.what()); }
  const std::vector<std::string> records = comm.gather_obj(mine, 0);
  // Rank 0 places every rank's pieces and checks them against the checkpoint.
  const std::string placed_text = decided_at_rank0(comm, [&] {
    const std::string errors = joined_errors(records);
    TANDEM_CHECK(errors.empty(), "load_sharded_checkpoint: ", errors);
    const std::vector<Described> all = described(records);
    const std::vector<ShardPlacement> placed = resolve(all, "load_sharded_checkpoint");
    const std::string where = "load_sharded_checkpoint: " + directory + " (step " + std::to_string(manifest.step) +
                              ", " + std::to_string(manifest.ranks) + " ranks)";
    std::set<std::string> asked;
    std::vector<std::string> missing;
    for (std::size_t k = 0; k < all.size(); ++k) {
      const auto it = manifest.tensors.find(all[k].name);
      if (it == manifest.tensors.end()) {
        if (!asked.count(all[k].name)) missing.push_back(all[k].name);
      } else {
        TANDEM_CHECK(it->second.shape == placed[k].global, where, ": '", all[k].name, "' is ",
                     dtype_name(it->second.dtype), shape_text(it->second.shape),
                     " in the checkpoint but this layout's is ", shape_text(placed[k].global), " (rank ", all[k].rank,
                     " holds ", placed[k].str(), ")");
        TANDEM_CHECK(it->second.dtype == all[k].dtype, where, ": '", all[k].name, "' is ", dtype_name(it->second.dtype),
                     " in the checkpoint but ", dtype_name(all[k].dtype), " here (rank ", all[k].rank, ")");
      }
      asked.insert(all[k].name);
    }
    const auto listed = [](const std::vector<std::string>& names) {
      std::string text;
      for (std::size_t i = 0; i < names.size() && i < 8; ++i) text += (i ? ", '" : "'") + names[i] + "'";
      if (names.size() > 8) text += " and " + std::to_string(names.size() - 8) + " more";
      return text;
    };
    TANDEM_CHECK(missing.empty(), where, " has no ", listed(missing), ", which this layout needs");
    std::vector<std::string> unused;
    for (const auto& [name, tensor] : manifest.tensors) {
      bool ignored = asked.count(name) > 0;
      for (const std::string& prefix : options.ignore) ignored = ignored || name.rfind(prefix, 0) == 0;
      if (!ignored) unused.push_back(name);
    }
    TANDEM_CHECK(unused.empty(), where, " holds ", listed(unused),
                 ", which no rank of this layout uses (a different model, or state this run does not keep; name them "
                 "in ignore to load without them)");
    Json per_rank = Json::array();
    for (std::size_t r = 0; r < records.size(); ++r) per_rank.push_back(Json::array());
    for (std::size_t k = 0; k < all.size(); ++k) per_rank[all[k].rank].push_back(placed[k].offsets);
    return ok(per_rank);
  });
  const Json offsets = payload(placed_text)[comm.rank()];
  // Each rank reads its pieces; then every rank learns whether all could.
  CheckpointLoadStats stats;
  std::string verdict = "ok\n{}";
  try {
    PieceReader reader(directory, manifest);
    std::vector<Tensor> hosts;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      ShardEntry& e = requests[i];
      ShardPlacement p;
      p.global = manifest.tensors.at(e.name).shape;
      p.offsets = offsets[i].get<std::vector<std::int64_t>>();
      p.box = e.box;
      p.begin = e.begin;
      p.end = e.end < 0 ? product(e.box) : e.end;
      hosts.push_back(e.value.device().is_cpu() ? e.value : Tensor(e.value.shape(), e.value.dtype()));
      reader.add(e.name, p, hosts.back().raw_data());
    }
    stats.bytes_read = reader.run();
    for (std::size_t i = 0; i < requests.size(); ++i)
      if (!requests[i].value.device().is_cpu()) requests[i].value.copy_(hosts[i].to(requests[i].value.device()));
  } catch (const std::exception& e) { verdict = error(e.what()); }
  const std::vector<std::string> verdicts = comm.gather_obj(verdict, 0);
  decided_at_rank0(comm, [&] {
    const std::string errors = joined_errors(verdicts);
    TANDEM_CHECK(errors.empty(), "load_sharded_checkpoint: ", directory, ": ", errors);
    return ok(Json::object());
  });
  return stats;
}

}  // namespace tandem
