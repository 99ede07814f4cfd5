#include "core/process_label.h"

#include <cstdlib>
#include <mutex>

namespace tandem {

namespace {
std::mutex label_mutex;
std::string& label() {
  static auto* text = new std::string();  // never destroyed: errors may be built during exit
  return *text;
}
}  // namespace

void set_process_label(std::string text) {
  std::lock_guard<std::mutex> lock(label_mutex);
  label() = std::move(text);
}

std::string process_where() {
  std::lock_guard<std::mutex> lock(label_mutex);
  return label().empty() ? "" : " on " + label();
}

int launcher_rank() {
  for (const char* name : {"PMI_RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* value = std::getenv(name)) return std::atoi(value);
  return 0;
}

}  // namespace tandem
