// checkpoint: look into, compare and convert sharded checkpoints (comm/checkpoint).
//
//   checkpoint inspect DIR                       step, ranks, layout, every tensor and the files
//   checkpoint compare DIR_A DIR_B [--prefix P] [--rtol R]
//       the tensors whose names start with P (default: model/ and optimizer/) in both, bit for bit
//       (or within a relative R of the largest magnitude of each tensor); exit status 1 if not
//   checkpoint to-npz DIR OUT.npz [--prefix P]   the tensors under P (default all), whole, for numpy
//   checkpoint to-safetensors DIR OUT.safetensors [--prefix P] [--names MAP]
//       the model's tensors (P default model/, removed from the names) for PyTorch and Hugging Face;
//       MAP: lines "tandem_name external_name" (names not in MAP keep theirs)
//   checkpoint from-npz IN.npz ROOT STEP [--prefix P]
//   checkpoint from-safetensors IN.safetensors ROOT STEP [--prefix P] [--names MAP]
//       a one-process checkpoint <ROOT>/step_<STEP> of those tensors (P, default model/, added to
//       the names; MAP read from external to tandem names), which a trainer's --init-checkpoint
//       loads under any layout
//
//   bazel run //tools:checkpoint -- inspect $PWD/result/checkpoints/step_40
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "comm/checkpoint/sharded_checkpoint.h"
#include "comm/transport/communicator.h"
#include "layers/serializers/npz.h"
#include "layers/serializers/safetensors.h"

namespace {

using namespace tandem;

int usage() {
  std::fprintf(stderr,
               "usage: checkpoint inspect DIR\n"
               "       checkpoint compare DIR_A DIR_B [--prefix P] [--rtol R]\n"
               "       checkpoint to-npz DIR OUT.npz [--prefix P]\n"
               "       checkpoint to-safetensors DIR OUT.safetensors [--prefix P] [--names MAP]\n"
               "       checkpoint from-npz IN.npz ROOT STEP [--prefix P]\n"
               "       checkpoint from-safetensors IN.safetensors ROOT STEP [--prefix P] [--names MAP]\n");
  return 2;
}

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
};

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      TANDEM_CHECK(i + 1 < argc, "checkpoint: ", a, " needs a value");
      args.options[a.substr(2)] = argv[++i];
    } else {
      args.positional.push_back(a);
    }
  }
  for (const auto& [key, value] : args.options)
    TANDEM_CHECK(key == "prefix" || key == "rtol" || key == "names", "checkpoint: unknown option --", key);
  return args;
}

std::string option(const Args& args, const std::string& key, const std::string& fallback) {
  const auto it = args.options.find(key);
  return it == args.options.end() ? fallback : it->second;
}

// "tandem_name external_name" per line; reversed: external to tandem.
std::map<std::string, std::string> name_map(const Args& args, bool reversed) {
  std::map<std::string, std::string> out;
  const std::string path = option(args, "names", "");
  if (path.empty()) return out;
  std::ifstream in(path);
  TANDEM_CHECK(in, "checkpoint: cannot read the name map ", path);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::string ours, theirs, extra;
    if (!(fields >> ours)) continue;
    TANDEM_CHECK(fields >> theirs && !(fields >> extra), "checkpoint: ", path, " line ", number,
                 ": expected \"tandem_name external_name\"");
    TANDEM_CHECK(out.emplace(reversed ? theirs : ours, reversed ? ours : theirs).second, "checkpoint: ", path, " line ",
                 number, ": '", reversed ? theirs : ours, "' is mapped twice");
  }
  return out;
}

std::vector<std::string> names_under(const CheckpointManifest& m, const std::vector<std::string>& prefixes) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.tensors)
    for (const std::string& p : prefixes)
      if (name.rfind(p, 0) == 0) {
        out.push_back(name);
        break;
      }
  return out;
}

int inspect(const Args& args) {
  TANDEM_CHECK(args.positional.size() == 1, "checkpoint inspect DIR");
  const std::string dir = args.positional[0];
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  std::printf("%s: step %lld, saved by %d ranks, %.3f MB in %zu files, %zu tensors\n", dir.c_str(),
              static_cast<long long>(m.step), m.ranks, m.total_bytes() / 1e6, m.files.size(), m.tensors.size());
  for (const auto& [key, value] : m.info) std::printf("  %s: %s\n", key.c_str(), value.c_str());
  for (const CheckpointFile& f : m.files) std::printf("  file %s: %.3f MB\n", f.path.c_str(), f.bytes / 1e6);
  for (const auto& [name, t] : m.tensors) {
    std::ostringstream shape;
    shape << t.shape;
    std::printf("  %-48s %-4s %-16s %zu chunk%s\n", name.c_str(), dtype_name(t.dtype), shape.str().c_str(),
                t.chunks.size(), t.chunks.size() == 1 ? "" : "s");
  }
  return 0;
}

int compare(const Args& args) {
  TANDEM_CHECK(args.positional.size() == 2, "checkpoint compare DIR_A DIR_B");
  const std::string a = args.positional[0], b = args.positional[1];
  const double rtol = std::stod(option(args, "rtol", "0"));
  const std::string prefix = option(args, "prefix", "");
  const std::vector<std::string> prefixes =
      prefix.empty() ? std::vector<std::string>{"model/", "optimizer/"} : std::vector<std::string>{prefix};
  const CheckpointManifest ma = read_checkpoint_manifest(a), mb = read_checkpoint_manifest(b);
  const std::vector<std::string> na = names_under(ma, prefixes), nb = names_under(mb, prefixes);
  int differ = 0;
  if (na != nb) {
    std::printf("the tensor names differ: %zu in %s, %zu in %s\n", na.size(), a.c_str(), nb.size(), b.c_str());
    for (const std::string& n : na)
      if (!mb.tensors.count(n)) std::printf("  only in the first: %s\n", n.c_str());
    for (const std::string& n : nb)
      if (!ma.tensors.count(n)) std::printf("  only in the second: %s\n", n.c_str());
    return 1;
  }
  double worst = 0;
  std::string worst_name;
  for (const std::string& name : na) {
    const Tensor x = read_checkpoint_tensor(a, ma, name), y = read_checkpoint_tensor(b, mb, name);
    if (x.shape() != y.shape() || x.dtype() != y.dtype()) {
      std::printf("%s: %s against %s\n", name.c_str(), x.description().c_str(), y.description().c_str());
      ++differ;
      continue;
    }
    const std::vector<double> u = x.to_vector<double>(), v = y.to_vector<double>();
    double scale = 0, diff = 0;
    for (std::size_t i = 0; i < u.size(); ++i) {
      scale = std::max(scale, std::abs(u[i]));
      diff = std::max(diff, std::abs(u[i] - v[i]));
    }
    const bool same_bits = x.nbytes() == y.nbytes() && std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
    const double relative = scale > 0 ? diff / scale : diff;
    if (relative > worst) worst = relative, worst_name = name;
    if (rtol == 0 ? !same_bits : relative > rtol) {
      std::printf("%s: differs (largest difference %.3g, %.3g of its largest magnitude)\n", name.c_str(), diff,
                  relative);
      ++differ;
    }
  }
  std::printf("compared %zu tensors: %d differ%s; largest relative difference %.3g%s%s\n", na.size(), differ,
              rtol == 0 ? " in their bits" : "", worst, worst_name.empty() ? "" : " in ", worst_name.c_str());
  return differ == 0 ? 0 : 1;
}

int export_tensors(const Args& args, bool safetensors) {
  TANDEM_CHECK(args.positional.size() == 2, "checkpoint to-", safetensors ? "safetensors" : "npz", " DIR OUT");
  const std::string dir = args.positional[0], out = args.positional[1];
  const std::string prefix = option(args, "prefix", safetensors ? "model/" : "");
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  const std::map<std::string, std::string> names = name_map(args, false);
  NamedTensors tensors;
  for (const std::string& name : names_under(m, {prefix})) {
    std::string external = safetensors ? name.substr(prefix.size()) : name;
    if (names.count(external)) external = names.at(external);
    tensors.emplace_back(external, read_checkpoint_tensor(dir, m, name));
  }
  TANDEM_CHECK(!tensors.empty(), "checkpoint: ", dir, " has no tensor under '", prefix, "'");
  if (safetensors) {
    SafetensorsMetadata metadata = {{"format", "pt"}, {"step", std::to_string(m.step)}};
    if (m.info.count("layout")) metadata["tandem_layout"] = m.info.at("layout");
    write_safetensors(out, tensors, metadata);
  } else {
    write_npz(out, tensors);
  }
  std::printf("checkpoint: %zu tensors of %s -> %s\n", tensors.size(), dir.c_str(), out.c_str());
  return 0;
}

int import_tensors(const Args& args, bool safetensors) {
  TANDEM_CHECK(args.positional.size() == 3, "checkpoint from-", safetensors ? "safetensors" : "npz", " IN ROOT STEP");
  const std::string in = args.positional[0], root = args.positional[1];
  const std::int64_t step = std::stoll(args.positional[2]);
  const std::string prefix = option(args, "prefix", "model/");
  const std::map<std::string, std::string> names = name_map(args, true);
  std::vector<ShardEntry> entries;
  for (auto& [name, tensor] : safetensors ? read_safetensors(in) : read_npz(in)) {
    ShardEntry e;
    e.name = prefix + (names.count(name) ? names.at(name) : name);
    e.value = tensor;
    e.box = tensor.shape();
    entries.push_back(e);
  }
  const auto comm = create_communicator("naive");
  const std::string dir = save_sharded_checkpoint(*comm, root, step, entries, {{"layout", "imported from " + in}});
  std::printf("checkpoint: %zu tensors of %s -> %s\n", entries.size(), in.c_str(), dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string command = argv[1];
  try {
    const Args args = parse(argc, argv);
    if (command == "inspect") return inspect(args);
    if (command == "compare") return compare(args);
    if (command == "to-npz") return export_tensors(args, false);
    if (command == "to-safetensors") return export_tensors(args, true);
    if (command == "from-npz") return import_tensors(args, false);
    if (command == "from-safetensors") return import_tensors(args, true);
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint: %s\n", e.what());
    return 1;
  }
}
