#pragma once
// Numeric tables from CSV files (plain or gzip-compressed), for the `csv` dataset: the parsing and the checks, with
// errors that name the file, the line and the column. No LibTorch here: the dataset turns the table into tensors.
#include <cstdint>
#include <string>
#include <vector>

namespace baton::csv {

enum class Header {
  names,  // the first line names the columns
  none,   // every line is data
  skip,   // the first line is something else (scikit-learn's files hold counts and class names there): skipped
};

struct Format {
  char delimiter = ',';     // '\0': runs of spaces and tabs
  Header header = Header::names;
};

struct Table {
  std::vector<std::string> names;  // the header's names, or "0", "1", ... without one
  std::int64_t rows = 0;
  std::vector<double> values;      // rows x names.size(), row-major
  double at(std::int64_t row, std::size_t column) const { return values[row * names.size() + column]; }
};

/// Reads a whole table. Every data line must have as many cells as the first, each a number (surrounding spaces and
/// double quotes allowed); an empty line ends nothing and is skipped. Throws baton::Error: "<path>: cannot open: No
/// such file or directory", "<path>:12: 13 cells, expected 14 as on line 2", "<path>:7:3: not a number: \"abc\"".
Table read_table(const std::string& path, const Format& format);

/// The column `target` names: a header name, or an index ("-1" is the last column). Throws baton::Error listing the
/// names when there is no such column (and, for a table of one column, the delimiter its name suggests).
std::size_t find_column(const Table& table, const std::string& target, const std::string& path, char delimiter = ',');

}  // namespace baton::csv
