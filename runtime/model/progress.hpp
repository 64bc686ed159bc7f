#pragma once
// A one-line progress bar on stderr ("loading 812/1330 tensors 1.21/1.53 GB [=====>    ]"),
// redrawn at most every 100 ms and finished with a newline. Disabled instances do nothing.
// Single-threaded use.

#include <chrono>
#include <cstdint>
#include <string>

namespace k3::model {

class progress_bar {
public:
  progress_bar(std::string label, std::int64_t total_items, std::int64_t total_bytes, bool enabled);
  ~progress_bar();
  void add(std::int64_t items, std::int64_t bytes);
  void finish();

private:
  void draw(bool force);
  std::string label_;
  std::int64_t total_items_, total_bytes_, items_ = 0, bytes_ = 0;
  bool enabled_, done_ = false;
  std::chrono::steady_clock::time_point last_{};
};

} // namespace k3::model
