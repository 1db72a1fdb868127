#include "baton_test.h"

#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "ema/ema_kernel.h"

// The fused EMA kernel on its own: threads, chunking and the float formats it converts by hand.
TEST_SUITE("ema") {
  TEST_CASE("the parallel kernel over > 1M elements equals a single-threaded evaluation bit for bit") {
    using baton::ema_kernel::Element;
    const std::vector<std::int64_t> sizes = {300001, 524288, 77, 400000, 1, 65536 * 3 + 5};
    std::vector<std::vector<float>> ema32, w32;
    std::vector<std::vector<float>> ema_bf;
    std::vector<std::vector<std::uint16_t>> w_bf;
    std::vector<double> ema64(250000), w64(250000);
    std::vector<std::int64_t> counters(1000), counters_src(1000);
    std::vector<baton::ema_kernel::Task> tasks;
    std::int64_t total = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t) {
      const auto n = static_cast<std::size_t>(sizes[t]);
      ema32.emplace_back(n);
      w32.emplace_back(n);
      ema_bf.emplace_back(n);
      w_bf.emplace_back(n);
      for (std::size_t i = 0; i < n; ++i) {
        ema32[t][i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i) + static_cast<double>(t)));
        w32[t][i] = static_cast<float>(std::cos(0.003 * static_cast<double>(i)) * 3);
        ema_bf[t][i] = ema32[t][i];
        w_bf[t][i] = c10::BFloat16(w32[t][i]).x;
      }
      total += 2 * sizes[t];
    }
    for (std::size_t i = 0; i < ema64.size(); ++i) {
      ema64[i] = std::sin(static_cast<double>(i));
      w64[i] = std::cos(static_cast<double>(i));
    }
    for (std::size_t i = 0; i < counters.size(); ++i) counters_src[i] = static_cast<std::int64_t>(i * 7);
    REQUIRE(total > 1000000);

    const double s = 0.9993;
    const float a = static_cast<float>(1.0 - s);
    auto expected32 = ema32;
    auto expected_bf = ema_bf;
    auto expected64 = ema64;
    for (std::size_t t = 0; t < sizes.size(); ++t)
      for (std::size_t i = 0; i < expected32[t].size(); ++i) {
        expected32[t][i] = expected32[t][i] + a * (w32[t][i] - expected32[t][i]);
        const float w = static_cast<float>(c10::BFloat16(w_bf[t][i], c10::BFloat16::from_bits()));
        expected_bf[t][i] = expected_bf[t][i] + a * (w - expected_bf[t][i]);
      }
    for (std::size_t i = 0; i < expected64.size(); ++i)
      expected64[i] = expected64[i] + (1.0 - s) * (w64[i] - expected64[i]);

    auto build = [&] {
      std::vector<baton::ema_kernel::Task> out;
      for (std::size_t t = 0; t < sizes.size(); ++t) {
        out.push_back({ema32[t].data(), w32[t].data(), sizes[t], Element::f32, Element::f32, false});
        out.push_back({ema_bf[t].data(), w_bf[t].data(), sizes[t], Element::f32, Element::bf16, false});
      }
      out.push_back({ema64.data(), w64.data(), static_cast<std::int64_t>(ema64.size()), Element::f64, Element::f64,
                     false});
      out.push_back({counters.data(), counters_src.data(), static_cast<std::int64_t>(counters.size() * 8),
                     Element::bytes, Element::bytes, true});
      return out;
    };
    baton::ema_kernel::Plan plan(build());
    CHECK(plan.chunks() > 16);
    const int threads = plan.run(s);
    CHECK(threads == baton::ema_kernel::default_threads());
    // LibTorch lowers OpenMP's default to half the processors; the kernel must still use every one of them.
    if (omp_get_num_procs() >= 2 && !std::getenv("OMP_NUM_THREADS")) CHECK(threads == omp_get_num_procs());

    CHECK((ema32 == expected32));
    CHECK((ema_bf == expected_bf));
    CHECK((ema64 == expected64));
    CHECK((counters == counters_src));

    // A second step with one thread and with several from the same state agrees bit for bit as well.
    auto again32 = ema32;
    auto again64 = ema64;
    CHECK(plan.run(s, 1) == 1);
    auto one_thread32 = ema32;
    auto one_thread64 = ema64;
    ema32 = again32;
    ema64 = again64;
    plan.run(s, 3);
    CHECK((ema32 == one_thread32));
    CHECK((ema64 == one_thread64));
  }

  TEST_CASE("the plain and the prefetching loop agree bit for bit; a large plan times both, then keeps one") {
    using baton::ema_kernel::Element;
    using baton::ema_kernel::Loop;
    const std::int64_t n = baton::ema_kernel::kTuneElements + 12345;  // past the size that is timed
    std::vector<float> weights(static_cast<std::size_t>(n)), start(static_cast<std::size_t>(n));
    std::vector<std::uint16_t> halves(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < weights.size(); ++i) {
      weights[i] = static_cast<float>(std::cos(0.0007 * static_cast<double>(i)));
      start[i] = static_cast<float>(std::sin(0.0011 * static_cast<double>(i)));
      halves[i] = c10::Half(weights[i]).x;
    }
    auto steps = [&](std::optional<Loop> loop, int count, std::optional<Loop>* chosen = nullptr) {
      std::vector<float> ema32 = start, ema16 = start;
      baton::ema_kernel::Plan plan({{ema32.data(), weights.data(), n, Element::f32, Element::f32, false},
                                    {ema16.data(), halves.data(), n, Element::f32, Element::f16, false}});
      if (loop) plan.force_loop(*loop);
      for (int i = 0; i < count; ++i) {
        if (!loop) CHECK(plan.chosen_loop().has_value() == (i >= 2 * baton::ema_kernel::kTrialsPerLoop));
        plan.run(0.99 - 0.01 * i);
      }
      if (chosen) *chosen = plan.chosen_loop();
      ema32.insert(ema32.end(), ema16.begin(), ema16.end());
      return ema32;
    };
    const int count = 2 * baton::ema_kernel::kTrialsPerLoop + 2;
    std::optional<Loop> chosen;
    const auto plain = steps(Loop::plain, count);
    const auto prefetching = steps(Loop::prefetch, count);
    const auto tuned = steps(std::nullopt, count, &chosen);
    CHECK(std::vector<float>(plain.begin(), plain.begin() + n) != start);  // the steps did move the EMA
    CHECK((plain == prefetching));
    CHECK((plain == tuned));
    REQUIRE(chosen.has_value());
    const std::string choice = *chosen == Loop::plain ? "plain" : "prefetch";
    MESSAGE("loop chosen on this processor: " << choice);

    // A plan below the timed size runs the plain loop from its first update.
    std::vector<float> small(1000), small_w(1000, 1.0F);
    baton::ema_kernel::Plan little({{small.data(), small_w.data(), 1000, Element::f32, Element::f32, false}});
    CHECK(little.chosen_loop() == Loop::plain);
  }

  TEST_CASE("the kernel's fp16 conversions agree with c10::Half bit for bit (all halves; floats of every range)") {
    using baton::ema_kernel::Element;
    std::vector<std::uint16_t> halves(65536);
    for (std::size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<std::uint16_t>(i);
    std::vector<float> widened(halves.size());
    baton::ema_kernel::Plan({{widened.data(), halves.data(), 65536, Element::f32, Element::f16, true}}).run(0.5);
    int wrong = 0;
    for (std::size_t i = 0; i < halves.size(); ++i) {
      const float expected = static_cast<float>(c10::Half(halves[i], c10::Half::from_bits()));
      const bool same = std::isnan(expected) ? std::isnan(widened[i]) : std::memcmp(&expected, &widened[i], 4) == 0;
      wrong += same ? 0 : 1;
    }
    CHECK(wrong == 0);

    // Every half value, the midpoints between neighbours (ties round to even), and a sweep of float bit patterns
    // covering subnormal, overflowing, infinite and NaN inputs.
    std::vector<float> floats;
    for (std::uint32_t h = 0; h < 0x7C00; ++h) {
      const float a = static_cast<float>(c10::Half(static_cast<std::uint16_t>(h), c10::Half::from_bits()));
      const float b = static_cast<float>(c10::Half(static_cast<std::uint16_t>(h + 1), c10::Half::from_bits()));
      floats.push_back(a);
      floats.push_back(-(a + (b - a) / 2));
    }
    for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 40009) {
      float f;
      const auto b32 = static_cast<std::uint32_t>(bits);
      std::memcpy(&f, &b32, 4);
      floats.push_back(f);
    }
    std::vector<std::uint16_t> narrowed(floats.size());
    baton::ema_kernel::Plan({{narrowed.data(), floats.data(), static_cast<std::int64_t>(floats.size()), Element::f16,
                              Element::f32, true}})
        .run(0.5);
    wrong = 0;
    for (std::size_t i = 0; i < floats.size(); ++i) wrong += narrowed[i] == c10::Half(floats[i]).x ? 0 : 1;
    CHECK(wrong == 0);
  }
}
