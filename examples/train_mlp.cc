// Demo: trains a 784-100-10 MLP with plain SGD on a synthetic, learnable classification task
// of Fashion-MNIST size (784 features, 10 classes), and prints the loss falling and the
// held-out accuracy rising. Labels come from a fixed random "teacher" function, so a student
// network can learn them. (The real Fashion-MNIST trainer, model-parallel over MPI ranks,
// replaces this demo once the data and comm layers exist.)
//
//   bazel run //examples:train_mlp -- --epochs 5 --batch 100 --lr 0.1
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "core/ops.h"

using namespace tandem;

namespace {

struct Options {
  int epochs = 10;
  int batch = 100;
  int units = 100;
  int train_size = 60000;
  int test_size = 10000;
  double lr = 0.1;
  std::uint64_t seed = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("usage: train_mlp [--epochs N] [--batch N] [--units N] [--train-size N] [--test-size N] "
                  "[--lr X] [--seed N]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw Error("train_mlp: flag " + flag + " needs a value (see --help)");
    const char* value = argv[++i];
    char* end = nullptr;
    const double number = std::strtod(value, &end);
    if (end == value || *end != '\0') throw Error("train_mlp: flag " + flag + " needs a number, got '" + value + "'");
    if (flag == "--epochs") o.epochs = static_cast<int>(number);
    else if (flag == "--batch") o.batch = static_cast<int>(number);
    else if (flag == "--units") o.units = static_cast<int>(number);
    else if (flag == "--train-size") o.train_size = static_cast<int>(number);
    else if (flag == "--test-size") o.test_size = static_cast<int>(number);
    else if (flag == "--lr") o.lr = number;
    else if (flag == "--seed") o.seed = static_cast<std::uint64_t>(number);
    else throw Error("train_mlp: unknown flag " + flag + " (see --help)");
  }
  if (o.epochs < 1 || o.batch < 1 || o.units < 1 || o.train_size < o.batch || o.test_size < 1 || !(o.lr > 0))
    throw Error("train_mlp: epochs, batch, units, sizes and lr must be positive, and train-size >= batch");
  return o;
}

constexpr std::int64_t kFeatures = 784, kClasses = 10;

// Inputs ~ N(0, 1); labels = argmax of a fixed random linear teacher, plus a quadratic term
// so that a hidden layer helps.
void make_data(Generator& gen, std::int64_t n, Tensor& x, Tensor& t, const Tensor& w1, const Tensor& w2) {
  x = randn({n, kFeatures}, gen);
  t = argmax(add(matmul(x, w1), mul(square(matmul(x, w2)), 0.5)), 1);
}

Variable lecun_normal(Generator& gen, std::int64_t out, std::int64_t in) {
  return Variable(randn({out, in}, gen, 0, 1.0 / std::sqrt(static_cast<double>(in))), true);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    Generator gen(o.seed);
    const Tensor teacher1 = randn({kFeatures, kClasses}, gen, 0, 1.0 / std::sqrt(784.0));
    const Tensor teacher2 = randn({kFeatures, kClasses}, gen, 0, 1.0 / std::sqrt(784.0));
    Tensor x_train, t_train, x_test, t_test;
    make_data(gen, o.train_size, x_train, t_train, teacher1, teacher2);
    make_data(gen, o.test_size, x_test, t_test, teacher1, teacher2);

    std::vector<Variable> params = {lecun_normal(gen, o.units, kFeatures), Variable(zeros({o.units}), true),
                                    lecun_normal(gen, kClasses, o.units), Variable(zeros({kClasses}), true)};
    auto model = [&](const Variable& x) {
      return F::linear(F::relu(F::linear(x, params[0], params[1])), params[2], params[3]);
    };

    std::printf("train_mlp: %d train / %d test samples, 784-%d-10 MLP, SGD lr %g, batch %d\n", o.train_size,
                o.test_size, o.units, o.lr, o.batch);
    std::printf("%-6s %-12s %-12s %-10s %s\n", "epoch", "train/loss", "test/loss", "test/acc", "time");
    const std::int64_t batches = o.train_size / o.batch;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
      const auto start = std::chrono::steady_clock::now();
      double total = 0;
      for (std::int64_t b = 0; b < batches; ++b) {
        const Variable x(x_train.slice_rows(b * o.batch, (b + 1) * o.batch));
        const Variable t(t_train.slice_rows(b * o.batch, (b + 1) * o.batch));
        for (Variable& p : params) p.cleargrad();
        const Variable loss = F::softmax_cross_entropy(model(x), t);
        loss.backward();
        total += loss.data().item();
        NoGradGuard no_grad;
        for (Variable& p : params) p.set_data(sub(p.data(), mul(p.grad(), o.lr)));
      }
      NoGradGuard no_grad;
      const Variable y = model(Variable(x_test));
      const double test_loss = F::softmax_cross_entropy(y, Variable(t_test)).data().item();
      const double test_acc = F::accuracy(y, Variable(t_test)).data().item();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%-6d %-12.4f %-12.4f %-10.4f %.2fs\n", epoch, total / batches, test_loss, test_acc, seconds);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
