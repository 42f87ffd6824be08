// The ATen form of the 1-bit arithmetic (what NcclBackend runs on the GPU), checked on CPU tensors
// against the torch-free kernels that MpiBackend uses and the reference tests pin down.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <vector>

#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/comm/onebit_tensor_ops.hpp"
#include "seeded.hpp"

namespace onebit = ds::comm::onebit;
using ds::test::seeded_tensor;

TEST_CASE("tensor pack_signs and unpack_signs agree with the kernels", "[comm]") {
  for (int64_t n : {8, 64, 8 * 1001}) {
    CAPTURE(n);
    at::Tensor x = seeded_tensor(n, n);
    x[0] = 0.0f;  // sign(0) = +1
    std::vector<uint8_t> expected(n / 8);
    onebit::pack_signs(x.data_ptr<float>(), n, expected.data());
    const at::Tensor packed = onebit::pack_signs(x);
    REQUIRE(packed.scalar_type() == at::kByte);
    REQUIRE(packed.numel() == n / 8);
    CHECK(std::equal(expected.begin(), expected.end(), packed.data_ptr<uint8_t>()));

    const at::Tensor rows = at::cat({packed, packed}).view({2, n / 8});
    const at::Tensor decoded = onebit::unpack_signs(rows, at::tensor({0.5f, 2.0f}));
    std::vector<float> kernel_decoded(n);
    onebit::unpack_signs(expected.data(), n, 2.0f, kernel_decoded.data());
    CHECK(at::equal(decoded[1], at::from_blob(kernel_decoded.data(), {n}, at::kFloat)));
    CHECK(at::equal(decoded[0], decoded[1] / 4));
  }
}

TEST_CASE("tensor compress_with_feedback agrees with the kernel", "[comm]") {
  const int64_t n = 8 * 12345;
  const at::Tensor x = seeded_tensor(1, n), error = seeded_tensor(2, n);
  const at::Tensor original_x = x.clone(), kernel_error = error.clone();
  std::vector<uint8_t> kernel_packed(n / 8);
  const float kernel_scale =
      onebit::compress_with_feedback(x.data_ptr<float>(), kernel_error.data_ptr<float>(), n, kernel_packed.data());

  auto [scale, packed] = onebit::compress_with_feedback(x, error);
  CHECK(scale.item<float>() == Approx(kernel_scale).epsilon(1e-7));
  CHECK(at::equal(x, original_x));
  CHECK(at::allclose(error, kernel_error, 0, 1e-7));
  CHECK(std::equal(kernel_packed.begin(), kernel_packed.end(), packed.data_ptr<uint8_t>()));
}
