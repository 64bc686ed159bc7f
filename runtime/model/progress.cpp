#include "runtime/model/progress.hpp"

#include <cstdio>

namespace k3::model {

progress_bar::progress_bar(std::string label, std::int64_t total_items, std::int64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_items_(total_items), total_bytes_(total_bytes), enabled_(enabled) {}

progress_bar::~progress_bar() { finish(); }

void progress_bar::add(std::int64_t items, std::int64_t bytes) {
  items_ += items;
  bytes_ += bytes;
  draw(false);
}

void progress_bar::finish() {
  if (done_) return;
  done_ = true;
  if (!enabled_) return;
  draw(true);
  std::fputc('\n', stderr);
}

void progress_bar::draw(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int width = 30;
  const double frac = total_bytes_ > 0 ? static_cast<double>(bytes_) / static_cast<double>(total_bytes_) : 1.0;
  const int fill = static_cast<int>(frac * width + 0.5);
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < fill ? '=' : ' ';
  bar[width] = '\0';
  std::fprintf(stderr, "\r%s %lld/%lld tensors %.2f/%.2f GB [%s] %3.0f%%", label_.c_str(),
               static_cast<long long>(items_), static_cast<long long>(total_items_), bytes_ / 1e9,
               total_bytes_ / 1e9, bar, frac * 100.0);
  std::fflush(stderr);
}

} // namespace k3::model
