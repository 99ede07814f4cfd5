#include "comm/checkpoint/training_checkpoint.h"

#include <set>

#include "comm/pipeline/pipeline.h"
#include "comm/pipeline/tied_stage.h"
#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"
#include "core/hash.h"
#include "core/kernel_choices.h"
#include "core/random.h"
#include "layers/serializers/npz.h"
#include "layers/serializers/serializers.h"

namespace tandem {

namespace {

// Walks the model. (A mixture of experts names its experts by their global index already.)
void name_parameters(Link& link, const std::string& local, const std::string& global, const std::string& origin,
                     std::map<std::string, GlobalName>& out) {
  const auto* split = dynamic_cast<const TensorParallelLink*>(&link);
  const std::map<std::string, std::int64_t> axes = split ? split->split_axes() : std::map<std::string, std::int64_t>{};
  const auto own = [&](const std::string& name) {
    if (name.find('/') != std::string::npos) return;
    GlobalName g{global + name, origin};
    const auto axis = axes.find(name);
    if (axis != axes.end()) {
      g.split_axis = static_cast<int>(axis->second);
      g.split_index = split->group().rank();
      g.split_count = split->group().size();
    }
    out[local + name] = g;
  };
  for (const auto& [name, param] : link.namedparams(true)) own(name);
  for (const auto& [name, tensor] : link.namedpersistents()) own(name);
  const bool stages = dynamic_cast<const pipeline::Pipeline*>(&link) != nullptr;
  for (const auto& [name, child] : link.children()) {
    std::string global_name = name, child_origin = origin;
    if (stages) {
      global_name.clear();  // the stage id: the stage's own names are the model's
      child_origin = "pipeline stage " + name;
    }
    name_parameters(*child, local + name + "/", global_name.empty() ? global : global + global_name + "/", child_origin,
                    out);
    // A parameter tied across stages is one tensor whatever stage holds it.
    if (const auto* tied = stages ? dynamic_cast<const pipeline::TiedStage*>(child.get()) : nullptr) {
      for (const auto& [path, owner] : tied->tied_parameters()) {
        const auto it = out.find(local + name + "/" + path);
        TANDEM_CHECK(it != out.end(), "training checkpoint: pipeline stage ", name, " ties '", path,
                     "', which it does not hold");
        it->second.origin.clear();
        it->second.saved = owner;
      }
    }
  }
}

Tensor scalar(std::int64_t value) { return full({}, static_cast<double>(value), DType::i64); }

ShardEntry piece(const std::string& name, const Tensor& value, const GlobalName* where = nullptr) {
  ShardEntry e;
  e.name = name;
  e.value = value;
  e.box = value.shape();
  if (where) {
    e.origin = where->origin;
    e.split_axis = where->split_axis;
    e.split_index = where->split_index;
    e.split_count = where->split_count;
  }
  return e;
}

// The same on every rank: kept once, compared when saved.
ShardEntry replicated(const std::string& name, const Tensor& value) {
  ShardEntry e = piece(name, value);
  e.check_replicas = true;
  return e;
}

// A parameter the optimizer updates (GradientSync::update_params): the model's parameter `base`,
// or elements [begin, end) of it (a ZeRO slice).
struct UpdatedParam {
  std::string base;
  std::int64_t begin = 0, end = -1;
};

UpdatedParam updated_param(Optimizer& optimizer, Link& model, const std::map<std::string, Variable>& params,
                           const std::string& name) {
  if (params.count(name)) return {name};
  const auto bracket = name.rfind('[');
  if (bracket != std::string::npos && optimizer.gradient_sync()) {
    const std::string base = name.substr(0, bracket);
    for (const GradientSync::Slice& s : optimizer.gradient_sync()->slices_of(model, base))
      if (s.name == name) return {base, s.begin, s.end};
  }
  TANDEM_FAIL("training checkpoint: the optimizer updates '", name,
              "', which is neither a parameter of the model nor a slice of one that its sync names");
}

const GlobalName& global_of(const std::map<std::string, GlobalName>& names, const std::string& path) {
  const auto it = names.find(path);
  TANDEM_CHECK(it != names.end(), "training checkpoint: no global name for '", path, "'");
  return it->second;
}

bool ignored(const CheckpointLoadOptions& options, const std::string& name) {
  for (const std::string& prefix : options.ignore)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The manifest's tensors under `prefix` (the rest of the name without '/' when leaf_only).
std::vector<std::string> names_under(const CheckpointManifest& m, const std::string& prefix, bool leaf_only) {
  std::vector<std::string> out;
  for (auto it = m.tensors.lower_bound(prefix); it != m.tensors.end() && it->first.rfind(prefix, 0) == 0; ++it)
    if (!leaf_only || it->first.find('/', prefix.size()) == std::string::npos) out.push_back(it->first);
  return out;
}

// A request for the whole of a tensor the checkpoint holds, into a new host tensor.
ShardEntry whole_request(const CheckpointManifest& m, const std::string& name) {
  const CheckpointTensor& t = m.tensors.at(name);
  return piece(name, Tensor(t.shape, t.dtype));
}

// The model's parameters and buffers, to be loaded in place. A lazily sized parameter (Linear(-1,
// n) before its first forward) that is not split is created with the checkpoint's shape first.
std::vector<ShardEntry> model_requests(Link& model, const std::map<std::string, GlobalName>& names,
                                       const CheckpointManifest& m) {
  std::vector<ShardEntry> requests;
  for (const auto& [path, lazy] : model.namedparams(true)) {
    const GlobalName& g = global_of(names, path);
    if (!lazy.defined()) {
      const auto it = m.tensors.find("model/" + g.name);
      TANDEM_CHECK(it != m.tensors.end() && g.split_axis < 0, "loading a checkpoint: the parameter '", path,
                   "' has no shape yet (a lazily sized layer) and the checkpoint cannot give it one",
                   it == m.tensors.end() ? " (it has no 'model/" + g.name + "')" : " (it is split over ranks)",
                   ": run one forward pass before loading");
      model.initialize_param_from(path, zeros(it->second.shape, it->second.dtype));
    }
  }
  for (const auto& [path, param] : model.namedparams()) {
    const GlobalName& g = global_of(names, path);
    requests.push_back(piece("model/" + g.name, param.data(), &g));
  }
  for (const auto& [path, tensor] : model.namedpersistents())
    requests.push_back(piece("model/" + global_of(names, path).name, *tensor, &global_of(names, path)));
  return requests;
}

NamedTensors iterator_tensors(const IteratorState& it) {
  return {{"epoch", scalar(it.epoch)},
          {"position", scalar(it.position)},
          {"is_new_epoch", scalar(it.is_new_epoch)},
          {"previous_epoch_detail", full({}, it.previous_epoch_detail, DType::f64)},
          {"order", from_vector(it.order, {static_cast<std::int64_t>(it.order.size())})},
          {"rng", string_to_tensor(it.rng)}};
}

// Whether every rank passed the same text (a collective).
bool same_on_every_rank(Communicator& comm, const std::string& text) {
  std::string verdict;
  if (comm.rank() == 0) {
    verdict = "1";
    for (const std::string& other : comm.gather_obj(text, 0))
      if (other != text) verdict = "0";
  } else {
    comm.gather_obj(text, 0);
  }
  return comm.bcast_obj(verdict, 0) == "1";
}

}  // namespace

void load_model_checkpoint(Communicator& comm, Link& model, const std::string& directory) {
  const CheckpointManifest m = read_sharded_checkpoint_manifest(comm, directory);
  std::vector<ShardEntry> requests = model_requests(model, global_parameter_names(model), m);
  CheckpointLoadOptions options;
  for (const auto& [name, tensor] : m.tensors)
    if (name.rfind("model/", 0) != 0) options.ignore.push_back(name);
  load_sharded_checkpoint(comm, directory, m, requests, options);
}

std::map<std::string, GlobalName> global_parameter_names(const Link& model) {
  std::map<std::string, GlobalName> out;
  name_parameters(const_cast<Link&>(model), "", "", "", out);
  return out;
}

TrainingState training_state(Communicator& comm, Trainer& trainer) {
  TrainingState state;
  state.whole_parameters = trainer.gather_parameters();  // ZeRO-3: whole while this lives
  Link& model = trainer.model();
  const std::map<std::string, GlobalName> names = global_parameter_names(model);
  std::map<std::string, Variable> params;
  for (const auto& [path, param] : model.namedparams()) {
    params[path] = param;
    const GlobalName& g = global_of(names, path);
    if (g.saved) state.entries.push_back(piece("model/" + g.name, param.data(), &g));
  }
  for (const auto& [path, tensor] : model.namedpersistents()) {
    const GlobalName& g = global_of(names, path);
    state.entries.push_back(piece("model/" + g.name, *tensor, &g));
  }
  Optimizer& optimizer = trainer.updater().optimizer();
  for (const auto& [key, tensor] : optimizer.state_dict()) {
    if (key == "t" || key == "epoch" || key.rfind("loss_scaler/", 0) == 0) {
      state.entries.push_back(replicated("optimizer/" + key, tensor));
      continue;
    }
    const auto slash = key.rfind('/');
    TANDEM_CHECK(slash != std::string::npos, "training checkpoint: unexpected optimizer state '", key, "'");
    const UpdatedParam u = updated_param(optimizer, model, params, key.substr(0, slash));
    const GlobalName& g = global_of(names, u.base);
    if (!g.saved) continue;  // a tied copy: its owner's state stands for it
    ShardEntry e = piece("optimizer/" + g.name + key.substr(slash), tensor, &g);
    e.box = params.at(u.base).shape();
    e.begin = u.begin;
    e.end = u.end;
    state.entries.push_back(e);
  }
  // The iterator: once when every rank iterates the same global batches, else per rank (a
  // scattered dataset: such a checkpoint resumes only on as many ranks).
  const IteratorState it = trainer.updater().iterator().state();
  NamedTensors iterator = iterator_tensors(it);
  Fnv1a64 digest;
  for (const auto& [name, tensor] : iterator) digest.bytes(name).bytes(tensor.raw_data(), tensor.nbytes());
  const bool global = same_on_every_rank(comm, digest_hex(digest.digest()));
  const std::string prefix = global ? "iterator/" : "iterator/rank" + std::to_string(comm.rank()) + "/";
  for (auto& [name, tensor] : iterator) {
    ShardEntry e = piece(prefix + name, tensor);
    e.check_replicas = global;
    state.entries.push_back(e);
  }
  state.entries.push_back(replicated("trainer/iteration", scalar(trainer.iteration())));
  const std::string me = "rank" + std::to_string(comm.rank());
  state.entries.push_back(piece("random/" + me, string_to_tensor(global_generator().state())));
  state.entries.push_back(piece("kernel_choices/" + me, string_to_tensor(kernel_choices_text())));
  if (comm.rank() == 0) {
    state.entries.push_back(piece("trainer/elapsed_time", full({}, trainer.elapsed_seconds(), DType::f64)));
    for (const auto& extension : trainer.extensions())
      for (auto& [key, tensor] : extension->state())
        state.entries.push_back(piece("extensions/" + extension->name() + "/" + key, tensor));
  }
  return state;
}

std::string save_training_checkpoint(Communicator& comm, Trainer& trainer, const std::string& root,
                                     std::map<std::string, std::string> info, const CheckpointSaveOptions& options) {
  const TrainingState state = training_state(comm, trainer);
  info["world"] = std::to_string(comm.size());
  return save_sharded_checkpoint(comm, root, trainer.iteration(), state.entries, info, options);
}

std::int64_t load_training_checkpoint(Communicator& comm, Trainer& trainer, const std::string& directory,
                                      const CheckpointLoadOptions& given, CheckpointLoadStats* stats) {
  const CheckpointManifest m = read_sharded_checkpoint_manifest(comm, directory);
  CheckpointLoadOptions options = given;
  const std::shared_ptr<void> whole = trainer.gather_parameters();  // ZeRO-3: sharded again from the loaded values
  Link& model = trainer.model();
  const std::map<std::string, GlobalName> names = global_parameter_names(model);
  std::vector<ShardEntry> requests = model_requests(model, names, m);
  std::map<std::string, Variable> params;
  for (const auto& [path, param] : model.namedparams()) params[path] = param;
  // The optimizer: each parameter it updates (or slice of one) takes the states the checkpoint
  // holds for it.
  Optimizer& optimizer = trainer.updater().optimizer();
  std::vector<std::pair<std::string, std::size_t>> optimizer_entries;  // (local state name, request)
  for (const auto& [name, param] : optimizer.update_params()) {
    const UpdatedParam u = updated_param(optimizer, model, params, name);
    const GlobalName& g = global_of(names, u.base);
    const std::string prefix = "optimizer/" + g.name + "/";
    for (const std::string& key : names_under(m, prefix, true)) {
      ShardEntry e = piece(key, Tensor(param.shape(), m.tensors.at(key).dtype), &g);
      e.box = params.at(u.base).shape();
      e.begin = u.begin;
      e.end = u.end;
      optimizer_entries.emplace_back(name + "/" + key.substr(prefix.size()), requests.size());
      requests.push_back(e);
    }
  }
  // The iterator: the global one, or this rank's (then only under as many ranks).
  const bool global_iterator = m.tensors.count("iterator/epoch") > 0;
  const std::string iterator = global_iterator ? "iterator/" : "iterator/rank" + std::to_string(comm.rank()) + "/";
  TANDEM_CHECK(global_iterator || m.ranks == comm.size(), "load_training_checkpoint: ", directory, " was saved by ",
               m.ranks,
               " ranks each iterating its own share of the data (a scattered dataset): its data order "
               "resumes only on ",
               m.ranks, " ranks, not ", comm.size(),
               " (a trainer whose ranks iterate the same global batches resumes on any number)");
  std::vector<std::string> whole_names = {"optimizer/t", "optimizer/epoch", "trainer/iteration"};
  for (const char* name : {"epoch", "position", "is_new_epoch", "previous_epoch_detail", "order", "rng"})
    whole_names.push_back(iterator + name);
  for (const std::string& name : names_under(m, "optimizer/loss_scaler/", false)) whole_names.push_back(name);
  if (comm.rank() == 0) {
    whole_names.push_back("trainer/elapsed_time");
    for (const auto& extension : trainer.extensions())
      for (const std::string& name : names_under(m, "extensions/" + extension->name() + "/", false))
        whole_names.push_back(name);
  }
  // Random streams and kernel choices: each rank its own under the same number of ranks.
  const std::vector<std::string> streams = names_under(m, "random/", true);
  const std::string me = "rank" + std::to_string(comm.rank());
  const bool same_ranks = m.ranks == comm.size();
  if (!ignored(options, "random/")) {
    if (same_ranks) {
      whole_names.push_back("random/" + me);
    } else {
      for (const std::string& name : streams) whole_names.push_back(name);
    }
  }
  if (same_ranks) whole_names.push_back("kernel_choices/" + me);
  else options.ignore.push_back("kernel_choices/");
  std::map<std::string, std::size_t> at;
  for (const std::string& name : whole_names) {
    TANDEM_CHECK(m.tensors.count(name), "load_training_checkpoint: ", directory, " has no '", name,
                 "' (not a checkpoint of a training run?)");
    at[name] = requests.size();
    requests.push_back(whole_request(m, name));
  }
  const CheckpointLoadStats read = load_sharded_checkpoint(comm, directory, m, requests, options);
  if (stats) *stats = read;
  const auto value = [&](const std::string& name) -> const Tensor& { return requests[at.at(name)].value; };
  const auto integer = [&](const std::string& name) { return value(name).to_vector<std::int64_t>().at(0); };

  NamedTensors state = {{"t", value("optimizer/t")}, {"epoch", value("optimizer/epoch")}};
  for (const std::string& name : names_under(m, "optimizer/loss_scaler/", false))
    state.emplace_back(name.substr(std::string("optimizer/").size()), value(name));
  for (const auto& [local, k] : optimizer_entries) state.emplace_back(local, requests[k].value);
  optimizer.load_state_dict(state);
  IteratorState it;
  it.epoch = integer(iterator + "epoch");
  it.position = integer(iterator + "position");
  it.is_new_epoch = integer(iterator + "is_new_epoch") != 0;
  it.previous_epoch_detail = value(iterator + "previous_epoch_detail").item();
  it.order = value(iterator + "order").to_vector<std::int64_t>();
  it.rng = tensor_to_string(value(iterator + "rng"));
  trainer.updater().iterator().restore(it);
  trainer.updater().set_iteration(integer("trainer/iteration"));
  if (!ignored(options, "random/")) {
    std::string stream;
    if (same_ranks) {
      stream = tensor_to_string(value("random/" + me));
    } else {
      for (const std::string& name : streams) {
        const std::string other = tensor_to_string(value(name));
        TANDEM_CHECK(stream.empty() || other == stream, "load_training_checkpoint: ", directory, " was saved by ",
                     m.ranks, " ranks whose random streams differ ('", streams.front(), "' and '", name,
                     "'); this run has ", comm.size(),
                     " ranks, and a stream cannot be split or joined: ignore "
                     "\"random/\" to start each rank's stream from its seed");
        stream = other;
      }
    }
    if (!stream.empty()) global_generator().set_state(stream);
  }
  if (same_ranks) pin_kernel_choices(tensor_to_string(value("kernel_choices/" + me)));
  if (comm.rank() == 0) {
    trainer.set_elapsed_before(value("trainer/elapsed_time").item());
    for (const auto& extension : trainer.extensions()) {
      const std::string prefix = "extensions/" + extension->name() + "/";
      NamedTensors entries;
      for (const std::string& name : names_under(m, prefix, false))
        entries.emplace_back(name.substr(prefix.size()), value(name));
      extension->restore(entries);
    }
  }
  return m.step;
}

}  // namespace tandem
