#pragma once
#include <stdexcept>

namespace k3::sim {

/// Bad simulator input: the message names the file, field or flag and the value.
struct sim_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace k3::sim
