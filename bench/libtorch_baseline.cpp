// libtorch_baseline.cpp - what a LibTorch process holds before any workload: the libraries loaded
// and one tiny step of each kind the anchors run (a product, a convolution, an LSTM, backward, an
// optimizer step) at the thread count of ANCHOR_THREAD_LIST (default 1). Prints its peak resident
// set; bench/peak_memory.sh subtracts it from the anchors' peaks, as it subtracts tandem's own.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

int main() {
  const char* threads = std::getenv("ANCHOR_THREAD_LIST");
  torch::set_num_threads(threads ? std::atoi(threads) : 1);
  torch::nn::Linear linear(4, 4);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(1, 2, 3).padding(1));
  torch::nn::LSTM lstm(torch::nn::LSTMOptions(4, 4));
  torch::optim::Adam adam(linear->parameters());
  const torch::Tensor x = torch::rand({2, 4});
  const torch::Tensor image = torch::rand({1, 1, 4, 4});
  const torch::Tensor sequence = torch::rand({3, 2, 4});
  torch::Tensor loss = torch::relu(linear->forward(x)).sum() + conv->forward(image).sum() +
                       std::get<0>(lstm->forward(sequence)).sum();
  loss.backward();
  adam.step();
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) std::printf("%s\n", line.c_str());
  return 0;
}
