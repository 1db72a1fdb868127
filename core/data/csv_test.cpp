#include "baton_test.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "baton/components.h"
#include "baton/error.h"
#include "components/builtins.h"
#include "data/csv.h"
#include "data/data_test_support.h"
#include "error_text.h"

using baton::test::error_text;
using namespace baton;
using namespace baton::data_test;
namespace fs = std::filesystem;

// CSV files: the reader (header, quoting, gzip) and the csv dataset built on it.
TEST_SUITE("data") {
  TEST_CASE("csv: header names, quoted cells, whitespace, gzip and a skipped first line") {
    const auto dir = test::scratch_dir("data-csv");
    std::ofstream(dir / "named.csv") << "a, \"b\" ,target\n1,2,3\n\n4.5, -5e-1 ,\"6\"\n";
    csv::Table named = csv::read_table((dir / "named.csv").string(), csv::Format{});
    CHECK(named.names == std::vector<std::string>{"a", "b", "target"});
    CHECK(named.rows == 2);
    CHECK(named.at(1, 0) == 4.5);
    CHECK(named.at(1, 1) == -0.5);
    CHECK(named.at(1, 2) == 6);
    CHECK(csv::find_column(named, "target", "x") == 2);
    CHECK(csv::find_column(named, "-1", "x") == 2);
    CHECK(csv::find_column(named, "0", "x") == 0);
    CHECK(error_text([&] { csv::find_column(named, "label", "named.csv"); }) ==
          "named.csv: no column 'label'; the columns are a, b, target (or an index from 0; -1 is the last)");

    const std::string spaced = "59 2  32.1\t101.0\n48 1 21.6 87.0\n";
    write_gz(dir / "spaced.csv.gz", std::vector<std::uint8_t>(spaced.begin(), spaced.end()));
    csv::Table gz = csv::read_table((dir / "spaced.csv.gz").string(), csv::Format{'\0', csv::Header::none});
    CHECK(gz.names == std::vector<std::string>{"0", "1", "2", "3"});
    CHECK(gz.rows == 2);
    CHECK(gz.at(0, 3) == 101.0);

    std::ofstream(dir / "counts.csv") << "3,2,no,yes\n0.1,0.2,0\n0.3,0.4,1\n0.5,0.6,1\n";
    csv::Table skipped = csv::read_table((dir / "counts.csv").string(), csv::Format{',', csv::Header::skip});
    CHECK(skipped.rows == 3);
    CHECK(skipped.names.size() == 3);
  }

  TEST_CASE("csv: a ragged row, a cell that is not a number, a missing file and an empty one name where") {
    const auto dir = test::scratch_dir("data-csv-bad");
    const std::string ragged = (dir / "ragged.csv").string();
    std::ofstream(ragged) << "a,b\n1,2\n3\n";
    CHECK(error_text([&] { csv::read_table(ragged, csv::Format{}); }) ==
          ragged + ":3: 1 cells, expected 2 as on line 2");
    const std::string word = (dir / "word.csv").string();
    std::ofstream(word) << "a,b\n1,2\n3,abc\n";
    CHECK(error_text([&] { csv::read_table(word, csv::Format{}); }) == word + ":3:2: not a number: \"abc\"");
    // Another separator than the one read with: the hint names the key (issue 24 §11).
    const std::string semicolons = (dir / "semicolons.csv").string();
    std::ofstream(semicolons) << "a;b;y\n1;2;0\n";
    CHECK(error_text([&] { csv::read_table(semicolons, csv::Format{}); }) ==
          semicolons + ":2:1: not a number: \"1;2;0\" (the cells look separated by ';': set delimiter = \";\" in [data])");
    const std::string tabs = (dir / "tabs.csv").string();
    std::ofstream(tabs) << "a\tb\n1\t2\n";
    CHECK(error_text([&] { csv::read_table(tabs, csv::Format{}); }) ==
          tabs + ":2:1: not a number: \"1\t2\" (the cells look separated by tabs: set delimiter = \"whitespace\" in [data])");
    const std::string missing = (dir / "missing.csv").string();
    CHECK(error_text([&] { csv::read_table(missing, csv::Format{}); }) ==
          missing + ": cannot open: No such file or directory");
    const std::string empty = (dir / "empty.csv").string();
    std::ofstream(empty) << "a,b\n";
    CHECK(error_text([&] { csv::read_table(empty, csv::Format{}); }) == empty + ": no data rows");
  }

  TEST_CASE("the csv dataset: a seeded split, standardised inputs, regression or class targets") {
    const auto dir = test::scratch_dir("data-csv-dataset");
    const std::string file = (dir / "table.csv").string();
    std::ofstream out(file);
    out << "x1,x2,y\n";
    for (int i = 0; i < 20; ++i) out << i << "," << 100 + 10 * (i % 3) << "," << (i % 4) << "\n";
    out.close();
    Components c;
    register_builtin_datasets(c);
    const auto& factory = c.datasets.find("csv")->factory;
    DatasetContext context;
    context.seed = 5;
    const auto build = [&](const std::string& toml) {
      const PluginConfig config = PluginConfig::from_toml("path = \"" + file + "\"\n" + toml, "csv");
      DatasetSplits splits = factory(config, context);
      config.reject_unread();
      return splits;
    };

    const DatasetSplits regression = build("task = \"regression\"\ntarget = \"y\"\neval_fraction = 0.25");
    const auto& train = dynamic_cast<const TensorDataset&>(*regression.train);
    const auto& eval = dynamic_cast<const TensorDataset&>(*regression.eval);
    CHECK(train.size() == 15);
    CHECK(eval.size() == 5);
    CHECK_FALSE(train.spec().classification());
    CHECK(train.spec().input_shape == std::vector<std::int64_t>{2});
    CHECK((train.targets.scalar_type() == at::kFloat));
    // Standardised by the training rows: mean 0 and (population) standard deviation 1 there.
    CHECK(train.inputs.mean(0).abs().max().item<double>() < 1e-5);
    CHECK(train.inputs.std(0, false).sub(1).abs().max().item<double>() < 1e-5);
    // The split is a partition of the rows and depends only on the seed: x1 (row i holds i) tells the rows apart.
    const at::Tensor x1 = at::cat({train.inputs.select(1, 0), eval.inputs.select(1, 0)});
    CHECK(std::get<0>(at::_unique(x1)).size(0) == 20);
    const DatasetSplits again = build("task = \"regression\"\ntarget = \"y\"\neval_fraction = 0.25");
    CHECK(at::equal(dynamic_cast<const TensorDataset&>(*again.eval).inputs, eval.inputs));
    context.seed = 6;
    const DatasetSplits other = build("task = \"regression\"\ntarget = \"y\"\neval_fraction = 0.25");
    CHECK_FALSE(at::equal(dynamic_cast<const TensorDataset&>(*other.eval).inputs, eval.inputs));

    const DatasetSplits classes = build("task = \"classification\"\neval_fraction = 0\nstandardize = false");
    const auto& whole = dynamic_cast<const TensorDataset&>(*classes.train);
    CHECK(whole.size() == 20);
    CHECK(classes.eval->size() == 20);  // eval_fraction 0: the training rows themselves
    CHECK(whole.spec().num_classes == 4);
    CHECK((whole.targets.scalar_type() == at::kLong));
    CHECK(whole.inputs.select(1, 1).max().item<double>() == 120);  // as in the file

    const auto error = [&](const std::string& toml) { return error_text<ConfigError>([&] { build(toml); }); };
    CHECK(contains(error("target = \"y\""),
                   "plugins.csv.task: expected one of \"classification\", \"regression\", got nothing"));
    std::ofstream(dir / "fractions.csv") << "x,y\n1,0\n2,1.5\n3,1\n";
    const PluginConfig fractions = PluginConfig::from_toml(
        "path = \"" + (dir / "fractions.csv").string() + "\"\ntask = \"classification\"\neval_fraction = 0", "csv");
    CHECK(contains(error_text<ConfigError>([&] { factory(fractions, context); }),
                   "classification needs class numbers 0, 1, 2, ... in the target column, but row 2 holds 1.5"));
    CHECK(contains(error("task = \"classification\"\ntarget = \"z\"\n"), "no column 'z'; the columns are x1, x2, y"));
    CHECK(contains(error("task = \"regression\"\ndelimiter = \"::\""), "plugins.csv.delimiter: expected one character"));
    CHECK(contains(error("task = \"regression\"\neval_fraction = 0.01"), "leaves no evaluation rows of 20"));
  }
}
