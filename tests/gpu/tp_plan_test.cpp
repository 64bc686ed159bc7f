// Tensor-parallel weight slicing without a GPU: the upload's sizing pass over a make-model
// checkpoint — every rank's slice is smaller than the whole, together they hold every split
// tensor once plus the replicated ones on each rank, and sizes that do not divide are refused
// with the quantity named. (Runs on every machine; the sliced forward pass is in tp_test.)
#include <catch2/catch.hpp>

#include "runtime/cuda/device_weights.hpp"
#include "runtime/model/make_model.hpp"
#include "tests/model/model_fixture.hpp"

TEST_CASE("cuda: tensor-parallel weight slices cover the model", "[tp]") {
  using namespace k3;
  test::temp_dir dir("tp_plan");
  model::make_model(test::tiny_options(model::family::kimi_k3), dir.str());
  model::load_options lo;
  lo.progress = 0;
  const auto m = model::model::load(dir.str(), lo);
  const auto full = gpu::device_weights::bytes_for(*m);
  const auto r0 = gpu::device_weights::bytes_for(*m, {0, 2}), r1 = gpu::device_weights::bytes_for(*m, {1, 2});
  CHECK(r0 < full);
  CHECK(r1 < full);
  CHECK(r0 + r1 > full); // replicated parts (embedding, head, router, norms, q_a/kv_a) twice
  // Split parts: the difference between two ranks and one is exactly the replicated bytes.
  const auto replicated = r0 + r1 - full;
  CHECK(replicated > 0);
  CHECK(replicated < full);
  // The tiny model has 2 KDA heads: 3 ranks cannot split them.
  CHECK_THROWS_WITH(gpu::device_weights::bytes_for(*m, {0, 3}), Catch::Contains("does not divide the KDA heads"));
  CHECK_THROWS_WITH(gpu::device_weights::bytes_for(*m, {2, 2}), Catch::Contains("rank outside the group"));
}
