#pragma once
// A checkpoint's vision side, ready to encode: the configuration, the memory-mapped
// checkpoint the tower's weights point into, and the tower. nullptr from load() when the
// checkpoint has no vision_config (text-only models).

#include <memory>
#include <string>

#include "runtime/model/safetensors.hpp"
#include "runtime/vision/tower.hpp"
#include "runtime/vision/vision_config.hpp"

namespace k3::vision {

struct vision_model {
  vision_config config;
  model::checkpoint ckpt;
  std::unique_ptr<tower> net;

  /// Throws config_error / checkpoint_error naming the key or tensor.
  [[nodiscard]] static std::shared_ptr<vision_model> load(const std::string& dir, bool exact = false) {
    auto c = vision_config::load(dir);
    if (!c) return nullptr;
    auto vm = std::make_shared<vision_model>();
    vm->config = *c;
    vm->ckpt = model::checkpoint::open(dir);
    vm->net = tower::load(vm->ckpt, vm->config, exact);
    return vm;
  }
};

} // namespace k3::vision
