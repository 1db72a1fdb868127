#pragma once
// A run's resolved config as MLflow parameters: one per value, named by its dotted path ("optimizer.lr",
// "trainer.max_duration"). The arrays of tables ([[plugins]], [[loggers]], [[eval]]) are named by each entry's
// `name` when the names are distinct ("plugins.ema.half_life"), else by position ("eval.0.name"); other arrays are
// one parameter, written as TOML ("[0.9, 0.999]"). Strings are their text, other values as TOML writes them.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace baton_mlflow {

/// The parameters of a TOML config text in file order, or nothing when the text is not TOML (an embedding
/// program's own config_text). Values longer than `max_value` bytes are cut there (MLflow's limit is 6000).
std::optional<std::vector<std::pair<std::string, std::string>>> run_params(const std::string& config_text,
                                                                           std::size_t max_value = 6000);

}  // namespace baton_mlflow
