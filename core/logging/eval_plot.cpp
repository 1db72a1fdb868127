#include "logging/eval_plot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "baton/error.h"
#include "baton/time.h"

namespace baton {
namespace {

constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 70, kRight = 200, kTop = 40, kBottom = 50;  // margins; the legend sits on the right
const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Short, as SVG coordinates and labels are many: format_number also writes -0 as 0.
std::string num(double v) { return format_number(v); }

// The ticks k * step in [lo, hi], each computed from its integer k (not by repeated addition, whose rounding
// turns the tick at zero into -1.4e-17, printed "-1.38778e-17" or "-0").
std::vector<double> ticks(double lo, double hi, double step) {
  std::vector<double> out;
  for (double k = std::ceil(lo / step); k * step <= hi * (1 + 1e-12) + 1e-300; k += 1) {
    const double t = k * step;
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return out;
}

// The dash pattern of the i-th series: the first solid, the others dashed, so a series drawn over another with
// the same values (the EMA before it starts, and the raw weights) leaves the one below visible.
const char* dash(std::size_t i) {
  static const char* const kDashes[] = {"", "7 5", "2 4", "10 3 2 3"};
  return kDashes[i % (sizeof kDashes / sizeof *kDashes)];
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `count` ticks over `span`.
double tick_step(double span, int count) {
  double raw = span / count;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

}  // namespace

std::string render_line_chart_svg(const std::vector<PlotSeries>& series, const PlotOptions& options) {
  double x_min = 1e300, x_max = -1e300, y_min = 1e300, y_max = -1e300;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_min = std::min(x_min, x), x_max = std::max(x_max, x);
      y_min = std::min(y_min, y), y_max = std::max(y_max, y);
    }
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << escape(options.title)
      << "</text>\n";
  if (x_min > x_max) {
    svg << "<text x=\"" << kWidth / 2 << "\" y=\"" << kHeight / 2 << "\" text-anchor=\"middle\">no data</text>\n</svg>\n";
    return svg.str();
  }
  // Pad a flat range so a single point or a constant series still gets a readable axis.
  if (x_max == x_min) x_min -= 1, x_max += 1;
  double pad = std::max((y_max - y_min) * 0.05, 1e-3);
  y_min -= pad, y_max += pad;
  double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x_min) / (x_max - x_min) * plot_w; };
  auto py = [&](double y) { return kTop + (1 - (y - y_min) / (y_max - y_min)) * plot_h; };

  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << plot_w << "\" height=\"" << plot_h
      << "\" fill=\"none\" stroke=\"#444\"/>\n";
  double ys = tick_step(y_max - y_min, 6);
  for (double y : ticks(y_min, y_max, ys))
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_w << "\" y1=\"" << num(py(y)) << "\" y2=\"" << num(py(y))
        << "\" stroke=\"#ddd\"/><text x=\"" << kLeft - 6 << "\" y=\"" << num(py(y) + 4)
        << "\" text-anchor=\"end\">" << num(y) << "</text>\n";
  double xs = tick_step(x_max - x_min, 6);
  for (double x : ticks(x_min, x_max, xs))
    svg << "<line x1=\"" << num(px(x)) << "\" x2=\"" << num(px(x)) << "\" y1=\"" << kTop << "\" y2=\"" << kTop + plot_h
        << "\" stroke=\"#eee\"/><text x=\"" << num(px(x)) << "\" y=\"" << kTop + plot_h + 16
        << "\" text-anchor=\"middle\">" << num(x) << "</text>\n";
  svg << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << kHeight - 12 << "\" text-anchor=\"middle\">"
      << escape(options.x_label) << "</text>\n"
      << "<text transform=\"translate(16," << kTop + plot_h / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << escape(options.y_label) << "</text>\n";

  for (std::size_t i = 0; i < series.size(); ++i) {
    const char* colour = kColours[i % (sizeof kColours / sizeof *kColours)];
    const std::string dashes = *dash(i) ? std::string(" stroke-dasharray=\"") + dash(i) + "\"" : "";
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dashes << " points=\"";
    for (const auto& [x, y] : series[i].points) svg << num(px(x)) << "," << num(py(y)) << " ";
    svg << "\"/>\n";
    // Later series' points hollow: one drawn over an earlier one shows as a ring around it.
    for (const auto& [x, y] : series[i].points)
      svg << "<circle cx=\"" << num(px(x)) << "\" cy=\"" << num(py(y)) << "\" r=\"" << (i == 0 ? 3 : 4.5)
          << "\" fill=\"" << (i == 0 ? colour : "none") << "\" stroke=\"" << colour << "\"/>\n";
    // A series with exactly the points of an earlier one says so in the legend: otherwise it looks missing.
    std::string label = series[i].label;
    for (std::size_t j = 0; j < i; ++j)
      if (series[j].points == series[i].points) {
        label += " (= " + series[j].label + ")";
        break;
      }
    double ly = kTop + 14 + 20 * static_cast<double>(i);
    svg << "<line x1=\"" << kWidth - kRight + 15 << "\" x2=\"" << kWidth - kRight + 40 << "\" y1=\"" << ly - 4
        << "\" y2=\"" << ly - 4 << "\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dashes << "/><text x=\""
        << kWidth - kRight + 46 << "\" y=\"" << ly << "\">" << escape(label) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

void write_line_chart_svg(const std::string& path, const std::vector<PlotSeries>& series, const PlotOptions& options) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << render_line_chart_svg(series, options);
    if (!out.flush()) throw Error("cannot write " + temporary);
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw Error("cannot write " + path + ": " + ec.message());
}

}  // namespace baton
