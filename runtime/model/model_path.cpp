#include "runtime/model/model_path.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "runtime/model/make_model.hpp"

namespace k3::model {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string hub_cache() {
  if (auto v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (auto v = env("HF_HOME"); !v.empty()) return v + "/hub";
  if (auto v = env("HOME"); !v.empty()) return v + "/.cache/huggingface/hub";
  return "/root/.cache/huggingface/hub";
}

bool looks_like_hf_id(const std::string& s) {
  const auto slash = s.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < s.size() && s.find('/', slash + 1) == std::string::npos &&
         s[0] != '.' && s.find("..") == std::string::npos;
}

} // namespace

resolved_model resolve_model(const std::string& spec, const std::string& cache_dir) {
  resolved_model r;
  if (spec.empty()) {
    std::string cache = cache_dir;
    if (cache.empty()) {
      if (auto e = env("K3_CACHE_DIR"); !e.empty()) cache = e;
      else if (auto h = env("HOME"); !h.empty()) cache = h + "/.cache/k3serve";
      else cache = "/tmp/k3serve-cache";
    }
    r.dir = cache + "/demo-model";
    r.default_name = "k3-demo";
    r.demo = true;
    // The demo includes a small vision tower; a demo written by an older build without one is
    // rewritten (the text weights come out identical: every tensor is seeded by its name).
    bool stale = !fs::exists(r.dir + "/config.json");
    if (!stale) {
      std::ifstream in(r.dir + "/config.json");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      stale = text.find("\"vision_config\"") == std::string::npos;
    }
    if (stale) {
      std::fprintf(stderr, "k3: no --model given; writing the demo checkpoint to %s\n", r.dir.c_str());
      make_model_options o;
      o.vision = true;
      make_model(o, r.dir);
    }
    return r;
  }
  if (fs::is_directory(spec)) {
    r.dir = spec;
    r.default_name = fs::path(spec).filename().string();
    if (r.default_name.empty()) r.default_name = fs::path(spec).parent_path().filename().string();
    return r;
  }
  if (looks_like_hf_id(spec)) {
    const std::string org = spec.substr(0, spec.find('/')), name = spec.substr(spec.find('/') + 1);
    const fs::path repo = fs::path(hub_cache()) / ("models--" + org + "--" + name);
    const fs::path snaps = repo / "snapshots";
    std::error_code ec;
    std::string main_ref;
    if (std::ifstream ref(repo / "refs" / "main"); ref) std::getline(ref, main_ref);
    fs::path best;
    fs::file_time_type best_time{};
    if (fs::is_directory(snaps, ec))
      for (const auto& e : fs::directory_iterator(snaps, ec)) {
        if (!fs::exists(e.path() / "config.json")) continue;
        if (!main_ref.empty() && e.path().filename() == main_ref) {
          best = e.path();
          break;
        }
        const auto t = fs::last_write_time(e.path(), ec);
        if (best.empty() || t > best_time) best = e.path(), best_time = t;
      }
    if (!best.empty()) {
      r.dir = best.string();
      r.default_name = spec;
      return r;
    }
    throw std::invalid_argument("--model " + spec + ": no local copy of this Hugging Face model (looked for " +
                                snaps.string() + "/*/config.json). k3serve does not download weights: fetch them "
                                "first, e.g. `hf download " + spec + "` (or `huggingface-cli download " + spec +
                                "`), then run again, or pass the checkpoint directory");
  }
  throw std::invalid_argument("--model " + spec + ": no such directory (give a checkpoint directory, a Hugging Face id "
                              "such as moonshotai/Kimi-K3 that is in the local Hugging Face cache, or nothing for the demo)");
}

} // namespace k3::model
