// [gpu] NCCL communicators formed through actor messages (comm_actor): the unique id made by
// rank 0's actor reaches every rank as a message; then a tensor-parallel all-reduce and an
// expert-parallel all-to-all (dispatch and combine back) over every visible GPU (one rank per
// GPU; with one GPU the collectives run on a communicator of one). Skips without a GPU.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/comm_actor.hpp"
#include "k3/engine.hpp"
#include "kernels/cuda/device.cuh"
#include "tests/support/cuda_test_util.hpp"

namespace {

using namespace k3;

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    actors::add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

} // namespace

TEST_CASE("nccl communicator bootstrapped through actor messages: all-reduce and all-to-all", "[gpu][nccl]") {
  if (test::no_gpu()) return;
  system_fixture fx;
  auto& sys = *fx.sys;
  const int n = std::min(8, cuda::device_count());
  std::vector<actors::comm_actor> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(actors::spawn_comm(sys, r));
  const auto err = actors::nccl_bootstrap(sys, ranks, std::chrono::seconds(60));
  INFO(err);
  REQUIRE(err.empty());
  caf::scoped_actor self{sys};

  // All-reduce: rank r contributes (r + 1)·(i + 1); every rank gets the sum.
  const std::size_t len = 1001;
  std::vector<decltype(self->request(ranks[0], caf::infinite, actors::all_reduce_atom::value, std::vector<float>{}))> ar;
  for (int r = 0; r < n; ++r) {
    std::vector<float> v(len);
    for (std::size_t i = 0; i < len; ++i) v[i] = static_cast<float>((r + 1) * (i + 1));
    ar.push_back(self->request(ranks[static_cast<std::size_t>(r)], std::chrono::seconds(60), actors::all_reduce_atom::value, v));
  }
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (int r = 0; r < n; ++r)
    ar[static_cast<std::size_t>(r)].receive(
        [&](std::vector<float>& got) {
          REQUIRE(got.size() == len);
          for (std::size_t i = 0; i < len; i += 97) CHECK(got[i] == ranks_sum * static_cast<float>(i + 1));
        },
        [&](caf::error& e) { FAIL("all_reduce on rank " << r << ": " << sys.render(e)); });

  // All-to-all (expert dispatch): rank r sends p + 1 rows of width 3 to peer p, each row
  // holding (100·r + p); rank p receives from every r, in rank order.
  const std::int64_t width = 3;
  std::vector<decltype(self->request(ranks[0], caf::infinite, actors::all_to_all_atom::value, std::vector<float>{},
                                     std::vector<std::int64_t>{}, width))>
      aa;
  for (int r = 0; r < n; ++r) {
    std::vector<float> rows;
    std::vector<std::int64_t> counts;
    for (int p = 0; p < n; ++p) {
      counts.push_back(p + 1);
      for (int k = 0; k < (p + 1) * width; ++k) rows.push_back(static_cast<float>(100 * r + p));
    }
    aa.push_back(self->request(ranks[static_cast<std::size_t>(r)], std::chrono::seconds(60), actors::all_to_all_atom::value, rows,
                               counts, width));
  }
  for (int p = 0; p < n; ++p)
    aa[static_cast<std::size_t>(p)].receive(
        [&](std::vector<float>& got) {
          REQUIRE(got.size() == static_cast<std::size_t>(n * (p + 1) * width));
          for (int r = 0; r < n; ++r)
            CHECK(got[static_cast<std::size_t>(r * (p + 1) * width)] == static_cast<float>(100 * r + p));
        },
        [&](caf::error& e) { FAIL("all_to_all on rank " << p << ": " << sys.render(e)); });

  // Misuse is a reply, not a crash: a collective before init, a bad rank.
  auto lone = actors::spawn_comm(sys, 0);
  self->request(lone, std::chrono::seconds(10), actors::all_reduce_atom::value, std::vector<float>{1.f})
      .receive([&](std::vector<float>&) { FAIL("expected an error"); },
               [&](caf::error& e) { CHECK(sys.render(e).find("before comm_init") != std::string::npos); });
  self->request(lone, std::chrono::seconds(10), actors::comm_init_atom::value, actors::nccl_id{std::vector<std::uint8_t>(128, 0)},
                std::int32_t{2}, std::int32_t{5})
      .receive([&](std::string& e) { CHECK(e.find("outside a communicator") != std::string::npos); },
               [&](caf::error& e) { FAIL(sys.render(e)); });
  for (auto& r : ranks) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(lone, caf::exit_reason::user_shutdown);
}
