// The listener: accept loop that survives every accept error, the connection cap, the
// open-file limit, the preparation pool, and the SIGTERM drain.
#include "net/http_server.hpp"

#include <cerrno>
#include <cstdio>
#include <functional>
#include <thread>

#include <sys/resource.h>

#include "net/http_internal.hpp"

namespace k3::net {

namespace {

int pool_threads(int configured) {
  if (configured > 0) return configured;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(2, cores / 4);
}

/// Raises RLIMIT_NOFILE's soft limit to the hard limit; returns the soft limit now in force.
long raise_nofile() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  return rl.rlim_cur == RLIM_INFINITY ? 1 << 20 : static_cast<long>(rl.rlim_cur);
}

bool out_of_descriptors(const beast::error_code& ec) {
  const int v = ec.value();
  return ec.category() == asio::error::get_system_category() && (v == EMFILE || v == ENFILE || v == ENOBUFS || v == ENOMEM);
}

void do_accept(http_server::impl& core) {
  core.acceptor.async_accept(asio::make_strand(core.ioc), [&core](beast::error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || !core.acceptor.is_open()) return; // closed on purpose
    if (ec) {
      // Never stop accepting. Out of descriptors: the pending connection stays in the backlog;
      // wait for some to close (log at most once a second). Anything else (ECONNABORTED, a
      // reset before accept): just go on.
      const auto now = steady::now();
      if (now - core.last_accept_log > std::chrono::seconds(1)) {
        std::fprintf(stderr, "k3 serve: accept failed: %s (%d connections open)%s\n", ec.message().c_str(),
                     core.connections.load(), out_of_descriptors(ec) ? "; retrying in 50 ms" : "");
        core.last_accept_log = now;
      }
      if (out_of_descriptors(ec)) {
        core.accept_retry.expires_after(std::chrono::milliseconds(50));
        core.accept_retry.async_wait([&core](beast::error_code e) {
          if (!e) do_accept(core);
        });
        return;
      }
      return do_accept(core);
    }
    // Token streams are many small writes: with Nagle's algorithm a chunk could wait for the
    // client's delayed ACK (~40 ms on Linux) — a WebSocket cancel took 44 ms to end a stream of
    // the demo model (~130 more tokens), under 1 ms with TCP_NODELAY. Failure to set it is harmless.
    beast::error_code nodelay_ec;
    s.set_option(tcp::no_delay(true), nodelay_ec);
    if (core.connections.load() >= core.max_connections) reject_connection(std::move(s), core);
    else start_http_session(std::move(s), core, connection_slot(core));
    do_accept(core);
  });
}

} // namespace

http_server::impl::impl(llm_engine& e, server_config c, std::shared_ptr<const vision::vision_model> vision)
    : frontend(e, std::move(c), std::move(vision)), ioc(cfg.http_threads), acceptor(ioc), signals(ioc, SIGTERM, SIGINT),
      accept_retry(ioc), prep(static_cast<std::size_t>(pool_threads(cfg.tokenizer_threads))) {
  if (vision_enabled()) fetcher = std::make_unique<media_fetcher>(media_policy_of(cfg));
}

http_server::impl::~impl() {
  fetcher.reset(); // stops downloads first: their callbacks post to the pools
  prep.stop();
  prep.join();
  vision_pool.stop();
  vision_pool.join();
}

http_server::http_server(llm_engine& eng, server_config cfg, std::shared_ptr<const vision::vision_model> vision)
    : impl_(std::make_unique<impl>(eng, std::move(cfg), std::move(vision))) {}

http_server::~http_server() = default;

std::uint16_t http_server::port() const noexcept { return impl_->bound_port; }

int http_server::run() {
  auto& c = *impl_;
  const long nofile = raise_nofile();
  // Leave descriptors for the model's shards, logs, the pool's pipes and the listener itself.
  c.max_connections = c.cfg.max_connections > 0 ? c.cfg.max_connections : static_cast<int>(std::max(16L, nofile - 64));
  const auto addr = asio::ip::make_address(c.cfg.host);
  const tcp::endpoint ep(addr, static_cast<std::uint16_t>(c.cfg.port));
  c.acceptor.open(ep.protocol());
  c.acceptor.set_option(asio::socket_base::reuse_address(true));
  c.acceptor.bind(ep);
  c.acceptor.listen(asio::socket_base::max_listen_connections);
  c.bound_port = c.acceptor.local_endpoint().port();
  std::printf("k3 serve: listening on http://%s:%u (model %s, max_model_len %lld)\n", c.cfg.host.c_str(),
              static_cast<unsigned>(c.bound_port), c.served.c_str(), static_cast<long long>(c.max_model_len()));
  std::fflush(stdout);
  std::fprintf(stderr, "k3 serve: up to %d connections (open-file limit %ld), %d I/O thread(s), %d preparation thread(s)\n",
               c.max_connections, nofile, c.cfg.http_threads, pool_threads(c.cfg.tokenizer_threads));
  do_accept(c);

  // SIGTERM / SIGINT: stop taking requests (503, /health 503), drain in-flight ones. At the
  // deadline the engine ends what is left with shutting_down (clients get a 503 error object,
  // streamed or not); the process exits once those are written, or 2 s later at most.
  asio::steady_timer drain_timer(c.ioc);
  steady::time_point deadline;
  bool cut = false;
  std::function<void()> poll = [&] {
    const auto now = steady::now();
    const bool drained = c.active == 0 && c.unflushed == 0; // answered and written out
    if (drained || now >= deadline + std::chrono::seconds(2)) {
      std::fprintf(stderr, "k3 serve: %s, exiting\n", drained ? "drained" : "shutdown timeout with requests in flight");
      c.ioc.stop();
      return;
    }
    if (now >= deadline && !cut) {
      cut = true;
      std::fprintf(stderr, "k3 serve: drain timeout; ending %d request(s) with 503 shutting_down\n", c.active.load());
      c.eng.stop_requests();
    }
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([&](beast::error_code) { poll(); });
  };
  c.signals.async_wait([&](beast::error_code ec, int sig) {
    if (ec) return;
    std::fprintf(stderr, "k3 serve: signal %d, draining %d in-flight request(s) (timeout %.0f s)\n", sig, c.active.load(),
                 c.cfg.shutdown_timeout);
    c.draining = true; // keep accepting: /health answers 503 and new requests get 503 while draining
    deadline = steady::now() + std::chrono::milliseconds(static_cast<long long>(c.cfg.shutdown_timeout * 1000));
    poll();
  });

  std::vector<std::thread> threads;
  for (int i = 1; i < c.cfg.http_threads; ++i) threads.emplace_back([&] { c.ioc.run(); });
  c.ioc.run();
  for (auto& t : threads) t.join();
  return 0;
}

} // namespace k3::net
