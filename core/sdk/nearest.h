#pragma once
// "Did you mean": the known names closest to a mistyped one, for messages about an unknown subcommand, plugin or
// component. Header-only and private (not part of the SDK).
#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace baton::detail {

// Levenshtein distance with adjacent transpositions counted as one edit ("trian" is one edit from "train").
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The candidates within a third of the word's length (at least 1, at most 3 edits) of `word`, or that start with
// it or it with them, closest first (ties in the candidates' order).
inline std::vector<std::string> nearest_names(const std::string& word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::min<std::size_t>(3, std::max<std::size_t>(1, word.size() / 3));
  std::vector<std::pair<std::size_t, std::string>> close;
  for (const auto& c : candidates) {
    const std::size_t distance = edit_distance(word, c);
    const bool prefix = !word.empty() && (c.rfind(word, 0) == 0 || word.rfind(c, 0) == 0);
    if (c != word && (distance <= limit || prefix)) close.emplace_back(distance, c);
  }
  std::stable_sort(close.begin(), close.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (auto& [distance, name] : close)
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

// " (did you mean 'train'?)", " (did you mean 'ema' or 'emb'?)", or "" when none is close.
inline std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const auto close = nearest_names(word, candidates);
  if (close.empty()) return "";
  std::string out = " (did you mean ";
  for (std::size_t i = 0; i < close.size() && i < 3; ++i)
    out += (i == 0 ? "" : i + 1 == std::min<std::size_t>(close.size(), 3) ? " or " : ", ") + ("'" + close[i] + "'");
  return out + "?)";
}

}  // namespace baton::detail
