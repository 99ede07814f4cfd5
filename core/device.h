// Where a tensor's storage lives. Every tensor carries one; operations check that their
// operands agree and dispatch to that device's backend (core/backend.h).
#pragma once

#include <ostream>
#include <string>

namespace tandem {

enum class DeviceType { cpu, cuda };

class Device {
 public:
  Device() = default;
  static Device cpu() { return Device(DeviceType::cpu, 0); }
  static Device cuda(int index) { return Device(DeviceType::cuda, index); }

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::cpu; }
  bool is_cuda() const { return type_ == DeviceType::cuda; }
  std::string str() const;  // "cpu" or "cuda:0"

  bool operator==(const Device& other) const { return type_ == other.type_ && index_ == other.index_; }
  bool operator!=(const Device& other) const { return !(*this == other); }

 private:
  Device(DeviceType type, int index) : type_(type), index_(index) {}
  DeviceType type_ = DeviceType::cpu;
  int index_ = 0;
};

inline std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

}  // namespace tandem
