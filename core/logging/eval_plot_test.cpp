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

  TEST_CASE("a chart without data says so") {
    std::string svg = baton::render_line_chart_svg({}, {});
    CHECK(svg.find("no data") != std::string::npos);
    CHECK(count(svg, "<polyline") == 0);
  }
}
