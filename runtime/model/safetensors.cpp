// safetensors reader: mmap + header validation + index resolution.
#include "runtime/model/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>

namespace k3::model {
namespace fs = std::filesystem;

const char* dtype_name(dtype t) noexcept {
  switch (t) {
  case dtype::bf16: return "BF16";
  case dtype::f16: return "F16";
  case dtype::f32: return "F32";
  case dtype::u8: return "U8";
  case dtype::e8m0: return "F8_E8M0";
  }
  return "?";
}
int dtype_size(dtype t) noexcept { return t == dtype::f32 ? 4 : t == dtype::u8 || t == dtype::e8m0 ? 1 : 2; }

std::int64_t tensor_info::numel() const noexcept {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}
std::string tensor_info::shape_str() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

mapped_file::mapped_file(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw checkpoint_error(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw checkpoint_error(path + ": cannot stat");
  }
  size_ = st.st_size;
  if (size_ > 0) {
    void* p = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw checkpoint_error(path + ": mmap failed (" + std::strerror(errno) + ")");
    }
    data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);
}

mapped_file::~mapped_file() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), static_cast<std::size_t>(size_));
  if (copy_map_) ::munmap(copy_map_, copy_len_);
}

const std::uint8_t* mapped_file::copy_to_memory(const std::uint8_t* p, std::int64_t n) {
  if (n <= 0 || !maps(p)) return p;
  if (p + n > data_ + size_) throw checkpoint_error(path_ + ": copy past the end of the file");
  if (!copy_) {
    constexpr std::size_t huge = std::size_t{2} << 20;
    // The data buffer starts after the 8-byte length and the header; shift the copy so that it
    // lands on a cache line (tensors whose offsets are multiples of 64 then are aligned too).
    std::uint64_t header = 0;
    if (size_ >= 8) std::memcpy(&header, data_, 8);
    const std::size_t begin = 8 + static_cast<std::size_t>(std::min<std::uint64_t>(header, static_cast<std::uint64_t>(size_)));
    const std::size_t shift = (64 - begin % 64) % 64;
    // One huge page of slack to align the start, one so that the advised range (rounded up to
    // whole huge pages) stays inside the reservation.
    copy_len_ = static_cast<std::size_t>(size_) + shift + 2 * huge;
    void* a = ::mmap(nullptr, copy_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED) {
      copy_len_ = 0;
      throw checkpoint_error(path_ + ": cannot reserve " + std::to_string(size_) + " bytes of memory for the weights (" +
                             std::strerror(errno) + ")");
    }
    copy_map_ = a;
    auto* aligned = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(a) + huge - 1) / huge * huge);
#ifdef MADV_HUGEPAGE
    ::madvise(aligned, (static_cast<std::size_t>(size_) + shift + huge - 1) / huge * huge, MADV_HUGEPAGE);
#endif
    copy_ = aligned + shift;
  }
  const std::int64_t off = p - data_;
  std::memcpy(copy_ + off, p, static_cast<std::size_t>(n));
  // Drop the file pages that lie wholly inside the range from this mapping (RSS); a neighbour
  // not yet copied keeps its partly shared first and last page.
  static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t lo = (reinterpret_cast<std::uintptr_t>(p) + page - 1) / page * page;
  const std::uintptr_t hi = (reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(n)) / page * page;
  if (lo < hi) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  return copy_ + off;
}

namespace {

constexpr std::int64_t max_header = 100 << 20; // the Rust reference's limit

dtype parse_dtype(std::string_view s, const std::string& where) {
  if (s == "BF16") return dtype::bf16;
  if (s == "F16") return dtype::f16;
  if (s == "F32") return dtype::f32;
  if (s == "U8") return dtype::u8;
  if (s == "F8_E8M0") return dtype::e8m0;
  throw checkpoint_error(where + ": dtype " + std::string(s) + " is not supported (BF16, F16, F32, U8, F8_E8M0)");
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw checkpoint_error(p.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

} // namespace

void read_safetensors_header(const mapped_file& file, std::vector<tensor_info>& out) {
  parse_safetensors(file.data(), file.size(), file.path(), out);
}

void parse_safetensors(const std::uint8_t* bytes, std::int64_t size, const std::string& path, std::vector<tensor_info>& out) {
  if (size < 8) throw checkpoint_error(path + ": truncated (shorter than the 8-byte header length)");
  std::uint64_t n = 0;
  std::memcpy(&n, bytes, 8); // little-endian on every supported host
  if (n == 0 || n > static_cast<std::uint64_t>(max_header) || static_cast<std::int64_t>(n) > size - 8)
    throw checkpoint_error(path + ": corrupt header (length " + std::to_string(n) + " does not fit the file of " +
                           std::to_string(size) + " bytes)");
  const auto* hdr = reinterpret_cast<const char*>(bytes + 8);
  const std::int64_t data_begin = 8 + static_cast<std::int64_t>(n);
  const std::int64_t data_size = size - data_begin;

  simdjson::dom::parser parser;
  simdjson::dom::object obj;
  const simdjson::padded_string padded(hdr, n);
  if (auto err = parser.parse(padded).get(obj))
    throw checkpoint_error(path + ": corrupt header (" + simdjson::error_message(err) + ")");

  struct span {
    std::int64_t b, e;
    std::size_t idx;
  };
  std::vector<span> spans;
  const std::size_t first = out.size();
  for (auto [key, val] : obj) {
    if (key == "__metadata__") continue;
    const std::string where = path + ": tensor " + std::string(key);
    simdjson::dom::object t;
    if (val.get(t)) throw checkpoint_error(where + ": header entry is not an object");
    std::string_view dt;
    simdjson::dom::array shape, offs;
    if (t["dtype"].get(dt) || t["shape"].get(shape) || t["data_offsets"].get(offs))
      throw checkpoint_error(where + ": header entry needs dtype, shape and data_offsets");
    tensor_info info;
    info.name = std::string(key);
    info.type = parse_dtype(dt, where);
    std::int64_t elements = 1;
    for (auto d : shape) {
      std::int64_t v;
      if (d.get(v) || v < 0 || v > (1ll << 40)) throw checkpoint_error(where + ": bad shape entry");
      // The element count must fit (a shape's product can overflow long before any entry does).
      if (v > 0 && elements > (1ll << 50) / v) throw checkpoint_error(where + ": shape " + std::string("is too large"));
      elements *= v;
      info.shape.push_back(v);
    }
    std::int64_t ob = -1, oe = -1;
    int k = 0;
    for (auto o : offs) {
      std::int64_t v;
      if (o.get(v) || v < 0) throw checkpoint_error(where + ": bad data_offsets");
      (k == 0 ? ob : oe) = v;
      ++k;
    }
    if (k != 2 || oe < ob) throw checkpoint_error(where + ": data_offsets must be [begin, end] with begin ≤ end");
    const std::int64_t need = info.numel() * dtype_size(info.type);
    if (oe - ob != need)
      throw checkpoint_error(where + ": data_offsets span " + std::to_string(oe - ob) + " bytes but " + dt.data() +
                             " " + info.shape_str() + " needs " + std::to_string(need));
    if (oe > data_size)
      throw checkpoint_error(where + ": data ends at byte " + std::to_string(data_begin + oe) + " but the file has " +
                             std::to_string(size) + " (truncated or out-of-range offset)");
    info.data = bytes + data_begin + ob;
    info.nbytes = need;
    info.file = &path;
    spans.push_back({ob, oe, out.size()});
    out.push_back(std::move(info));
  }
  std::sort(spans.begin(), spans.end(), [](const span& a, const span& b) { return a.b < b.b; });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].b < spans[i - 1].e && spans[i].e > spans[i].b)
      throw checkpoint_error(path + ": tensors " + out[spans[i - 1].idx].name + " and " + out[spans[i].idx].name +
                             " overlap in the data buffer");
  (void)first;
}

std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& where,
                                                           std::vector<std::string>& files) {
  std::map<std::string, std::string> weight_map;
  simdjson::dom::parser parser;
  simdjson::dom::object root, wm;
  const simdjson::padded_string padded(text);
  if (auto err = parser.parse(padded).get(root))
    throw checkpoint_error(where + ": not valid JSON (" + simdjson::error_message(err) + ")");
  if (root["weight_map"].get(wm)) throw checkpoint_error(where + ": missing weight_map object");
  for (auto [k, v] : wm) {
    std::string_view f;
    if (v.get(f)) throw checkpoint_error(where + ": weight_map[\"" + std::string(k) + "\"] is not a file name");
    if (f.empty() || f.find('/') != std::string_view::npos || f.find("..") != std::string_view::npos)
      throw checkpoint_error(where + ": weight_map[\"" + std::string(k) + "\"] names a path outside the model directory");
    weight_map.emplace(std::string(k), std::string(f));
    if (std::find(files.begin(), files.end(), f) == files.end()) files.emplace_back(f);
  }
  if (files.empty()) throw checkpoint_error(where + ": weight_map is empty");
  return weight_map;
}

checkpoint checkpoint::open(const std::string& dir) {
  checkpoint c;
  const fs::path d(dir);
  const fs::path index = d / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map; // tensor -> file (sharded only)
  std::vector<std::string> files;
  if (fs::exists(index)) {
    weight_map = parse_safetensors_index(read_text(index), index.string(), files);
  } else if (fs::exists(d / "model.safetensors")) {
    files.emplace_back("model.safetensors");
  } else {
    throw checkpoint_error(dir + ": no model.safetensors.index.json or model.safetensors");
  }

  std::vector<tensor_info> all;
  for (const auto& f : files) {
    const auto p = (d / f).string();
    if (!fs::exists(p)) throw checkpoint_error(p + ": listed in model.safetensors.index.json but missing");
    c.files_.push_back(std::make_unique<mapped_file>(p));
    read_safetensors_header(*c.files_.back(), all);
  }
  for (auto& t : all) {
    if (!weight_map.empty()) {
      auto it = weight_map.find(t.name);
      if (it == weight_map.end())
        throw checkpoint_error(*t.file + ": tensor " + t.name + " is not listed in model.safetensors.index.json");
      if ((d / it->second).string() != *t.file)
        throw checkpoint_error(*t.file + ": tensor " + t.name + " is listed under " + it->second + " in the index");
    }
    c.total_bytes_ += t.nbytes;
    const std::string name = t.name;
    if (!c.tensors_.emplace(name, std::move(t)).second)
      throw checkpoint_error(dir + ": tensor " + name + " appears in more than one shard");
    c.consumed_[name] = false;
  }
  for (const auto& [name, f] : weight_map)
    if (!c.tensors_.count(name))
      throw checkpoint_error((d / f).string() + ": tensor " + name + " is in the index but not in the file");
  return c;
}

const tensor_info* checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const tensor_info& checkpoint::take(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw checkpoint_error("checkpoint: missing tensor " + name);
  consumed_[name] = true;
  return it->second;
}

const tensor_info* checkpoint::take_optional(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return nullptr;
  consumed_[name] = true;
  return &it->second;
}

void checkpoint::skip(const std::string& name) { consumed_[name] = true; }

const tensor_info& checkpoint::copy_to_memory(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw checkpoint_error("checkpoint: missing tensor " + name);
  tensor_info& t = it->second;
  for (const auto& f : files_)
    if (f->maps(t.data)) {
      t.data = f->copy_to_memory(t.data, t.nbytes);
      break;
    }
  return t;
}

std::vector<std::string> checkpoint::unconsumed() const {
  std::vector<std::string> out;
  for (const auto& [name, used] : consumed_)
    if (!used) out.push_back(name);
  return out;
}

} // namespace k3::model
