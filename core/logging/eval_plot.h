#pragma once
// A line chart of metrics over training time as a standalone SVG file (opens in any browser), e.g. the raw and EMA
// test accuracy per evaluation. No plotting library: the chart is small and fixed in form.
#include <string>
#include <utility>
#include <vector>


namespace baton {

struct PlotSeries {
  std::string label;                           // "eval/accuracy"
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct PlotOptions {
  std::string title;
  std::string x_label = "batch";
  std::string y_label;
};

/// The SVG text of a chart of `series` (an empty series list gives a chart saying "no data").
std::string render_line_chart_svg(const std::vector<PlotSeries>& series, const PlotOptions& options);

/// Writes the chart to `path` atomically. Throws baton::Error naming the file.
void write_line_chart_svg(const std::string& path, const std::vector<PlotSeries>& series,
                                    const PlotOptions& options);

}  // namespace baton
