// http_server::impl::prepare_async: the three stages of a generation request's preparation,
// none on an I/O thread and none waiting for another: downloads (media_fetcher's thread,
// asynchronous), parse/decode/render/encode (prep pool), the vision tower (vision_pool).
#include <mutex>
#include <utility>

#include "net/http_internal.hpp"

namespace k3::net {

namespace {

struct fetch_state {
  std::mutex mu;
  std::size_t left = 0;
  frontend::fetched_media bytes;
  std::optional<api_error> error;
};

template <class Fn>
void guarded(const std::function<void(http_server::impl::prepared_ptr, std::optional<api_error>)>& done, Fn&& fn) {
  try {
    fn();
  } catch (const api_error& e) {
    done(nullptr, e);
  } catch (const std::exception& e) {
    done(nullptr, api_error(500, std::string("internal error: ") + e.what(), "", "internal_error"));
  }
}

} // namespace

void http_server::impl::prepare_async(std::string target, std::shared_ptr<const json::value> body,
                                      std::function<void(prepared_ptr, std::optional<api_error>)> done) {
  // Stage 2 (prep pool) and 3 (vision thread), given the downloaded bytes.
  auto finish = [this, target, body, done](std::shared_ptr<fetch_state> fs) {
    guarded(done, [&] {
      if (fs && fs->error) throw *fs->error;
      auto p = std::make_shared<frontend::prepared>(prepare(target, *body, fs ? &fs->bytes : nullptr));
      if (p->images.empty()) return done(p, std::nullopt);
      asio::post(vision_pool, [this, p, done] {
        guarded(done, [&] {
          encode_images(*p);
          done(p, std::nullopt);
        });
      });
    });
  };
  std::vector<std::pair<std::string, std::string>> remote;
  bool failed = true;
  guarded(done, [&] {
    remote = remote_media(target, *body);
    failed = false;
  });
  if (failed) return;
  if (remote.empty() || !fetcher) return finish(nullptr);
  auto fs = std::make_shared<fetch_state>();
  fs->left = remote.size();
  for (const auto& [param, url] : remote)
    fetcher->fetch(url, param, [this, fs, finish, param = param](media_fetcher::result r) {
      std::lock_guard lk(fs->mu);
      if (r.error && !fs->error) fs->error = std::move(r.error);
      else if (!r.error) fs->bytes[param] = std::move(r.bytes);
      if (--fs->left == 0) asio::post(prep, [fs, finish] { finish(fs); });
    });
}

} // namespace k3::net
