#include <doctest/doctest.h>

#include <string>

#include "logging/eval_plot.h"

namespace {

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("logging") {
  TEST_CASE("a line chart has one polyline and one legend entry per series, points inside the plot area") {
    std::vector<baton::PlotSeries> series = {{"eval/accuracy", {{469, 0.85}, {938, 0.90}}},
                                             {"eval_raw/accuracy", {{469, 0.84}, {938, 0.89}}}};
    baton::PlotOptions options;
    options.title = "accuracy <raw & ema>";
    options.y_label = "accuracy";
    std::string svg = baton::render_line_chart_svg(series, options);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    CHECK(count(svg, "<polyline") == 2);
    CHECK(count(svg, "<circle") == 4);
    CHECK(svg.find(">eval/accuracy</text>") != std::string::npos);
    CHECK(svg.find(">eval_raw/accuracy</text>") != std::string::npos);
    CHECK(svg.find("accuracy &lt;raw &amp; ema&gt;") != std::string::npos);  // the title is escaped
    // The first x lands on the left edge of the plot (x = 70), the last on the right edge (720 - 200 = 520).
    CHECK(svg.find("points=\"70,") != std::string::npos);
    CHECK(svg.find(" 520,") != std::string::npos);
  }

  TEST_CASE("issue 24 §15: no -0 tick; a second series is dashed, and one equal to an earlier one says so") {
    // y from -0.04 to 0.5, padded by 5 % of the span to [-0.067, 0.527]: ticks every 0.1 from ceil(-0.67) = -0.0
    // times 0.1, which printed as "-0".
    std::vector<baton::PlotSeries> series = {{"eval/loss", {{0, -0.04}, {10, 0.5}}},
                                             {"eval_raw/loss", {{0, -0.04}, {10, 0.5}}}};
    const std::string svg = baton::render_line_chart_svg(series, {});
    CHECK(svg.find("\">0</text>") != std::string::npos);
    CHECK(svg.find(">-0</text>") == std::string::npos);
    CHECK(svg.find("\">0.5</text>") != std::string::npos);
    CHECK(count(svg, "stroke-dasharray=\"7 5\"") == 2);  // the second series' line and its legend entry
    CHECK(svg.find(">eval_raw/loss (= eval/loss)</text>") != std::string::npos);
    CHECK(svg.find(">eval/loss</text>") != std::string::npos);
  }

  TEST_CASE("a chart without data says so") {
    std::string svg = baton::render_line_chart_svg({}, {});
    CHECK(svg.find("no data") != std::string::npos);
    CHECK(count(svg, "<polyline") == 0);
  }
}
