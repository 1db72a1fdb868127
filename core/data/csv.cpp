#include "data/csv.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "baton/error.h"

namespace baton::csv {
namespace {

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};

// The file's text; zlib reads gzip-compressed and plain files alike.
std::string read_text(const std::string& path) {
  errno = 0;
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) throw Error(path + ": cannot open: " + std::string(errno ? std::strerror(errno) : "out of memory"));
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const int got = gzread(file.get(), buffer, sizeof buffer);
    if (got < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw Error(path + ": read error: " + (code == Z_ERRNO ? std::strerror(errno) : message ? message : "zlib"));
    }
    if (got == 0) return text;
    text.append(buffer, static_cast<std::size_t>(got));
  }
}

std::string trim(std::string cell) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!cell.empty() && blank(cell.back())) cell.pop_back();
  std::size_t start = 0;
  while (start < cell.size() && blank(cell[start])) ++start;
  cell.erase(0, start);
  if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
  return cell;
}

std::vector<std::string> split(const std::string& line, char delimiter) {
  std::vector<std::string> cells;
  if (delimiter == '\0') {
    std::size_t at = 0;
    while (at < line.size()) {
      while (at < line.size() && (line[at] == ' ' || line[at] == '\t' || line[at] == '\r')) ++at;
      if (at == line.size()) break;
      std::size_t end = at;
      while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '\r') ++end;
      cells.push_back(line.substr(at, end - at));
      at = end;
    }
    return cells;
  }
  std::size_t start = 0;
  while (true) {
    const std::size_t end = line.find(delimiter, start);
    cells.push_back(trim(line.substr(start, end == std::string::npos ? std::string::npos : end - start)));
    if (end == std::string::npos) return cells;
    start = end + 1;
  }
}

bool blank_line(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

// A file written with another separator (';' from a spreadsheet in a comma-decimal locale, tabs) reads as one
// column whose cells hold the whole row: the hint names the key that reads it. "" when no other separator shows.
std::string delimiter_hint(const std::string& text, char delimiter) {
  for (const char other : {';', '\t', '|', ','}) {
    if (other == delimiter || text.find(other) == std::string::npos) continue;
    if (other == '\t' && delimiter == '\0') continue;  // "whitespace" already splits at tabs
    const std::string key = other == '\t' ? "delimiter = \"whitespace\"" : "delimiter = \"" + std::string(1, other) + "\"";
    const std::string shown = other == '\t' ? "tabs" : "'" + std::string(1, other) + "'";
    return " (the cells look separated by " + shown + ": set " + key + " in [data])";
  }
  return "";
}

}  // namespace

Table read_table(const std::string& path, const Format& format) {
  const std::string text = read_text(path);
  Table table;
  std::size_t columns = 0;
  std::int64_t first_data_line = 0;
  std::int64_t line_number = 0;
  bool header_seen = format.header == Header::none;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (blank_line(line)) continue;
    const std::vector<std::string> cells = split(line, format.delimiter);
    if (!header_seen) {
      header_seen = true;
      if (format.header == Header::names) table.names = cells;
      continue;
    }
    if (columns == 0) {
      columns = cells.size();
      first_data_line = line_number;
      if (!table.names.empty() && table.names.size() != columns)
        throw Error(path + ":" + std::to_string(line_number) + ": " + std::to_string(columns) +
                    " cells, but the header names " + std::to_string(table.names.size()) + " columns");
    }
    if (cells.size() != columns)
      throw Error(path + ":" + std::to_string(line_number) + ": " + std::to_string(cells.size()) + " cells, expected " +
                  std::to_string(columns) + " as on line " + std::to_string(first_data_line));
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string& cell = cells[c];
      char* parsed_end = nullptr;
      errno = 0;
      const double value = cell.empty() ? 0 : std::strtod(cell.c_str(), &parsed_end);
      if (cell.empty() || parsed_end != cell.c_str() + cell.size() || !std::isfinite(value))
        throw Error(path + ":" + std::to_string(line_number) + ":" + std::to_string(c + 1) + ": not a number: \"" +
                    cell + "\"" + delimiter_hint(cell, format.delimiter));
      table.values.push_back(value);
    }
    ++table.rows;
  }
  if (table.rows == 0) throw Error(path + ": no data rows");
  if (table.names.empty())
    for (std::size_t c = 0; c < columns; ++c) table.names.push_back(std::to_string(c));
  return table;
}

std::size_t find_column(const Table& table, const std::string& target, const std::string& path, char delimiter) {
  for (std::size_t c = 0; c < table.names.size(); ++c)
    if (table.names[c] == target) return c;
  char* end = nullptr;
  const long index = std::strtol(target.c_str(), &end, 10);
  const auto columns = static_cast<long>(table.names.size());
  if (!target.empty() && end == target.c_str() + target.size() && index >= -columns && index < columns)
    return static_cast<std::size_t>(index < 0 ? index + columns : index);
  std::string names;
  for (const auto& name : table.names) names += (names.empty() ? "" : ", ") + name;
  throw Error(path + ": no column '" + target + "'; the columns are " + names + " (or an index from 0; -1 is the last)" +
              (table.names.size() == 1 ? delimiter_hint(table.names.front(), delimiter) : std::string()));
}

}  // namespace baton::csv
