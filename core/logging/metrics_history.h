#pragma once
// The evaluations a run folder's metrics.jsonl records, read back so that a resumed run's end-of-run table and
// chart cover the whole run, not only the evaluations of the process that finishes it.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "baton/time.h"

namespace baton {

struct LoggedEvaluation {
  Timestamp at;  // epoch, batch and sample as the line records them
  std::map<std::string, double> metrics;  // every metric of the line; null (a NaN or infinity) reads as NaN
};

/// The evaluations (lines with a metric named "eval…") in the metrics.jsonl at `path` that a run resumed at batch
/// `resumed_at` continues from, oldest first. Each process appends lines in increasing batch order, so a line
/// with a lower batch than the one before starts a later process, which replaces the evaluations recorded at or
/// after its first line; the evaluations after `resumed_at` belong to a stretch the resumed run trains again and
/// are left out. A missing file has none; a line that does not parse (cut short by a crash) is skipped.
std::vector<LoggedEvaluation> read_logged_evaluations(const std::string& path, std::int64_t resumed_at);

/// Every value of `metric` ("train/loss") in the metrics.jsonl at `path` as (batch, value), oldest first, with
/// the same rule for resumed runs: a line with a lower batch than the one before replaces the values at or after
/// it. null (a NaN or infinity) reads as NaN.
std::vector<std::pair<double, double>> read_logged_metric(const std::string& path, const std::string& metric);

}  // namespace baton
